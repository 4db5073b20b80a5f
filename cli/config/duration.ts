// The one reading of a duration, for every flag and devop.json key that takes one: a number of seconds ("90", "1.5"),
// or number+unit parts ("500ms", "90s", "2m", "1h", "1m30s": kubectl's --request-timeout syntax).
import { UserError } from '../../shared/errors.js';

const UNIT_MS: Readonly<Record<string, number>> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };
/** The syntax (devop.schema.json carries it as the key's pattern); blanks around it are ignored. */
export const DURATION = /^\s*(?:\d+(?:\.\d+)?|(?:\d+(?:\.\d+)?(?:ms|s|m|h))+)\s*$/;

/** A duration's milliseconds (rounded), or undefined when the text is not one. */
export function durationMs(value: string | number): number | undefined {
  const text = String(value).trim();
  if (!DURATION.test(text)) return undefined;
  if (/^[\d.]+$/.test(text)) return Math.round(Number(text) * 1000);
  const parts = [...text.matchAll(/(\d+(?:\.\d+)?)(ms|s|m|h)/g)];
  return Math.round(parts.reduce((ms, [, n, unit]) => ms + Number(n) * UNIT_MS[unit], 0));
}

/** `90`, `90s`, `1500ms`, `2m`, `1m30s` → milliseconds; anything else is one line naming the flag and the syntax. */
export function parseDuration(text: string, flag: string): number {
  const ms = durationMs(text);
  if (ms === undefined)
    throw new UserError(
      `${flag} ${text} is not a duration`,
      `pass seconds (e.g. ${flag} 60) or a number with ms, s, m or h (e.g. 1m30s)`,
    );
  return ms;
}

/**
 * A --request-timeout value as kubectl reads it: a number of seconds ("10"), or a duration with units ("10s", "1m",
 * "1m30s", "500ms"); 0 means no timeout. Returns milliseconds.
 */
export function parseRequestTimeout(value: string | number, source = '--request-timeout'): number {
  const text = String(value).trim();
  const ms = durationMs(text);
  if (ms === undefined) {
    throw new UserError(
      `invalid ${source} "${text}": not a number of seconds or a duration`,
      `pass a whole number of seconds or a number with a unit (e.g. 10s, 1m, 1m30s, 500ms), or 0 for no timeout`,
    );
  }
  return ms;
}
