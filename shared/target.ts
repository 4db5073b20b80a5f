// The target syntax users type (`deploy/NAME/container/NAME`, `apiservice/NAME`,
// `validatingwebhookconfiguration/NAME/webhook/NAME`, `targetless`, …): parsing into a Target and printing back.
import { UserError } from './errors.js';

export type WebhookKind = 'validatingwebhookconfiguration' | 'mutatingwebhookconfiguration';
export type TargetKind = 'pod' | 'deployment' | 'statefulset' | 'rollout' | 'apiservice' | WebhookKind;

/** `container` for workloads; `webhook` (one webhook of the configuration) for webhook configurations. */
export type Target = { kind: 'targetless' } | { kind: TargetKind; name: string; container?: string; webhook?: string };

export function isWebhookKind(kind: string): kind is WebhookKind {
  return kind === 'validatingwebhookconfiguration' || kind === 'mutatingwebhookconfiguration';
}

/** Every spelling accepted before the first `/`, and the kind it names (kubectl's short names and plurals too). */
const KIND_ALIASES: Readonly<Record<string, TargetKind>> = {
  pod: 'pod',
  pods: 'pod',
  po: 'pod',
  deploy: 'deployment',
  deployment: 'deployment',
  deployments: 'deployment',
  statefulset: 'statefulset',
  statefulsets: 'statefulset',
  sts: 'statefulset',
  rollout: 'rollout',
  rollouts: 'rollout',
  ro: 'rollout',
  apiservice: 'apiservice',
  apiservices: 'apiservice',
  // kubectl has no short names for these: the singular and plural only.
  validatingwebhookconfiguration: 'validatingwebhookconfiguration',
  validatingwebhookconfigurations: 'validatingwebhookconfiguration',
  mutatingwebhookconfiguration: 'mutatingwebhookconfiguration',
  mutatingwebhookconfigurations: 'mutatingwebhookconfiguration',
};

/** The short name printed for each kind (what `kubectl get` accepts too). */
const KIND_PRINTED: Readonly<Record<TargetKind, string>> = {
  pod: 'pod',
  deployment: 'deploy',
  statefulset: 'statefulset',
  rollout: 'rollout',
  apiservice: 'apiservice',
  validatingwebhookconfiguration: 'validatingwebhookconfiguration',
  mutatingwebhookconfiguration: 'mutatingwebhookconfiguration',
};

export const TARGET_FORMS =
  'pod/NAME, deploy/NAME (or deployment/NAME), statefulset/NAME (or sts/NAME), rollout/NAME — each optionally ' +
  'followed by /container/NAME —, apiservice/NAME (the pods behind an aggregated API), ' +
  'validatingwebhookconfiguration/NAME or mutatingwebhookconfiguration/NAME (optionally followed by /webhook/NAME), ' +
  'or targetless';

/** A Kubernetes object name (DNS-1123 subdomain, as pods, workloads and APIServices use). */
const OBJECT_NAME = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
/** A container name (DNS-1123 label). */
const CONTAINER_NAME = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;

function invalid(text: string, why: string): UserError {
  return new UserError(`invalid target "${text}": ${why}`, `use one of: ${TARGET_FORMS}`);
}

/** Parses a target string; a bad one throws a UserError that says what is wrong and lists the accepted forms. */
export function parseTarget(text: string): Target {
  const trimmed = text.trim();
  if (trimmed === '') throw invalid(text, 'it is empty');
  if (trimmed.toLowerCase() === 'targetless') return { kind: 'targetless' };
  const parts = trimmed.split('/');
  const kind = KIND_ALIASES[parts[0].toLowerCase()];
  if (!kind) {
    if (parts.length === 1) throw invalid(text, 'it names no kind (a bare name is ambiguous)');
    throw invalid(text, `"${parts[0]}" is not a target kind`);
  }
  if (parts.length < 2 || parts[1] === '') throw invalid(text, `the ${kind} name is missing`);
  const name = parts[1];
  if (name.length > 253 || !OBJECT_NAME.test(name)) {
    throw invalid(text, `"${name}" is not a valid ${kind} name (lower-case letters, digits, '-' and '.')`);
  }
  if (parts.length === 2) return { kind, name };
  if (isWebhookKind(kind)) {
    if (parts[2] !== 'webhook')
      throw invalid(text, `expected "/webhook/NAME" after the ${kind} name, got "/${parts.slice(2).join('/')}"`);
    const webhook = parts[3];
    if (parts.length !== 4 || !webhook) throw invalid(text, 'the webhook name is missing or followed by more');
    if (webhook.length > 253 || !OBJECT_NAME.test(webhook))
      throw invalid(text, `"${webhook}" is not a valid webhook name (lower-case letters, digits, '-' and '.')`);
    return { kind, name, webhook };
  }
  if (parts[2] !== 'container' && parts[2] !== 'c') {
    throw invalid(text, `expected "/container/NAME" after the ${kind} name, got "/${parts.slice(2).join('/')}"`);
  }
  if (parts.length !== 4 || parts[3] === '') throw invalid(text, 'the container name is missing or followed by more');
  const container = parts[3];
  if (container.length > 63 || !CONTAINER_NAME.test(container)) {
    throw invalid(text, `"${container}" is not a valid container name (lower-case letters, digits and '-')`);
  }
  return { kind, name, container };
}

/** Prints a target in its canonical form (parseTarget(formatTarget(t)) equals t). */
export function formatTarget(target: Target): string {
  if (target.kind === 'targetless') return 'targetless';
  const base = `${KIND_PRINTED[target.kind]}/${target.name}`;
  if (target.webhook) return `${base}/webhook/${target.webhook}`;
  return target.container ? `${base}/container/${target.container}` : base;
}
