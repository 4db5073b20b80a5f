// The kubeconfig of the bench helpers that reach the stand-in's port-forward relay (bench/lib/portforward-relay.ts) as
// the CLI reaches an API server: on `host` (127.0.0.1 unless given), plain HTTP, or HTTPS verified against `caFile`
// (the relay's CA), no credentials (the relay asks for none).
import { KubeConfig } from '@kubernetes/client-node';

export function relayKubeConfig(relayPort: number, caFile?: string, host = '127.0.0.1'): KubeConfig {
  const kc = new KubeConfig();
  const cluster = caFile
    ? { name: 'bench', server: `https://${host}:${relayPort}`, caFile, skipTLSVerify: false }
    : { name: 'bench', server: `http://${host}:${relayPort}`, skipTLSVerify: true };
  kc.loadFromOptions({
    clusters: [cluster],
    users: [{ name: 'bench' }],
    contexts: [{ name: 'bench', cluster: 'bench', user: 'bench' }],
    currentContext: 'bench',
  });
  return kc;
}
