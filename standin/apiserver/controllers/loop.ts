// A controller's run loop: reconcile everything shortly after any relevant change, and on a slow periodic resync.
import type { Objects } from '../objects.js';
import type { ApiError, K8sObject } from '../errors.js';

/** Changes arriving within this window are reconciled together. */
const DEBOUNCE_MS = 15;
/** Periodic resync, for time-based work (TTL, retries after a conflict). */
const RESYNC_MS = 1000;

export interface Controller {
  name: string;
  /** Store keys whose changes trigger a reconcile; undefined = every key. */
  watches?: string[];
  reconcile(objects: Objects): void;
}

export interface RunningController {
  kick(): void;
  stop(): void;
}

export function runController(objects: Objects, c: Controller): RunningController {
  let timer: NodeJS.Timeout | undefined;
  let stopped = false;
  const run = () => {
    timer = undefined;
    if (stopped) return;
    try {
      c.reconcile(objects);
    } catch (e) {
      const code = (e as ApiError).code;
      // Conflicts and not-found races resolve on the next pass; anything else is a bug worth seeing.
      if (code !== 409 && code !== 404) console.error(`stand-in ${c.name} controller:`, e);
    }
  };
  const kick = () => {
    if (!stopped && !timer) timer = setTimeout(run, DEBOUNCE_MS);
  };
  const unsubscribe = objects.store.subscribe((ev) => {
    if (!c.watches || c.watches.includes(ev.key)) kick();
  });
  const resync = setInterval(kick, RESYNC_MS);
  kick();
  return {
    kick,
    stop() {
      stopped = true;
      unsubscribe();
      clearInterval(resync);
      if (timer) clearTimeout(timer);
    },
  };
}

export function isControlledBy(o: K8sObject, uid: string): boolean {
  return (o.metadata.ownerReferences ?? []).some((r: K8sObject) => r.uid === uid && r.controller);
}

export function controllerRef(owner: K8sObject) {
  return {
    apiVersion: owner.apiVersion,
    kind: owner.kind,
    name: owner.metadata.name,
    uid: owner.metadata.uid,
    controller: true,
    blockOwnerDeletion: true,
  };
}

export function isPodReady(p: K8sObject): boolean {
  return (p.status?.conditions ?? []).some((c: K8sObject) => c.type === 'Ready' && c.status === 'True');
}

export function isPodActive(p: K8sObject): boolean {
  return !p.metadata.deletionTimestamp && p.status?.phase !== 'Succeeded' && p.status?.phase !== 'Failed';
}
