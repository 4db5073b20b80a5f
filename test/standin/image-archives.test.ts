// The OCI archives `npm run images` writes (dist/images): each names the references the stand-in imports into
// containerd, the images built on the shared bases store the bases' layers once, and the agent's holds node and every
// tool the agent runs — checked by running them from the unpacked image (chroot).
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ARCHIVES, IMAGES, IMAGES_DIR, NODE_BASE_REF, NODE_MAJOR } from '../../scripts/image-list.mjs';
import { describeLayout, imageFiles, imageSizes, withUnpackedArchive } from '../../scripts/oci-archive.mjs';
import { AGENT_ENTRYPOINT } from '../../shared/agent-contract.js';
import { requireRoot } from '../../testkit/root.js';

/** The agent image's budget (docs/agent.md): node alone (Node 24, stripped) is 108.5 MB of it. */
const AGENT_MAX_BYTES = 130e6;
const AGENT_TOOLS = [
  'usr/local/bin/node',
  'usr/sbin/iptables',
  'usr/sbin/iptables-nft',
  'usr/sbin/iptables-legacy',
  'usr/sbin/iptables-nft-save',
  'usr/sbin/iptables-legacy-save',
  'usr/sbin/ip6tables-nft',
  'usr/sbin/ip6tables-legacy',
  'usr/sbin/ip6tables-nft-save',
  'usr/sbin/ip6tables-legacy-save',
  'usr/sbin/conntrack',
  'usr/bin/ss',
  'opt/devop/devop-capture',
  'opt/devop/devop-nft',
  'opt/devop/devop-splice',
  'opt/devop/devop-open',
  'usr/bin/nsenter',
  'usr/bin/sh',
  'usr/bin/cat',
];

type Image = ReturnType<typeof describeLayout>[number];

function pathOf(image: Image): string {
  return image.config.config.Env.find((e) => e.startsWith('PATH='))?.slice('PATH='.length) ?? '/usr/bin:/bin';
}

function archivePath(archive: string): string {
  const path = join(IMAGES_DIR, `${archive}.oci.tar`);
  if (!existsSync(path)) throw new Error(`${path} is missing: run npm run images (bash scripts/setup.sh does it too)`);
  return path;
}

function entry(name: string) {
  const found = IMAGES.find((e) => e.name === name);
  if (!found) throw new Error(`no image named ${name} in scripts/image-list.mjs`);
  return found;
}

/** Opens an image's archive, calls `check` with its images (one per reference), then removes the unpacked copy. */
function withImages<T>(name: string, check: (images: Image[], dir: string) => Promise<T> | T): Promise<T> {
  const { archive, refs } = entry(name);
  return withUnpackedArchive(archivePath(archive), (dir: string) =>
    check(
      describeLayout(dir).filter((image) => image.ref !== undefined && refs.includes(image.ref)),
      dir,
    ),
  );
}

