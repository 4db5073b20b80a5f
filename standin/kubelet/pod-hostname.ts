// A pod's hostname, its domain and the name its kernel reports, made as the kubelet makes them (kubernetes
// pkg/kubelet/kubelet_pods.go GeneratePodHostNameAndDomain, pkg/kubelet/util/util.go GetNodenameForKernel).
import type { V1Pod } from '@kubernetes/client-node';

/** A hostname is at most 63 characters: the kernel's 64 bytes hold a terminating NUL (truncatePodHostnameIfNeeded). */
const HOSTNAME_MAX_LEN = 63;
/** The kernel's nodename field holds 64 characters: an FQDN longer than that cannot be the pod's hostname. */
const FQDN_MAX_LEN = 64;

export interface PodHostname {
  /** The short name: spec.hostname, else the pod name, cut to 63 characters without a trailing '-' or '.'. */
  hostname: string;
  /** `<subdomain>.<namespace>.svc.<cluster domain>` with spec.subdomain, else ''. */
  domain: string;
  /** The UTS hostname, /etc/hostname and HOSTNAME: the FQDN with setHostnameAsFQDN and a domain, else the hostname. */
  nodename: string;
}

/** Throws when setHostnameAsFQDN asks for an FQDN the kernel cannot hold: the sandbox cannot be made. */
export function podHostname(pod: V1Pod, clusterDomain: string): PodHostname {
  const name = pod.metadata?.name ?? '';
  const hostname = truncateHostname(pod.spec?.hostname || name);
  const subdomain = pod.spec?.subdomain;
  const domain = subdomain ? `${subdomain}.${pod.metadata?.namespace ?? 'default'}.svc.${clusterDomain}` : '';
  if (!domain || !pod.spec?.setHostnameAsFQDN) return { hostname, domain, nodename: hostname };
  const fqdn = `${hostname}.${domain}`;
  if (fqdn.length > FQDN_MAX_LEN) {
    throw new Error(
      `failed to construct FQDN from pod hostname and cluster domain, FQDN ${fqdn} is too long ` +
        `(${FQDN_MAX_LEN} characters is the max, ${fqdn.length} characters requested)`,
    );
  }
  return { hostname, domain, nodename: fqdn };
}

function truncateHostname(hostname: string): string {
  if (hostname.length <= HOSTNAME_MAX_LEN) return hostname;
  return hostname.slice(0, HOSTNAME_MAX_LEN).replace(/[-.]+$/, '');
}
