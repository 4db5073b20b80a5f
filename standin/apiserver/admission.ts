// Admission webhooks (admissionregistration.k8s.io/v1): writes of matching resources are sent as AdmissionReview v1
// over HTTPS to each webhook — mutating ones first, one after another, their JSON patches applied (IfNeeded ones again
// after a later patch); then validating ones together — with timeoutSeconds and failurePolicy applied and the errors
// worded as kube-apiserver words them.
import { request as httpsRequest } from 'node:https';
import { randomUUID } from 'node:crypto';
import { ApiError, type K8sObject } from './errors.js';
import type { Identity } from './auth.js';
import type { Objects } from './objects.js';
import { applyPatch, JsonPatchError } from './patch.js';
import { storeKey, type ResourceType } from './resources.js';
import { labelSelectorMatcher } from './selectors.js';
import { serviceEndpoint } from './service-endpoint.js';
import { DEFAULT_TIMEOUT_SECONDS, MUTATING_WEBHOOKS, VALIDATING_WEBHOOKS } from './webhook-config.js';

export type Operation = 'CREATE' | 'UPDATE' | 'DELETE';

export interface AdmissionAttributes {
  t: ResourceType;
  sub?: string;
  ns: string;
  name: string;
  operation: Operation;
  identity: Identity;
  /** The object as it would be stored (CREATE, UPDATE); none for DELETE. */
  object?: K8sObject;
  /** The stored object (UPDATE, DELETE). */
  oldObject?: K8sObject;
  dryRun: boolean;
  /** Passes a webhook's `warnings` on to the client. */
  warn?: (text: string) => void;
}

/** A webhook's call failed (not a denial): failurePolicy decides what happens. */
class CallingWebhookError extends Error {}

/** A mutating webhook's answer's patch, decoded (post), for admit to apply. */
const patchOperations = new WeakMap<K8sObject, unknown[]>();

/**
 * A webhook's response.patch as json-patch's DecodePatch reads it: base64 of a JSON array of operations. A patch that
 * does not decode is a failed call, under the webhook's failurePolicy (mutating/dispatcher.go).
 */
function decodePatch(patch: string): unknown[] {
  const ops: unknown = JSON.parse(Buffer.from(patch, 'base64').toString('utf8'));
  if (!Array.isArray(ops)) {
    const kind = ops === null ? 'null' : typeof ops === 'object' ? 'object' : typeof ops;
    throw new Error(`json: cannot unmarshal ${kind} into Go value of type jsonpatch.Patch`);
  }
  return ops;
}

/**
 * The object with a mutating webhook's non-empty patch applied. A patch for a request without an object (a DELETE), or
 * one that does not apply, fails the write with a 500 whatever the failurePolicy, as the dispatcher's
 * apierrors.NewInternalError does (apiserver pkg/admission/plugin/webhook/mutating/dispatcher.go).
 */
function patchedBy(webhook: string, object: K8sObject | undefined, ops: unknown[]): K8sObject {
  const internal = (message: string) => new ApiError(500, 'InternalError', `Internal error occurred: ${message}`);
  if (!object)
    throw internal(
      `admission webhook "${webhook}" attempted to modify the object, which is not supported for this operation`,
    );
  try {
    return applyPatch('json', object, ops);
  } catch (e) {
    throw internal(e instanceof JsonPatchError ? e.failure : (e as Error).message);
  }
}

/** Rule matching as the admission plugin's rules.Matcher does it (`*`, `pods/*`, `*\/status`, scope). */
function ruleMatches(rule: K8sObject, a: AdmissionAttributes): boolean {
  const any = (list: string[] | undefined, v: string) => (list ?? []).some((x) => x === '*' || x === v);
  if (!any(rule.operations, a.operation)) return false;
  if (!any(rule.apiGroups, a.t.group) || !any(rule.apiVersions, a.t.version)) return false;
  const resourceMatch = (rule.resources ?? []).some((r: string) => {
    const [res, sub = ''] = r.split('/');
    return (res === '*' || res === a.t.resource) && (sub === '*' || sub === (a.sub ?? ''));
  });
  if (!resourceMatch) return false;
  const scope = rule.scope ?? '*';
  if (scope === 'Cluster') return !a.t.namespaced;
  if (scope === 'Namespaced') return a.t.namespaced;
  return true;
}

