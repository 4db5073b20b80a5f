// Webhook configurations (admissionregistration.k8s.io/v1): their resource keys and the defaults kube-apiserver fills
// in, shared by object defaulting on write and by the admission chain that calls the webhooks.
import type { K8sObject } from './errors.js';

export const VALIDATING_WEBHOOKS = 'admissionregistration.k8s.io/validatingwebhookconfigurations';
export const MUTATING_WEBHOOKS = 'admissionregistration.k8s.io/mutatingwebhookconfigurations';

/** kube-apiserver's default timeoutSeconds for a v1 webhook. */
export const DEFAULT_TIMEOUT_SECONDS = 10;

/** Fills what kube-apiserver defaults in a v1 webhook configuration, so clients read the values that apply. */
export function defaultWebhookConfiguration(obj: K8sObject, mutating: boolean): void {
  for (const w of obj.webhooks ?? []) {
    w.failurePolicy ??= 'Fail';
    w.matchPolicy ??= 'Equivalent';
    w.namespaceSelector ??= {};
    w.objectSelector ??= {};
    w.timeoutSeconds ??= DEFAULT_TIMEOUT_SECONDS;
    if (mutating) w.reinvocationPolicy ??= 'Never';
    for (const r of w.rules ?? []) r.scope ??= '*';
    if (w.clientConfig?.service) w.clientConfig.service.port ??= 443;
  }
}
