// The file calls the agent makes, as promises over node:fs's callback API. node:fs/promises would stay loaded for the
// agent's whole life, with its FileHandle streams and readline: ~1 MiB of RSS for a handful of small files read (/proc
// entries; the target's own files come through devop-open: agent/files/open-in-target.ts). test/agent/bundle.test.ts
// checks it stays unloaded.
import { readdir as readdirCb, readFile as readFileCb, stat as statCb } from 'node:fs';
import { promisify } from 'node:util';

export const readdir = promisify(readdirCb);
export const readFile = promisify(readFileCb);
export const stat = promisify(statCb);
