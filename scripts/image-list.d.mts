export interface ImageEntry {
  /** Archive name: dist/images/<name>.oci.tar. */
  name: string;
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