describe('image archives (npm run images)', () => {
  it.each(ARCHIVES)('%s.oci.tar names exactly the references of its images, each a linux/amd64 image', async (name) => {
    await withUnpackedArchive(archivePath(name), (dir: string) => {
      const images = describeLayout(dir);
      const members = IMAGES.filter((e) => e.archive === name);
      expect(images.map((i) => i.ref).sort()).toEqual(members.flatMap((e) => e.refs).sort());
      for (const member of members) {
        // An image's references name one manifest: the image it was built as.
        const digests = new Set(images.filter((i) => i.ref && member.refs.includes(i.ref)).map((i) => i.digest));
        expect(digests.size, member.name).toBe(1);
      }
      for (const image of images) {
        expect(image.config.os).toBe('linux');
        expect(image.config.architecture).toBe('amd64');
        expect(image.layers.every((l) => l.mediaType === 'application/vnd.oci.image.layer.v1.tar+gzip')).toBe(true);
      }
    });
  });

  it('the archives the stand-in imports store each layer once: the Node base once for every image built on it', async () => {
    // Given the images directory's archives (what the stand-in's node imports: every *.oci.tar in it)
    const files = readdirSync(IMAGES_DIR)
      .filter((f) => f.endsWith('.oci.tar'))
      .sort();
    // When the layers of their images are listed
    const archivesOf = new Map<string, Set<string>>();
    const layersOf = new Map<string, string[]>();
    for (const file of files) {
      await withUnpackedArchive(join(IMAGES_DIR, file), (dir: string) => {
        for (const image of describeLayout(dir)) {
          const digests = image.layers.map((l) => l.path.slice(l.path.lastIndexOf('/') + 1));
          if (image.ref) layersOf.set(image.ref, digests);
          for (const d of digests) archivesOf.set(d, new Set([...(archivesOf.get(d) ?? []), file]));
        }
      });
    }
    // Then no layer is stored in two of them
    const repeated = [...archivesOf].filter(([, where]) => where.size > 1).map(([d, where]) => `${d} ${[...where]}`);
    expect(repeated, 'layers stored in more than one archive').toEqual([]);
    // And they are the archives scripts/image-list.mjs names, none else (an image's own archive from before is gone)
    expect(files).toEqual(ARCHIVES.map((a) => `${a}.oci.tar`).sort());
    // And every image whose runtime stage is FROM the Node base starts with its layers: one copy serves them all
    const base = layersOf.get(NODE_BASE_REF) ?? [];
    const onNode = IMAGES.filter((e) => {
      const froms = e.dockerfile ? [...readFileSync(e.dockerfile, 'utf8').matchAll(/^FROM\s+(\S+)/gm)] : [];
      return froms.at(-1)?.[1] === `node:${NODE_MAJOR}-bookworm-slim`;
    });
    expect(base.length).toBeGreaterThan(0);
    expect(onNode.length).toBeGreaterThanOrEqual(5);
    for (const e of onNode) expect(layersOf.get(e.refs[0])?.slice(0, base.length), e.name).toEqual(base);
  });

  it('the agent image runs AGENT_ENTRYPOINT, holds the bundle, node and its tools, and stays within 130 MB', async () => {
    await withImages('agent', async ([image]) => {
      expect(image.config.config.Entrypoint).toEqual([...AGENT_ENTRYPOINT]);
      const files = imageFiles(image);
      for (const path of ['opt/devop/agent.js', 'opt/devop/entry.sh', ...AGENT_TOOLS])
        expect(files.has(path), path).toBe(true);
      // No package manager, npm or docs: the runtime stage is only what the agent runs.
      for (const path of ['usr/bin/apt-get', 'usr/bin/dpkg', 'usr/local/bin/npm', 'usr/bin/perl', 'usr/share/doc']) {
        expect(files.has(path), path).toBe(false);
      }
      const { uncompressed } = await imageSizes(image);
      expect(uncompressed).toBeLessThanOrEqual(AGENT_MAX_BYTES);
    });
  });

  it('every program the entry point runs through nsenter is a file of the agent image, not a shell builtin', async () => {
    // nsenter execs its program: a builtin of the host's shell (`true`) is no program in the image, and a probe that
    // always fails sends every start through the Node PID lookup (a whole Node start more before the agent's).
    const script = readFileSync(resolve(import.meta.dirname, '../../agent/entry.sh'), 'utf8');
    const programs = [...script.matchAll(/nsenter [^\n]*? -- (\S+)/g)]
      .map((m) => m[1])
      .filter((p) => !p.startsWith('$'));
    expect(programs.length).toBeGreaterThan(0);
    await withImages('agent', ([image]) => {
      const files = imageFiles(image);
      for (const program of programs) {
        const dirs = pathOf(image).split(':');
        expect(
          dirs.some((dir) => files.has(join(dir, program).slice(1))),
          `${program} (agent/entry.sh) in ${dirs.join(':')}`,
        ).toBe(true);
      }
    });
  });

  it("the agent image's /opt/devop/agent.js is this checkout's dist/agent.cjs, byte for byte", async () => {
    // The end-to-end suites run the agent from the image: one built from other sources tests another agent. (The
    // image builds its bundle in a stage of its own, with the same esbuild and compiler options.)
    const bundle = readFileSync(resolve(import.meta.dirname, '../../dist/agent.cjs'));
    await withImages('agent', ([image]) => {
      // The last layer that has the file holds the image's copy.
      const copies = image.layers
        .map((layer) => spawnSync('tar', ['-xzOf', layer.path, 'opt/devop/agent.js'], { maxBuffer: 64 << 20 }))
        .filter((r) => r.status === 0);
      expect(copies.length).toBeGreaterThan(0);
      const inImage = copies[copies.length - 1].stdout;
      expect(
        inImage.equals(bundle),
        `the agent image holds another bundle (${inImage.length} bytes against ${bundle.length}): ` +
          'run npm run images -- agent',
      ).toBe(true);
    });
  });

  it('every tool in the agent image starts with the libraries the image carries (chroot into its layers)', async () => {
    if (!requireRoot('agent image tools')) return;
    await withImages('agent', ([image]) => {
      const rootfs = mkdtempSync(join(tmpdir(), 'devop-agent-rootfs-'));
      try {
        for (const layer of image.layers) execFileSync('tar', ['-xzf', layer.path, '-C', rootfs]);
        const script = [
          'node -e "console.log(process.version)"',
          'iptables --version',
          'iptables-nft --version',
          'iptables-legacy --version',
          'ip6tables-nft --version',
          'ip6tables-legacy --version',
          'iptables-nft-save --version',
          'ip6tables-legacy-save --version',
          'conntrack --version',
          'ss --version',
          // Its usage line (exit 2) shows that it loads and runs: it prints it before it opens any socket.
          '{ /opt/devop/devop-capture 2>&1; test $? = 2; }',
          // It answers a request it does not know with one line (and owns no table).
          'echo help | /opt/devop/devop-nft',
          // It listens, then answers a request it does not know with one line, and ends with its stdin.
          'echo help | /opt/devop/devop-splice 0',
          'nsenter --version',
          'echo piped | cat',
        ].join(' && ');
        const env = { PATH: pathOf(image) };
        const res = spawnSync('chroot', [rootfs, '/usr/bin/sh', '-c', script], { encoding: 'utf8', env });
        expect(res.stderr + res.stdout).not.toMatch(/error while loading shared libraries|not found/);
        expect(res.status, res.stderr).toBe(0);
        expect(res.stdout).toMatch(new RegExp(`^v${NODE_MAJOR}\\.`));
        expect(res.stdout).toContain('piped');
        expect(res.stdout).toContain('error unknown request (table NAME');
        expect(res.stdout).toMatch(/^ready \d+\nerror unknown request \(session TOKEN/m);
      } finally {
        rmSync(rootfs, { recursive: true, force: true });
      }
    });
  });

  it('the shell image (busybox, devop.test/shell) has sh, sleep, test, cat, nc and node', async () => {
    await withImages('shell', ([image]) => {
      const files = imageFiles(image);
      const tools = [
        'usr/bin/sh',
        'usr/bin/sleep',
        'usr/bin/test',
        'usr/bin/cat',
        'usr/local/bin/nc',
        'usr/local/bin/node',
      ];
      for (const path of tools) expect(files.has(path), path).toBe(true);
      expect(image.config.config.Cmd).toEqual(['/bin/sh']);
    });
  });

  it('http-echo runs http-echo.mjs on node; python3 has python3; farm-operator steps set FARM_STEP', async () => {
    await withImages('http-echo', ([image]) => {
      expect(image.config.config.Entrypoint).toEqual(['node', '/app/http-echo.mjs']);
      expect(imageFiles(image).has('app/http-echo.mjs')).toBe(true);
    });
    await withImages('python3', ([image]) => expect(imageFiles(image).has('usr/bin/python3')).toBe(true));
    for (const step of [1, 2, 3]) {
      await withImages(`farm-operator-step${step}`, ([image]) => {
        expect(image.config.config.Env).toContain(`FARM_STEP=${step}`);
        expect(image.config.config.Entrypoint).toEqual(['node', '/app/farm-operator.mjs']);
      });
    }
  });

  // A first run may rebuild http-echo (its Dockerfile or the bases changed since npm run images): minutes, not seconds.
  it('a rerun keeps an unchanged archive and publishes it; an unknown name is one line naming the choices', () => {
    archivePath(entry('http-echo').archive);
    const publishDir = mkdtempSync(join(tmpdir(), 'devop-images-publish-'));
    try {
      execFileSync(process.execPath, ['scripts/images.mjs', 'http-echo'], { encoding: 'utf8' });
      const before = statSync(archivePath(entry('http-echo').archive)).mtimeMs;
      const env = { ...process.env, DEVOP_IMAGES_PUBLISH_DIR: publishDir };
      const again = execFileSync(process.execPath, ['scripts/images.mjs', 'http-echo'], { encoding: 'utf8', env });
      expect(again).toMatch(/^http-echo\s+cached/m);
      expect(statSync(archivePath(entry('http-echo').archive)).mtimeMs).toBe(before);
      const archive = archivePath(entry('http-echo').archive);
      expect(statSync(join(publishDir, `${entry('http-echo').archive}.oci.tar`)).size).toBe(statSync(archive).size);
    } finally {
      rmSync(publishDir, { recursive: true, force: true });
    }

    const bad = spawnSync(process.execPath, ['scripts/images.mjs', 'nosuch'], { encoding: 'utf8' });
    expect(bad.status).toBe(1);
    expect(bad.stderr.trim()).toBe(`images: no image named nosuch — names: ${IMAGES.map((e) => e.name).join(' ')}`);
  }, 600_000);
});
