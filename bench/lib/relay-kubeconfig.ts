// The kubeconfig of the bench helpers that reach the stand-in's port-forward relay (bench/lib/portforward-relay.ts) as
// the CLI reaches an API server: plain HTTP on 127.0.0.1, no credentials (the relay asks for none).
import { KubeConfig } from '@kubernetes/client-node';

export function relayKubeConfig(relayPort: number): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: 'bench', server: `http://127.0.0.1:${relayPort}`, skipTLSVerify: true }],
    users: [{ name: 'bench' }],
    contexts: [{ name: 'bench', cluster: 'bench', user: 'bench' }],
    currentContext: 'bench',
  });
  return kc;
}
