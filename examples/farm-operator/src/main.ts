// farm-operator entry: `main.ts [--step 1|2|3] [--port 8443] [--host 0.0.0.0]` (or FARM_STEP / PORT) serves the API
// group.
import { readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { parseArgs } from 'node:util';
import type { Step } from './api.js';
import { selfSignedCert } from './cert.js';
import type { PodLister } from './farmpods.js';
import { kubePodLister, loadKubeConfig } from './kube.js';
import { LlamaStore } from './llamas.js';
import { startFarmServer } from './server.js';

/** The port the Deployment declares: non-root friendly, and what the Service's 443 targets. */
const DEFAULT_PORT = 8443;

function parseStep(value: string | undefined): Step {
  const step = Number(value ?? '1');
  if (step !== 1 && step !== 2 && step !== 3)
    throw new Error(`farm-operator: --step must be 1, 2 or 3 (got ${value}).`);
  return step;
}

function loadTls(env: NodeJS.ProcessEnv): { key: string; cert: string } {
  // A mounted serving certificate wins (what a production APIService would use); otherwise make one at start.
  if (env.TLS_CERT_FILE && env.TLS_KEY_FILE) {
    return { cert: readFileSync(env.TLS_CERT_FILE, 'utf8'), key: readFileSync(env.TLS_KEY_FILE, 'utf8') };
  }
  return selfSignedCert({
    commonName: 'farm-operator',
    altNames: [
      'localhost',
      'farm-operator',
      'farm-operator.default.svc',
      'farm-operator.default.svc.cluster.local',
      '127.0.0.1',
      hostname(),
    ],
  });
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: { step: { type: 'string' }, port: { type: 'string' }, host: { type: 'string' } },
    allowPositionals: false,
  });
  const step = parseStep(values.step ?? process.env.FARM_STEP);
  const port = Number(values.port ?? process.env.PORT ?? DEFAULT_PORT);
  let pods: PodLister | undefined;
  const server = await startFarmServer({
    step,
    port,
    host: values.host ?? '0.0.0.0',
    tls: loadTls(process.env),
    llamas: new LlamaStore(),
    pods: () => (pods ??= kubePodLister(loadKubeConfig())),
    log: (line) => process.stdout.write(`${line}\n`),
  });
  process.stdout.write(`farm-operator step ${step} listening on https://${values.host ?? '0.0.0.0'}:${server.port}\n`);
  let stopping = false;
  const stop = (): void => {
    // Ctrl-C reaches both a wrapper (npx, tsx) and this process: the second signal must not cut the shutdown short.
    if (stopping) return;
    stopping = true;
    void server.close().then(() => process.exit(0));
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

main().catch((err: unknown) => {
  process.stderr.write(`${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
