// /debug/flags as kube-apiserver serves it with --profiling (its default): k8s.io/apiserver pkg/server/routes/flags.go
// installs an index and /debug/flags/v, whose PUT sets the log verbosity (component-base logs.GlogSetter) — a
// non-resource write that no dryRun reaches. The stand-in keeps the value so that a test can see it change.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { readRawBody } from './write-options.js';

export interface DebugFlags {
  /** The verbosity last set through PUT /debug/flags/v ("0" at start, as kube-apiserver without --v). */
  verbosity(): string;
  /** Answers a request under /debug/flags (already authorized). */
  serve(req: IncomingMessage, res: ServerResponse, path: string): Promise<void>;
}

/** strconv.ParseInt(value, 10, 32), as klog's Level.Set parses the body. */
const INT32 = /^[+-]?\d+$/;
const INT32_MAX = 2 ** 31 - 1;

function plain(res: ServerResponse, code: number, text: string): void {
  // writePlainText: text/plain, nosniff, the text and a newline (fmt.Fprintln).
  res.writeHead(code, { 'Content-Type': 'text/plain', 'X-Content-Type-Options': 'nosniff' });
  res.end(`${text}\n`);
}

export function debugFlags(): DebugFlags {
  let v = '0';
  return {
    verbosity: () => v,
    async serve(req, res, path) {
      if (path !== '/debug/flags/v') {
        res.writeHead(200, { 'Content-Type': 'text/html; charset=utf-8' });
        return void res.end(
          '<html>\n<head>\n<title>/debug/flags/</title>\n</head>\n<body>\n/debug/flags/<br>\n' +
            '<br>\nflags:<br>\n<table>\n<tr>v<br>\n</table>\n<br>\nfull flags configurable<br>\n</body>\n</html>\n',
        );
      }
      // StringFlagPutHandler: PUT only; the body is the new value.
      if (req.method !== 'PUT') return plain(res, 406, 'unsupported http method');
      const value = (await readRawBody(req)).toString('utf8');
      if (!INT32.test(value) || Math.abs(Number(value)) > INT32_MAX) {
        const why = INT32.test(value) ? 'value out of range' : 'invalid syntax';
        return plain(
          res,
          400,
          `failed set klog.logging.verbosity ${value}: strconv.ParseInt: parsing ${JSON.stringify(value)}: ${why}`,
        );
      }
      v = value;
      plain(res, 200, `successfully set klog.logging.verbosity to ${value}`);
    },
  };
}
