// One HAR 1.2 entry as devop writes it (a stolen HTTP exchange) and its headers and bodies: apart from har.ts so that
// redact.ts, which har.ts uses, can name them.

export interface HarHeader {
  name: string;
  value: string;
}

/** A body as HAR keeps it: text when it is UTF-8, else base64; `_cut` when only the first BODY_LIMIT_BYTES are kept. */
export interface HarBody {
  mimeType: string;
  text: string;
  encoding?: 'base64';
  /** The whole body's length (what `size` says for a response). */
  size: number;
  _cut?: boolean;
}

export interface HarEntry {
  startedDateTime: string;
  time: number;
  request: {
    method: string;
    url: string;
    httpVersion: string;
    cookies: [];
    headers: HarHeader[];
    queryString: HarHeader[];
    postData?: { mimeType: string; text: string; _encoding?: 'base64'; _cut?: boolean };
    headersSize: -1;
    bodySize: number;
  };
  response: {
    status: number;
    statusText: string;
    httpVersion: string;
    cookies: [];
    headers: HarHeader[];
    content: HarBody;
    redirectURL: '';
    headersSize: -1;
    bodySize: number;
    /** HTTP/2 trailers (a gRPC call's grpc-status and grpc-message); HAR 1.2 has no field for them. */
    _trailers?: HarHeader[];
  };
  cache: Record<string, never>;
  timings: { blocked: -1; dns: -1; connect: -1; ssl: -1; send: number; wait: number; receive: number };
  /** The pod whose traffic this was. */
  _pod?: string;
  /** The pod's port it reached. */
  _port: number;
  /** The local command's port that answered (replay's default destination). */
  _localPort: number;
  /** What was left out (`request header authorization`, `response body Secret values`); absent: nothing. */
  _redacted?: string[];
}
