// The --output modes every command that reports takes: the choices of the `output` option (cli/config/options.ts), kept
// apart from the reporters so that defining the flags loads none of them.
import { OPTIONS } from '../config/options.js';

export const OUTPUT_MODES = OPTIONS.output.choices;
export type OutputMode = (typeof OUTPUT_MODES)[number];
