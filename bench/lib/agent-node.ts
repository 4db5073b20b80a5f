// The Node the agent really runs on, for the benches' agent processes: the node binary inside the agent image
// (dist/images/agent.oci.tar, `npm run images -- agent`), not the machine's. DEVOP_TEST_AGENT_NODE names another one
// (to compare Node versions on the same code).
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { IMAGES_DIR } from '../../scripts/image-list.mjs';
import { describeLayout, withUnpackedArchive } from '../../scripts/oci-archive.mjs';

const ROOT = resolve(import.meta.dirname, '../..');
const ARCHIVE = join(ROOT, IMAGES_DIR, 'agent.oci.tar');
/** Where the image keeps node (Dockerfile.agent copies it from the Node base). */
const IMAGE_NODE = 'usr/local/bin/node';

export interface AgentNode {
  path: string;
  version: string;
  /** Where it came from, for the bench's log. */
  from: string;
}

/** Copies the agent image's node into `dir` (or takes DEVOP_TEST_AGENT_NODE) and says which version it is. */
export async function agentNode(dir: string): Promise<AgentNode> {
  const chosen = process.env.DEVOP_TEST_AGENT_NODE;
  const path = chosen ?? (await extractImageNode(dir));
  const version = execFileSync(path, ['--version'], { encoding: 'utf8' }).trim();
  return { path, version, from: chosen ? 'DEVOP_TEST_AGENT_NODE' : `${IMAGES_DIR}/agent.oci.tar` };
}

async function extractImageNode(dir: string): Promise<string> {
  if (!existsSync(ARCHIVE)) {
    throw new Error(
      `the benches run the agent on its image's Node, and ${IMAGES_DIR}/agent.oci.tar is missing. ` +
        'Fix: npm run images -- agent (or set DEVOP_TEST_AGENT_NODE to a node binary)',
    );
  }
  return withUnpackedArchive(ARCHIVE, (unpacked: string) => {
    // The last layer that holds it wins, as in the container's root.
    for (const layer of [...describeLayout(unpacked)[0].layers].reverse()) {
      const listing = execFileSync('tar', ['-tf', layer.path], { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
      const member = listing.split('\n').find((line) => line.replace(/^\.?\//, '') === IMAGE_NODE);
      if (!member) continue;
      execFileSync('tar', ['-xf', layer.path, '-C', dir, member]);
      return join(dir, IMAGE_NODE);
    }
    throw new Error(`${IMAGES_DIR}/agent.oci.tar holds no /${IMAGE_NODE}. Fix: npm run images -- agent`);
  });
}
