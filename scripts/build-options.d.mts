// Types of build-options.mjs, for the TypeScript that imports it (the benchmark).
import type { BuildOptions } from 'esbuild';
export declare const common: BuildOptions;
export declare const banner: { js: string };
