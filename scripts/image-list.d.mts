export interface ImageEntry {
  /** The image's name (`npm run images -- <name>`; dist/images/<name>.inputs and .log). */
  name: string;
  /** The archive it goes into, dist/images/<archive>.oci.tar, with the other images of that archive. */
  archive: string;
  /** Image references the archive carries (what `ctr images import` registers). */
  refs: readonly string[];
  /** Dockerfile (repository-relative, built with the repository root as context); none for the Node base. */
  dockerfile?: string;
  buildArgs?: Readonly<Record<string, string>>;
}
export const NODE_MAJOR: number;
export const NODE_BASE_REF: string;
export const DEBIAN_BASE_REF: string;
export const IMAGES_DIR: string;
export const IMAGES: readonly ImageEntry[];
export const ARCHIVES: readonly string[];
