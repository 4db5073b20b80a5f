// The examples' container images as the stand-in cluster runs them: each image name maps to `node --import tsx
// <main.ts>` from this checkout (a real cluster would run an image built from the same entry point).
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

export interface ExampleImage {
  entrypoint: string[];
  cmd: string[];
}

/**
 * Image names used by the examples' manifests (and the walkthrough's `kubectl set image`), for a checkout at `root`.
 */
export function exampleImages(root: string, node: string = process.execPath): Record<string, ExampleImage> {
  const tsx = pathToFileURL(join(root, 'node_modules', 'tsx', 'dist', 'loader.mjs')).href;
  const farmMain = join(root, 'examples', 'farm-operator', 'src', 'main.ts');
  const farm = (step: number): ExampleImage => ({
    entrypoint: [node, '--import', tsx, farmMain],
    cmd: ['--step', String(step)],
  });
  return {
    'devop.test/farm-operator:step1': farm(1),
    'devop.test/farm-operator:step2': farm(2),
    'devop.test/farm-operator:step3': farm(3),
    'devop.test/echo-controller': {
      entrypoint: [node, '--import', tsx, join(root, 'examples', 'echo-controller', 'src', 'main.ts')],
      cmd: [],
    },
  };
}
