// Port specs of `devop exec -p REMOTE[:LOCAL]`, and the default: the target container's declared ports.
import type { V1Container } from '@kubernetes/client-node';
import { parsePortMapping } from '../config/schema.js';
import { UserError } from '../../shared/errors.js';

export interface PortMapping {
  remote: number;
  local: number;
}

/** Parses `REMOTE[:LOCAL]` (or a port number) with devop.json's syntax; a bad one is a UserError. */
export function parsePortSpec(spec: string | number): PortMapping {
  const mapping = parsePortMapping(spec);
  if (!mapping)
    throw new UserError(
      `bad port "${spec}": expected REMOTE[:LOCAL] with ports 1-65535`,
      'pass -p REMOTE[:LOCAL], e.g. -p 3000 or -p 80:8080',
    );
  return mapping;
}

/**
 * The ports to take over: the given specs, else the target's own ports (the Service's targetPort of an APIService or
 * a webhook, where the API server connects), else every TCP port the container declares (local = remote).
 */
export function resolvePorts(
  specs: readonly (string | number)[],
  container: V1Container | undefined,
  targetPorts?: readonly number[],
): PortMapping[] {
  const mappings =
    specs.length > 0
      ? specs.map(parsePortSpec)
      : targetPorts
        ? targetPorts.map((p) => ({ remote: p, local: p }))
        : (container?.ports ?? [])
            .filter((p) => (p.protocol ?? 'TCP') === 'TCP')
            .map((p) => ({ remote: p.containerPort, local: p.containerPort }));
  const seen = new Set<number>();
  for (const m of mappings) {
    if (seen.has(m.remote)) throw new UserError(`port ${m.remote} is given twice`, 'pass each remote port once to -p');
    seen.add(m.remote);
  }
  return mappings;
}
