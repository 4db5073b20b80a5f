// The file calls the agent makes, as promises over node:fs's callback API. node:fs/promises would stay loaded for the
// agent's whole life, with its FileHandle streams and readline: ~1 MiB of RSS for a handful of small files read
// (/proc entries, the target's resolv.conf and hosts). test/agent/bundle.test.ts checks it stays unloaded.
import {
  lstat as lstatCb,
  readdir as readdirCb,
  readFile as readFileCb,
  readlink as readlinkCb,
  stat as statCb,
} from 'node:fs';
import { promisify } from 'node:util';

export const lstat = promisify(lstatCb);
export const readdir = promisify(readdirCb);
export const readFile = promisify(readFileCb);
export const readlink = promisify(readlinkCb);
export const stat = promisify(statCb);
