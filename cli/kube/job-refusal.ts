// An agent Job whose pod the API server refuses (Pod Security admission, a quota, a webhook) never gets a pod: the Job
// controller records FailedCreate events on the Job instead (kubernetes pkg/controller/controller_utils.go). Reading
// them ends the agent's start within a second with the reason, rather than at the startup timeout.
import { CoreV1Api, type KubeConfig } from '@kubernetes/client-node';
import { UserError } from '../../shared/errors.js';

const POLL_MS = 500;

/** The one line for a refused agent pod: Pod Security's level and what it forbids, else the API server's words. */
export function refusalError(namespace: string, job: string, eventMessage: string): UserError {
  const message = eventMessage.replace(/^Error creating: /, '');
  const pss = /violates PodSecurity "([^"]+)": (.*)$/.exec(message);
  if (pss) {
    return new UserError(
      `namespace ${namespace} enforces Pod Security "${pss[1]}", which refuses the agent's pod: ${pss[2]}`,
      `run the agent in a namespace that allows it (--agent-namespace NS, where NS has no enforce label or ` +
        `enforce=privileged), or, with the cluster admin's consent: kubectl label ns ${namespace} ` +
        'pod-security.kubernetes.io/enforce=privileged --overwrite',
    );
  }
  return new UserError(
    `the agent Job ${job} cannot create its pod: ${message}`,
    `check what refuses it in namespace ${namespace} (kubectl describe job -n ${namespace} ${job}: a quota, an ` +
      'admission webhook, a LimitRange), or run the agent elsewhere with --agent-namespace',
  );
}

/**
 * Resolves with the error to report once the Job has a FailedCreate event; never resolves while it has none. Stops
 * (without an answer) when `signal` aborts. Errors listing events are ignored: the pod wait still ends the start.
 */
export function jobRefusal(
  kc: KubeConfig,
  namespace: string,
  job: { name: string; uid: string },
  signal: AbortSignal,
): Promise<UserError> {
  const core = kc.makeApiClient(CoreV1Api);
  return new Promise((resolve) => {
    let timer: NodeJS.Timeout | undefined;
    const stop = () => clearTimeout(timer);
    signal.addEventListener('abort', stop, { once: true });
    const poll = async () => {
      if (signal.aborted) return;
      try {
        const list = await core.listNamespacedEvent({
          namespace,
          fieldSelector: `involvedObject.uid=${job.uid},reason=FailedCreate`,
        });
        const event = list.items.at(-1);
        if (event?.message && !signal.aborted) {
          signal.removeEventListener('abort', stop);
          return resolve(refusalError(namespace, job.name, event.message));
        }
      } catch {
        // Listing events may be forbidden: the wait for the pod still ends at its timeout.
      }
      if (!signal.aborted) timer = setTimeout(poll, POLL_MS);
    };
    void poll();
  });
}
