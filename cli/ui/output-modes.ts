// The --output modes every command that reports takes (kept apart from the reporters, so that defining the flags loads
// none of them).
export type OutputMode = 'auto' | 'plain' | 'json';

export const OUTPUT_MODES: readonly OutputMode[] = ['auto', 'plain', 'json'];
