// `devop exec --replace`: which targets can be replaced (checked before any API call), and the start-up / restore steps
// around the session, which then runs on the copy pod (cluster.ts does the cluster side).
import { UserError } from '../../shared/errors.js';
import { parseTarget } from '../../shared/target.js';
import type { ReplaceKind } from '../../shared/replace-contract.js';
import { loadKubeConfig } from '../kube/config.js';
import { CustomObjectsApi, type KubeConfig, type V1PodTemplateSpec } from '@kubernetes/client-node';
import { REPLACE_KINDS, startReplace, type Replacement } from './cluster.js';
import { checkTemplateHostNetwork } from '../kube/target.js';
import { type Reporter, step, warn } from '../reporter.js';
import { clientIdentity, SESSION_DEFAULTS, type SessionOptions } from '../session/connect.js';
import type { StealMode } from '../../shared/protocol.js';

/** Bad --replace input, one line each; the kind it replaces otherwise. Pure. */
export function replaceKindOf(options: { target?: string; allPods?: boolean }): ReplaceKind {
  const target = parseTarget(options.target ?? 'targetless');
  if (target.kind === 'targetless')
    throw new UserError(
      '--replace needs a workload to replace: a targetless session has none',
      'pass -t deploy/NAME, sts/NAME or rollout/NAME, or drop --replace',
    );
  if (target.kind === 'pod')
    throw new UserError(
      `--replace works on a deploy/sts/rollout, not on pod/${target.name}: a pod has no replica count to scale to 0`,
      "pass the pod's workload (-t deploy/NAME, sts/NAME or rollout/NAME), or drop --replace",
    );
  if (
    target.kind === 'apiservice' ||
    target.kind === 'validatingwebhookconfiguration' ||
    target.kind === 'mutatingwebhookconfiguration'
  )
    throw new UserError(
      `--replace works on a deploy/sts/rollout, not on ${target.kind}/${target.name}: replace the workload behind it`,
      'pass the Deployment that serves it (-t deploy/NAME) with --replace --steal, or drop --replace',
    );
  if (options.allPods)
    throw new UserError(
      '--replace and --all-pods were both given: a replaced workload has one pod, the copy',
      'drop --all-pods',
    );
  return target.kind;
}

/** Reads the workload's pod template and refuses one on the host network; any other failure is startReplace's. */
async function refuseHostNetworkTemplate(
  kc: KubeConfig,
  kind: ReplaceKind,
  name: string,
  namespace: string,
  what: string,
): Promise<void> {
  const { group, version, plural } = REPLACE_KINDS[kind];
  let workload: { spec?: { template?: V1PodTemplateSpec } };
  try {
    workload = await kc
      .makeApiClient(CustomObjectsApi)
      .getNamespacedCustomObject({ group, version, namespace, plural, name });
  } catch {
    return; // not found, denied, …: startReplace reads it again and says so in its own words
  }
  checkTemplateHostNetwork(what, workload.spec?.template?.spec, false);
}

export interface ReplaceStep {
  /** What the session connects to instead of the workload: the copy pod. */
  session: Pick<SessionOptions, 'kc' | 'namespace' | 'target' | 'allPods'>;
  /** Restores the workload, reporting it as a step. */
  restoreStep(): Promise<void>;
}

export async function startReplaceStep(
  options: SessionOptions & { mode: StealMode },
  reporter: Reporter,
): Promise<ReplaceStep> {
  const kind = replaceKindOf(options);
  const target = parseTarget(options.target ?? '') as { name: string; container?: string };
  const loaded = options.kc ? undefined : loadKubeConfig(options);
  const kc = options.kc ?? loaded!.kc;
  const namespace = options.namespace ?? loaded?.namespace ?? 'default';
  const { user, host } = clientIdentity();
  const what = `${kind}/${target.name}`;
  const replacement: Replacement = await step(
    reporter,
    'replace',
    `replace ${what}`,
    async () => {
      // Before anything is scaled: a workload on the host network is refused like its pods would be.
      if (!options.allowHostNetwork) await refuseHostNetworkTemplate(kc, kind, target.name, namespace, what);
      return startReplace({
        kc,
        namespace,
        kind,
        name: target.name,
        container: target.container,
        keepLabels: options.mode === 'steal',
        agentImage: options.agentImage ?? SESSION_DEFAULTS.agentImage,
        user,
        host,
        startupTimeoutMs: options.startupTimeoutMs ?? SESSION_DEFAULTS.startupTimeoutMs,
        onWarning: (message) => warn(reporter, message),
      });
    },
    (r) =>
      `scaled to 0 (was ${r.originalReplicas}); copy pod ${r.copyPod}` +
      (options.mode === 'steal' ? " with the workload's labels" : ''),
  );
  return {
    session: { kc, namespace, target: replacement.target, allPods: false },
    restoreStep: () =>
      step(
        reporter,
        'restore',
        `restore ${what}`,
        () => replacement.restore(),
        () => `${replacement.originalReplicas} replicas`,
      ).catch(() => undefined),
  };
}
