// Types of oci-archive.mjs, for the TypeScript that imports it (the images tests).
export interface OciLayer { path: string; size: number; mediaType: string }
export interface OciImageConfig {
  os: string;
  architecture: string;
  config: { Entrypoint?: string[]; Cmd?: string[]; Env: string[]; Labels?: Record<string, string> };
}
export interface OciImage { ref: string | undefined; digest: string; config: OciImageConfig; layers: OciLayer[] }
export declare function archiveRefs(archive: string): Map<string, string>;
export declare function updateArchive(archive: string, layouts: readonly string[], keep: readonly string[]): void;
export declare function withUnpackedArchive<T>(archive: string, use: (dir: string) => Promise<T> | T): Promise<T>;
export declare function describeLayout(dir: string): OciImage[];
export declare function layerSize(layer: OciLayer): Promise<number>;
export declare function imageSizes(image: OciImage): Promise<{ uncompressed: number; gzip: number }>;
export declare function imageFiles(image: OciImage): Map<string, string>;
export declare function formatMB(bytes: number): string;
