// A line sink over a stream that a reader may close early (`devop … | head`): the first write error (EPIPE) silences it
// instead of crashing devop with an unhandled 'error' event.
export class LineSink {
  private broken = false;

  constructor(private readonly stream: NodeJS.WritableStream) {
    stream.on('error', this.onError);
  }

  write(text: string): void {
    if (this.broken || isGone(this.stream)) return;
    this.stream.write(text);
  }

  /** Resolves once everything written so far is handed to the OS (or the stream broke), so exit does not cut lines. */
  flush(): Promise<void> {
    if (this.broken || isGone(this.stream)) return Promise.resolve();
    return new Promise((resolve) => {
      // A stream destroyed by an EPIPE drops pending write callbacks: 'close' ends the wait then.
      const done = (): void => {
        this.stream.removeListener('error', done);
        this.stream.removeListener('close', done);
        resolve();
      };
      this.stream.once('error', done);
      this.stream.once('close', done);
      this.stream.write('', done);
    });
  }

  dispose(): void {
    this.stream.removeListener('error', this.onError);
  }

  private readonly onError = (): void => {
    this.broken = true;
  };
}

function isGone(stream: NodeJS.WritableStream): boolean {
  const state = stream as NodeJS.WritableStream & { destroyed?: boolean; writableEnded?: boolean };
  return Boolean(state.destroyed || state.writableEnded);
}
