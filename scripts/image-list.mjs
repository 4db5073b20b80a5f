// The OCI images `npm run images` builds: name, the archive it goes into, its image references and its Dockerfile.
// The stand-in's kubelet imports these archives into containerd, so names and references are a contract.
import { readFileSync } from 'node:fs';

const { version } = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'));

/** The Node major of the base: an LTS line still maintained (24: until April 2028). The agent runs on it. */
export const NODE_MAJOR = 24;
/** The base every Dockerfile starts from (`FROM node:24-bookworm-slim`), made locally by scripts/images.mjs. */
export const NODE_BASE_REF = `docker.io/library/node:${NODE_MAJOR}-bookworm-slim`;
/** Debian alone (`FROM debian:bookworm-slim`): the agent's and python3's runtime stage, and the Node base's parent. */
export const DEBIAN_BASE_REF = 'docker.io/library/debian:bookworm-slim';

/**
 * Where archives go: `<dir>/<archive>.oci.tar`, and per image `<name>.inputs` (the hash of what it was built from) and
 * `<name>.log`.
 */
export const IMAGES_DIR = 'dist/images';

/**
 * The archive of every image but the agent's: they are all built on the two bases, so one archive holds the bases'
 * layers once (80 MB) where an archive per image held them in each. The agent's archive is its own: it shares no layer
 * with them, and people load it alone into kind, minikube or k3d (docs/exec.md).
 */
const WORKLOADS = 'workloads';

/** @type {readonly import('./image-list.d.mts').ImageEntry[]} */
export const IMAGES = [
  { name: 'node-base', archive: WORKLOADS, refs: [NODE_BASE_REF] },
  {
    name: 'shell',
    archive: WORKLOADS,
    dockerfile: 'standin/images/shell.Dockerfile',
    refs: ['docker.io/library/busybox:latest', 'devop.test/shell:latest'],
  },
  {
    name: 'http-echo',
    archive: WORKLOADS,
    dockerfile: 'standin/images/http-echo.Dockerfile',
    refs: ['devop.test/http-echo:latest'],
  },
  {
    name: 'grpc-echo',
    archive: WORKLOADS,
    dockerfile: 'standin/images/grpc-echo.Dockerfile',
    refs: ['devop.test/grpc-echo:latest'],
  },
  {
    name: 'python3',
    archive: WORKLOADS,
    dockerfile: 'standin/images/python3.Dockerfile',
    refs: ['devop.test/python3:latest'],
  },
  { name: 'agent', archive: 'agent', dockerfile: 'Dockerfile.agent', refs: [`ghcr.io/devop/agent:${version}`] },
  ...[1, 2, 3].map((step) => ({
    name: `farm-operator-step${step}`,
    archive: WORKLOADS,
    dockerfile: 'examples/farm-operator/Dockerfile',
    buildArgs: { STEP: String(step) },
    refs: [`devop.test/farm-operator:step${step}`],
  })),
  {
    name: 'echo-controller',
    archive: WORKLOADS,
    dockerfile: 'examples/echo-controller/Dockerfile',
    refs: ['devop.test/echo-controller:latest'],
  },
];

/** The archives, each once, in the order of their first image. */
export const ARCHIVES = [...new Set(IMAGES.map((e) => e.archive))];