export class Admission {
  constructor(private readonly objects: Objects) {}

  private hooks(key: string, a: AdmissionAttributes): K8sObject[] {
    // Webhook configurations themselves are never sent to webhooks: a broken webhook could not be removed otherwise.
    if (a.t.group === 'admissionregistration.k8s.io') return [];
    const out: K8sObject[] = [];
    const configs = this.objects.store
      .list(key)
      .sort((x, y) => String(x.metadata.name).localeCompare(String(y.metadata.name)));
    for (const cfg of configs) for (const w of cfg.webhooks ?? []) if (this.matches(w, a)) out.push(w);
    return out;
  }

  private matches(w: K8sObject, a: AdmissionAttributes): boolean {
    if (!(w.rules ?? []).some((r: K8sObject) => ruleMatches(r, a))) return false;
    const objectSelector = labelSelectorMatcher(w.objectSelector ?? {});
    if (!(a.object && objectSelector(a.object)) && !(a.oldObject && objectSelector(a.oldObject))) return false;
    if (!a.t.namespaced && storeKey(a.t) !== '/namespaces') return true;
    const ns =
      storeKey(a.t) === '/namespaces' ? (a.object ?? a.oldObject) : this.objects.store.get('/namespaces', '', a.ns);
    return labelSelectorMatcher(w.namespaceSelector ?? {})(ns ?? { metadata: {} });
  }

  /** True when writes of this kind may be seen by a webhook (so the REST handler computes the object first). */
  active(t: ResourceType): boolean {
    if (t.group === 'admissionregistration.k8s.io') return false;
    return this.objects.store.list(MUTATING_WEBHOOKS).length + this.objects.store.list(VALIDATING_WEBHOOKS).length > 0;
  }

  /**
   * Runs the mutating then the validating webhooks; returns the object to store, or throws the refusal. A webhook with
   * reinvocationPolicy IfNeeded that a later webhook's patch came after is called once more, in a second round
   * (apiserver pkg/admission/plugin/webhook/mutating/dispatcher.go, reinvocationcontext.go;
   * pkg/admission/reinvocation.go).
   */
  async admit(a: AdmissionAttributes): Promise<K8sObject | undefined> {
    let object = a.object;
    const mutating = this.hooks(MUTATING_WEBHOOKS, a);
    let invokedReinvocable = new Set<K8sObject>();
    const reinvoke = new Set<K8sObject>();
    for (const round of [0, 1]) {
      if (round === 1 && reinvoke.size === 0) break;
      for (const w of mutating) {
        if (round === 1 && !reinvoke.has(w)) continue;
        const response = await this.call(w, { ...a, object }, true);
        const ops = (response && patchOperations.get(response)) ?? [];
        if (ops.length > 0) {
          const patched = patchedBy(w.name, object, ops);
          if (JSON.stringify(patched) !== JSON.stringify(object)) {
            for (const earlier of invokedReinvocable) reinvoke.add(earlier);
            invokedReinvocable = new Set();
          }
          object = patched;
        }
        if (w.reinvocationPolicy === 'IfNeeded') invokedReinvocable.add(w);
      }
    }
    const validating = this.hooks(VALIDATING_WEBHOOKS, a);
    await Promise.all(validating.map((w) => this.call(w, { ...a, object }, false)));
    return object;
  }

