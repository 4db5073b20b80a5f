// Kubernetes Status error bodies (metav1.Status) with the codes and reasons kube-apiserver uses.
export type K8sObject = Record<string, any>;

export class ApiError extends Error {
  constructor(
    readonly code: number,
    readonly reason: string,
    message: string,
    readonly details?: Record<string, unknown>,
  ) {
    super(message);
  }

  toStatus(): K8sObject {
    const status: K8sObject = {
      kind: 'Status',
      apiVersion: 'v1',
      metadata: {},
      status: 'Failure',
      message: this.message,
      reason: this.reason,
      code: this.code,
    };
    if (this.details) status.details = this.details;
    return status;
  }
}

/**
 * "pods" in group "" → `pods`; "deployments" in group "apps" → `deployments.apps` (as kube-apiserver names them in
 * messages).
 */
export function qualifiedResource(group: string, resource: string): string {
  return group ? `${resource}.${group}` : resource;
}

export function notFound(group: string, resource: string, name: string): ApiError {
  return new ApiError(404, 'NotFound', `${qualifiedResource(group, resource)} "${name}" not found`, {
    name,
    group: group || undefined,
    kind: resource,
  });
}

export function alreadyExists(group: string, resource: string, name: string): ApiError {
  return new ApiError(409, 'AlreadyExists', `${qualifiedResource(group, resource)} "${name}" already exists`, {
    name,
    group: group || undefined,
    kind: resource,
  });
}

export function conflict(group: string, resource: string, name: string, why: string): ApiError {
  return new ApiError(
    409,
    'Conflict',
    `Operation cannot be fulfilled on ${qualifiedResource(group, resource)} "${name}": ${why}`,
    { name, group: group || undefined, kind: resource },
  );
}

export function invalid(
  kind: string,
  group: string,
  name: string,
  causes: { field: string; message: string; reason?: string }[],
): ApiError {
  const text = causes.map((c) => `${c.field}: ${c.message}`).join(', ');
  return new ApiError(422, 'Invalid', `${kind}${group ? `.${group}` : ''} "${name}" is invalid: ${text}`, {
    name,
    group: group || undefined,
    kind,
    causes: causes.map((c) => ({ reason: c.reason ?? 'FieldValueInvalid', message: c.message, field: c.field })),
  });
}

export function badRequest(message: string): ApiError {
  return new ApiError(400, 'BadRequest', message);
}

export function methodNotAllowed(
  message = 'the server does not allow this method on the requested resource',
): ApiError {
  return new ApiError(405, 'MethodNotAllowed', message);
}

export function gone(message: string): ApiError {
  return new ApiError(410, 'Expired', message);
}

export function unauthorized(): ApiError {
  return new ApiError(401, 'Unauthorized', 'Unauthorized');
}

export function statusSuccess(details?: Record<string, unknown>): K8sObject {
  const s: K8sObject = { kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Success' };
  if (details) s.details = details;
  return s;
}

/** Errors from the node (e.g. the kubelet's lookup errors carry an HTTP `status`) as Status errors; others as 500. */
export function toApiError(e: unknown): ApiError {
  if (e instanceof ApiError) return e;
  const status = (e as { status?: unknown }).status;
  const message = (e as Error)?.message ?? String(e);
  if (status === 404) return new ApiError(404, 'NotFound', message);
  if (status === 400) return new ApiError(400, 'BadRequest', message);
  return new ApiError(500, 'InternalError', `Internal error occurred: ${message}`);
}
