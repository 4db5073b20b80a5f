// `npm run cluster:load -- <archive.oci.tar>…`: loads image archives into the stand-in's node, as `kind load
// image-archive` does (ctr images import into the containerd namespace its pods run from); a pod waiting in
// ImagePullBackOff for one of them starts at its next pull.
import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { ctr, ensureContainerd, K8S_NAMESPACE } from './kubelet/containerd.js';

/** An import reads the whole archive (100 MB and more). */
const IMPORT_TIMEOUT_MS = 600_000;

async function main(): Promise<void> {
  const archives = process.argv.slice(2);
  if (archives.length === 0) {
    console.error(
      'devop cluster:load: no archive given — fix: npm run cluster:load -- <image>.oci.tar (an OCI archive)',
    );
    process.exit(2);
  }
  for (const archive of archives) {
    if (!existsSync(archive)) {
      console.error(`devop cluster:load: ${archive} does not exist — fix: pass the path of an OCI archive (*.oci.tar)`);
      process.exit(2);
    }
  }
  await ensureContainerd();
  for (const archive of archives) {
    const out = await ctr(['images', 'import', resolve(archive)], undefined, IMPORT_TIMEOUT_MS);
    process.stdout.write(out);
  }
  console.log(`loaded into the node's containerd namespace ${K8S_NAMESPACE}`);
}

main().catch((e) => {
  const hint = (e as { hint?: unknown }).hint;
  console.error(
    'devop cluster:load:',
    e instanceof Error ? e.message : e,
    typeof hint === 'string' ? `— fix: ${hint}` : '',
  );
  process.exit(1);
});