  /** One webhook call: its response when allowed, undefined when it failed and failurePolicy is Ignore. */
  private async call(w: K8sObject, a: AdmissionAttributes, mutating: boolean): Promise<K8sObject | undefined> {
    let response: K8sObject;
    try {
      response = await this.post(w, a, mutating);
    } catch (e) {
      if (!(e instanceof CallingWebhookError)) throw e;
      if (w.failurePolicy === 'Ignore') {
        // kube-apiserver logs this too ("Failed calling webhook, failing open"): the only trace of a broken webhook.
        console.warn(`stand-in apiserver: failing open: ${e.message}`);
        return undefined;
      }
      throw new ApiError(500, 'InternalError', `Internal error occurred: ${e.message}`);
    }
    // Each warning reaches the client, allowed or not (mutating/dispatcher.go, validating/dispatcher.go).
    for (const text of response.warnings ?? []) a.warn?.(String(text));
    if (response.allowed === true) return response;
    throw denied(w.name, response.status);
  }

  private post(w: K8sObject, a: AdmissionAttributes, mutating: boolean): Promise<K8sObject> {
    const failed = (why: string) => new CallingWebhookError(`failed calling webhook "${w.name}": ${why}`);
    const timeoutSeconds = Number(w.timeoutSeconds ?? DEFAULT_TIMEOUT_SECONDS);
    if (!(w.admissionReviewVersions ?? []).includes('v1'))
      return Promise.reject(failed('webhook does not accept v1 AdmissionReview'));
    const target = this.targetOf(w, timeoutSeconds);
    if ('error' in target) return Promise.reject(failed(`failed to call webhook: ${target.error}`));
    const uid = randomUUID();
    const body = JSON.stringify(reviewOf(a, uid));
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        req.destroy();
        reject(failed(`failed to call webhook: Post "${target.display}": context deadline exceeded`));
      }, timeoutSeconds * 1000);
      const req = httpsRequest(
        {
          host: target.host,
          port: target.port,
          localAddress: target.localAddress,
          servername: target.servername,
          path: target.path,
          method: 'POST',
          ca: target.ca,
          headers: {
            'content-type': 'application/json',
            accept: 'application/json',
            'content-length': Buffer.byteLength(body),
          },
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('error', () => undefined); // the timer or the request's error answers
          res.on('end', () => {
            clearTimeout(timer);
            const text = Buffer.concat(chunks).toString('utf8');
            if ((res.statusCode ?? 500) >= 300)
              return reject(
                failed(
                  `failed to call webhook: an error on the server ("${text.slice(0, 200)}") ` +
                    'has prevented the request from succeeding',
                ),
              );
            let review: K8sObject;
            try {
              review = JSON.parse(text);
            } catch (e) {
              return reject(failed(`received invalid webhook response: ${(e as Error).message}`));
            }
            const invalid = invalidResponse(review, uid, mutating);
            if (invalid) return reject(failed(`received invalid webhook response: ${invalid}`));
            const r = review.response;
            // Checked once allowed, as the dispatcher applies the patch (mutating/dispatcher.go).
            if (r.allowed !== true || !r.patch) return resolve(r);
            let ops: unknown;
            try {
              ops = decodePatch(r.patch);
            } catch (e) {
              return reject(failed(`received undecodable patch in webhook response: ${(e as Error).message}`));
            }
            if (r.patchType !== 'JSONPatch') return reject(failed(`unsupported patch type "${r.patchType}"`));
            patchOperations.set(r, ops as unknown[]);
            resolve(r);
          });
        },
      );
      req.on('error', (e) => {
        clearTimeout(timer);
        reject(failed(`failed to call webhook: Post "${target.display}": ${e.message}`));
      });
      req.end(body);
    });
  }

  /** Where a webhook is called: its url, or a ready endpoint of its Service (TLS name `<svc>.<ns>.svc`). */
  private targetOf(w: K8sObject, timeoutSeconds: number) {
    const cc = w.clientConfig ?? {};
    const ca = cc.caBundle ? Buffer.from(cc.caBundle, 'base64').toString('utf8') : undefined;
    const query = `?timeout=${timeoutSeconds}s`;
    if (cc.url) {
      const u = new URL(cc.url);
      const path = `${u.pathname}${u.search ? `${u.search}&` : '?'}${query.slice(1)}`;
      return {
        host: u.hostname,
        port: Number(u.port || 443),
        path,
        ca,
        servername: undefined,
        localAddress: undefined,
        display: `${u.origin}${path}`,
      };
    }
    const svc = cc.service ?? {};
    const port = Number(svc.port ?? 443);
    const ep = serviceEndpoint(this.objects, { namespace: svc.namespace, name: svc.name, port }, (n) =>
      Math.floor(Math.random() * n),
    );
    if ('error' in ep) return ep;
    const servername = `${svc.name}.${svc.namespace}.svc`;
    const path = `${svc.path ?? '/'}${query}`;
    return { ...ep, path, ca, servername, display: `https://${servername}:${port}${path}` };
  }
}

