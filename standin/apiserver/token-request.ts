// serviceaccounts/NAME/token (TokenRequest, authentication.k8s.io/v1) as kubernetes pkg/registry/core/serviceaccount/
// storage/token.go serves it: validated, bound to the account, and minted whatever the request's dryRun says.
import { type Authenticator, SERVICE_ACCOUNT_GROUPS, SERVICE_ACCOUNT_RULES } from './auth.js';
import { invalid, type K8sObject } from './errors.js';
import { nowTime } from './objects.js';

/** What an audience-less request gets: kube-apiserver's --api-audiences default, its service-account issuer. */
const API_AUDIENCE = 'https://kubernetes.default.svc.cluster.local';
/** SetDefaults_TokenRequestSpec: one hour. */
const DEFAULT_SECONDS = 3600;
/** ValidateTokenRequest's bounds (kubernetes pkg/apis/authentication/validation). */
const MIN_SECONDS = 600;
const MAX_SECONDS = 2 ** 32;

/**
 * Mints a token for the service account `account` and answers the TokenRequest. token.go never reads the
 * CreateOptions' dryRun: a dry-run TokenRequest returns a real, valid token (nothing is stored either way — tokens are
 * signed, not kept), so dryRun=All does not make this subresource safe.
 */
export function tokenRequest(auth: Authenticator, account: K8sObject, body: K8sObject): K8sObject {
  const { name, namespace, uid } = account.metadata;
  const fail = (field: string, value: unknown, why: string) =>
    invalid('TokenRequest', 'authentication.k8s.io', name, [
      { field, message: `Invalid value: ${JSON.stringify(value)}: ${why}` },
    ]);
  if (body.metadata?.name && body.metadata.name !== name)
    throw fail('metadata.name', body.metadata.name, 'must match the service account name if specified');
  if (body.metadata?.namespace && body.metadata.namespace !== namespace)
    throw fail('metadata.namespace', body.metadata.namespace, 'must match the service account namespace if specified');
  const seconds = Number(body.spec?.expirationSeconds ?? DEFAULT_SECONDS);
  if (!(seconds >= MIN_SECONDS))
    throw fail('spec.expirationSeconds', seconds, 'may not specify a duration less than 10 minutes');
  if (seconds > MAX_SECONDS)
    throw fail('spec.expirationSeconds', seconds, 'may not specify a duration larger than 2^32 seconds');
  const expires = new Date(Date.now() + seconds * 1000);
  const token = auth.issue(
    `system:serviceaccount:${namespace}:${name}`,
    [...SERVICE_ACCOUNT_GROUPS(namespace), 'system:authenticated'],
    SERVICE_ACCOUNT_RULES,
    { uid, expiresAt: expires.getTime() },
  );
  const audiences: string[] = body.spec?.audiences?.length ? body.spec.audiences : [API_AUDIENCE];
  return {
    kind: 'TokenRequest',
    apiVersion: 'authentication.k8s.io/v1',
    metadata: { name, namespace, uid, creationTimestamp: nowTime() },
    spec: { audiences, expirationSeconds: seconds, boundObjectRef: body.spec?.boundObjectRef ?? null },
    status: { token, expirationTimestamp: expires.toISOString().replace(/\.\d+Z$/, 'Z') },
  };
}
