// A session's file stream: one file of the target container (opened inside its root), its size then its bytes.
import type { MuxStream } from '../../shared/mux.js';
import { deniedByCapabilities } from '../capabilities.js';
import { openInTarget, type TargetFile } from './open-in-target.js';

export async function serveFile(stream: MuxStream, path: string, pid: number): Promise<void> {
  stream.on('error', () => undefined);
  stream.resume(); // nothing to read from the CLI on a file stream
  let file: TargetFile;
  try {
    file = await openInTarget(pid, path);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? 'EINVAL';
    if (code === 'EISDIR') {
      stream.reset(`EISDIR: ${path} is a directory`);
      return;
    }
    const denied = deniedByCapabilities(err, `reading ${path} in the target container`);
    const detail = denied ? `${denied.message} (${denied.hint})` : (err as Error).message;
    stream.reset(`${code}: ${path}: ${detail}`);
    return;
  }
  stream.accept({ size: file.size });
  stream.on('error', () => file.close());
  file.content.once('error', (err: NodeJS.ErrnoException) => stream.reset(`${err.code ?? 'EIO'}: ${path}`));
  file.content.pipe(stream);
}