/**
 * What VerifyAdmissionResponse (apiserver pkg/admission/plugin/webhook/request/admissionreview.go) refuses in a v1
 * AdmissionReview, in its words: another uid or kind, a patch without patchType JSONPatch (or the reverse), a patch
 * from a validating webhook. The call then failed, so failurePolicy decides.
 */
function invalidResponse(review: K8sObject, uid: string, mutating: boolean): string | undefined {
  const r = review?.response;
  if (r?.uid !== uid) return `expected response.uid="${uid}", got "${r?.uid ?? ''}"`;
  if (review.apiVersion !== 'admission.k8s.io/v1' || review.kind !== 'AdmissionReview') {
    const [group, version] = String(review.apiVersion ?? '').includes('/')
      ? String(review.apiVersion).split('/')
      : ['', review.apiVersion ?? ''];
    const got = `${group}/${version}, Kind=${review.kind ?? ''}`;
    return `expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got ${got}`;
  }
  const hasPatch = typeof r.patch === 'string' && r.patch.length > 0;
  const hasType = r.patchType !== undefined && r.patchType !== null;
  if (!mutating) {
    if (hasPatch) return 'validating webhook may not return response.patch';
    if (hasType) return 'validating webhook may not return response.patchType';
    return undefined;
  }
  if (hasPatch && !hasType) return 'webhook returned response.patch but not response.patchType';
  if (!hasPatch && hasType) return 'webhook returned response.patchType but not response.patch';
  if (hasType && r.patchType === '') return `webhook returned invalid response.patchType of ""`;
  return undefined;
}

/** The refusal as ToStatusErr words it: `admission webhook "NAME" denied the request: MESSAGE`, code ≥ 400. */
function denied(name: string, status: K8sObject | undefined): ApiError {
  const by = `admission webhook "${name}" denied the request`;
  const message = status?.message
    ? `${by}: ${status.message}`
    : status?.reason
      ? `${by}: ${status.reason}`
      : `${by} without explanation`;
  const code = Math.max(Number(status?.code) || 0, 400);
  return new ApiError(code, status?.reason ?? '', message, status?.details);
}

function reviewOf(a: AdmissionAttributes, uid: string): K8sObject {
  const gvk = { group: a.t.group, version: a.t.version, kind: a.t.kind };
  const gvr = { group: a.t.group, version: a.t.version, resource: a.t.resource };
  const optionsKind = { CREATE: 'CreateOptions', UPDATE: 'UpdateOptions', DELETE: 'DeleteOptions' }[a.operation];
  return {
    apiVersion: 'admission.k8s.io/v1',
    kind: 'AdmissionReview',
    request: {
      uid,
      kind: gvk,
      resource: gvr,
      subResource: a.sub || undefined,
      requestKind: gvk,
      requestResource: gvr,
      requestSubResource: a.sub || undefined,
      name: a.name,
      namespace: a.t.namespaced ? a.ns : undefined,
      operation: a.operation,
      userInfo: { username: a.identity.name, uid: a.identity.uid, groups: a.identity.groups },
      object: a.operation === 'DELETE' ? null : (a.object ?? null),
      oldObject: a.operation === 'CREATE' ? null : (a.oldObject ?? null),
      dryRun: a.dryRun,
      options: { kind: optionsKind, apiVersion: 'meta.k8s.io/v1' },
    },
  };
}
