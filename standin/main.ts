// `npm run cluster`: starts a stand-in cluster for people, prints how to point kubectl at it, stops cleanly on Ctrl-C.
import { startCluster } from './index.js';

async function main(): Promise<void> {
  // Output may go to a pipe that closes (`| head`): an EPIPE must not kill the process before it cleans up.
  process.stdout.on('error', () => undefined);
  process.stderr.on('error', () => undefined);
  const withKubelet = !process.argv.includes('--no-kubelet');
  if (withKubelet && (typeof process.getuid !== 'function' || process.getuid() !== 0)) {
    console.error(
      'devop cluster: the stand-in node needs root (network namespaces, iptables, containerd). Run it with sudo, or ' +
        'pass --no-kubelet for the API server alone.',
    );
    process.exit(1);
  }
  const t0 = Date.now();
  const cluster = await startCluster({ kubelet: withKubelet });
  console.log(
    `stand-in cluster ${cluster.instance} is up at ${cluster.server} (${Date.now() - t0} ` +
      `ms)${withKubelet ? `, node ${cluster.nodeName} ${cluster.nodeIP}` : ', no node'}`,
  );
  console.log(`kubeconfig: ${cluster.kubeconfigPath}`);
  console.log(`restricted kubeconfig: ${cluster.restrictedKubeconfigPath}`);
  console.log('');
  console.log(`export KUBECONFIG=${cluster.kubeconfigPath}`);
  console.log('');
  console.log('Press Ctrl-C to stop (everything the cluster made is removed).');
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    console.error(`\n${signal}: stopping the stand-in cluster…`);
    cluster.stop().then(
      () => process.exit(0),
      (e) => {
        console.error('devop cluster: stop failed:', e);
        process.exit(1);
      },
    );
  };
  process.on('SIGINT', () => stop('SIGINT'));
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGHUP', () => stop('SIGHUP'));
}

main().catch((e) => {
  const hint = (e as { hint?: unknown }).hint;
  console.error('devop cluster:', e instanceof Error ? e.message : e, typeof hint === 'string' ? `— fix: ${hint}` : '');
  process.exit(1);
});
