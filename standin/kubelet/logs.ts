// The reader behind pods/log: container log files in the CRI format kubelet reads (`<RFC3339Nano> <stream> <F|P>
// <text>`, written by container-logger.c), with tailLines, timestamps and follow (until the attempt ends).
import { open, readFile } from 'node:fs/promises';
import { Readable } from 'node:stream';

/** How often a follower looks for appended lines. */
const FOLLOW_POLL_MS = 100;

interface ParsedLine {
  time: string;
  text: string;
  partial: boolean;
}

function parseLine(line: string): ParsedLine | undefined {
  // dotAll: a line's text may hold a "\r" (only "\r\n" ends a line), which `.` alone does not match.
  const m = /^(\S+) (stdout|stderr) ([FP]) (.*)$/s.exec(line);
  return m ? { time: m[1], text: m[4], partial: m[3] === 'P' } : undefined;
}

/**
 * A log line's time as kubelet writes it out (kuberuntime/logs/logs.go: timeFormatOut, RFC3339NanoFixed, nine digits
 * always), from the file's RFC3339Nano (trailing zeros of the fraction dropped, as Go formats it).
 */
function fixedNanos(time: string): string {
  return time.replace(
    /^([^.]*?)(?:\.(\d{1,9}))?Z$/,
    (_, seconds: string, fraction = '') => `${seconds}.${fraction.padEnd(9, '0')}Z`,
  );
}

function format(line: ParsedLine, timestamps: boolean): string {
  return `${timestamps ? `${fixedNanos(line.time)} ` : ''}${line.text}${line.partial ? '' : '\n'}`;
}

export interface LogReadOptions {
  follow: boolean;
  tailLines?: number;
  timestamps?: boolean;
  /** True once no more lines will be appended (the attempt has ended and its writer is closed). */
  ended: () => boolean;
}

/** A Readable of a log file's content as `kubectl logs` shows it. */
export function readContainerLog(path: string, opts: LogReadOptions): Readable {
  let offset = 0;
  let carry = '';
  let timer: NodeJS.Timeout | undefined;
  let first = true;
  let reading = false;
  const timestamps = Boolean(opts.timestamps);

  const readable = new Readable({
    read() {
      if (!reading && !timer) void pump();
    },
    destroy(err, cb) {
      if (timer) clearTimeout(timer);
      timer = undefined;
      cb(err);
    },
  });

  async function readNew(): Promise<string[]> {
    let data = '';
    if (first) {
      data = await readFile(path, 'utf8').catch(() => '');
      offset = Buffer.byteLength(data);
    } else {
      const fh = await open(path, 'r').catch(() => undefined);
      if (!fh) return [];
      try {
        const { size } = await fh.stat();
        if (size > offset) {
          const buf = Buffer.alloc(size - offset);
          await fh.read(buf, 0, buf.length, offset);
          offset = size;
          data = buf.toString('utf8');
        }
      } finally {
        await fh.close();
      }
    }
    const lines = (carry + data).split('\n');
    carry = lines.pop() ?? '';
    let out = lines;
    if (first && opts.tailLines !== undefined) out = opts.tailLines <= 0 ? [] : lines.slice(-opts.tailLines);
    first = false;
    return out;
  }

  async function pump(): Promise<void> {
    reading = true;
    try {
      const endedBefore = opts.ended();
      const lines = await readNew();
      if (readable.destroyed) return;
      const text = lines
        .map(parseLine)
        .filter((l): l is ParsedLine => Boolean(l))
        .map((l) => format(l, timestamps))
        .join('');
      if (text) readable.push(text);
      if (!opts.follow || endedBefore) {
        readable.push(null);
        return;
      }
      if (!text)
        timer = setTimeout(() => {
          timer = undefined;
          void pump();
        }, FOLLOW_POLL_MS);
    } catch (err) {
      readable.destroy(err as Error);
    } finally {
      reading = false;
    }
  }

  return readable;
}
