// The OCI runtime spec of one container, built as containerd's CRI plugin builds it for a Kubernetes container: the
// image rootfs (a snapshot mounted by the kubelet), the pod's network namespace, its own mount/IPC/UTS (and PID unless
// hostPID) namespaces, Kubernetes' default capabilities + add − drop, privileged, runAsUser/runAsGroup,
// readOnlyRootFilesystem.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

/** What Kubernetes (through containerd's CRI plugin) gives a container that asks for no capabilities. */
export const DEFAULT_CAPABILITIES = [
  'CAP_CHOWN',
  'CAP_DAC_OVERRIDE',
  'CAP_FSETID',
  'CAP_FOWNER',
  'CAP_MKNOD',
  'CAP_NET_RAW',
  'CAP_SETGID',
  'CAP_SETUID',
  'CAP_SETFCAP',
  'CAP_SETPCAP',
  'CAP_NET_BIND_SERVICE',
  'CAP_SYS_CHROOT',
  'CAP_KILL',
  'CAP_AUDIT_WRITE',
];

/** Every capability runc 1.1 knows, in kernel order (bit n = capability n): what `ALL` and privileged ask for. */
export const ALL_CAPABILITIES = [
  'CAP_CHOWN',
  'CAP_DAC_OVERRIDE',
  'CAP_DAC_READ_SEARCH',
  'CAP_FOWNER',
  'CAP_FSETID',
  'CAP_KILL',
  'CAP_SETGID',
  'CAP_SETUID',
  'CAP_SETPCAP',
  'CAP_LINUX_IMMUTABLE',
  'CAP_NET_BIND_SERVICE',
  'CAP_NET_BROADCAST',
  'CAP_NET_ADMIN',
  'CAP_NET_RAW',
  'CAP_IPC_LOCK',
  'CAP_IPC_OWNER',
  'CAP_SYS_MODULE',
  'CAP_SYS_RAWIO',
  'CAP_SYS_CHROOT',
  'CAP_SYS_PTRACE',
  'CAP_SYS_PACCT',
  'CAP_SYS_ADMIN',
  'CAP_SYS_BOOT',
  'CAP_SYS_NICE',
  'CAP_SYS_RESOURCE',
  'CAP_SYS_TIME',
  'CAP_SYS_TTY_CONFIG',
  'CAP_MKNOD',
  'CAP_LEASE',
  'CAP_AUDIT_WRITE',
  'CAP_AUDIT_CONTROL',
  'CAP_SETFCAP',
  'CAP_MAC_OVERRIDE',
  'CAP_MAC_ADMIN',
  'CAP_SYSLOG',
  'CAP_WAKE_ALARM',
  'CAP_BLOCK_SUSPEND',
  'CAP_AUDIT_READ',
  'CAP_PERFMON',
  'CAP_BPF',
  'CAP_CHECKPOINT_RESTORE',
];

function capName(name: string): string {
  const upper = name.toUpperCase();
  return upper.startsWith('CAP_') ? upper : `CAP_${upper}`;
}

/**
 * The effective capability set of a container, in CRI's order: privileged (or add ALL) means all; drop ALL empties the
 * default set; then the added ones come in and the dropped ones go.
 */
export function containerCapabilities(sc: { privileged?: boolean; add?: string[]; drop?: string[] }): string[] {
  if (sc.privileged) return [...ALL_CAPABILITIES];
  const add = (sc.add ?? []).map(capName);
  const drop = (sc.drop ?? []).map(capName);
  let caps = drop.includes('CAP_ALL') ? [] : [...DEFAULT_CAPABILITIES];
  if (add.includes('CAP_ALL')) caps = [...ALL_CAPABILITIES];
  for (const cap of add) if (cap !== 'CAP_ALL' && !caps.includes(cap)) caps.push(cap);
  return caps.filter((cap) => !drop.includes(cap));
}

export interface SpecMount {
  source: string;
  destination: string;
  readOnly: boolean;
}

export interface ContainerSpecInput {
  /** Host directory where the container's rootfs (its snapshot) is mounted. */
  rootfs: string;
  argv: string[];
  env: Record<string, string>;
  cwd: string;
  uid: number;
  gid: number;
  /** The pod's UTS namespace (its hostname is set there). */
  utsPath: string;
  /** The pod's IPC namespace; 'host' with hostIPC. */
  ipcPath: 'host' | string;
  /** /run/netns/<pod netns>. */
  netnsPath: string;
  /** undefined: a PID namespace of its own; 'host': the host's (hostPID); a path: join that one (ephemeral target). */
  pidNamespace?: 'host' | string;
  capabilities: string[];
  privileged: boolean;
  readOnlyRootFilesystem: boolean;
  /** false when allowPrivilegeEscalation is false (Kubernetes leaves no_new_privs off otherwise). */
  noNewPrivileges: boolean;
  /** Relative to every cgroup hierarchy's root; contains the container ID, as /proc/<pid>/cgroup then shows. */
  cgroupsPath: string;
  mounts: SpecMount[];
  /** resources.limits: memory in bytes (no swap beyond it), CPU in millicores (a CFS quota). */
  limits?: { memoryBytes?: number; cpuMillis?: number };
}

/** The CFS period a CPU limit is a quota of (kubelet's default). */
const CPU_PERIOD_US = 100_000;

const QUANTITY_SUFFIXES: Record<string, number> = {
  Ki: 2 ** 10,
  Mi: 2 ** 20,
  Gi: 2 ** 30,
  Ti: 2 ** 40,
  Pi: 2 ** 50,
  Ei: 2 ** 60,
  n: 1e-9,
  u: 1e-6,
  m: 1e-3,
  '': 1,
  k: 1e3,
  M: 1e6,
  G: 1e9,
  T: 1e12,
  P: 1e15,
  E: 1e18,
};

/** A Kubernetes resource quantity ("256Mi", "500m", "1.5", "2e9") as a number; undefined when it is not one. */
export function parseQuantity(quantity: string | number | undefined): number | undefined {
  if (quantity === undefined) return undefined;
  if (typeof quantity === 'number') return quantity;
  const m = /^([+-]?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$/.exec(quantity.trim());
  return m ? Number(m[1]) * QUANTITY_SUFFIXES[m[2] ?? ''] : undefined;
}

const MASKED_PATHS = [
  '/proc/acpi',
  '/proc/asound',
  '/proc/kcore',
  '/proc/keys',
  '/proc/latency_stats',
  '/proc/timer_list',
  '/proc/timer_stats',
  '/proc/sched_debug',
  '/proc/scsi',
  '/sys/firmware',
];
const READONLY_PATHS = ['/proc/bus', '/proc/fs', '/proc/irq', '/proc/sys', '/proc/sysrq-trigger'];

/** The runtime spec (config.json) that `ctr run --config` hands to runc. */
export function containerSpec(input: ContainerSpecInput): Record<string, unknown> {
  const ro = (opts: string[]) => (input.privileged ? opts : [...opts, 'ro']);
  // The pod's namespaces (as a node's containers join the pause container's), a mount namespace of its own.
  const namespaces: Array<{ type: string; path?: string }> = [
    ...(input.ipcPath === 'host' ? [] : [{ type: 'ipc', path: input.ipcPath }]),
    { type: 'uts', path: input.utsPath },
    { type: 'mount' },
    { type: 'network', path: input.netnsPath },
  ];
  if (input.pidNamespace === undefined) namespaces.push({ type: 'pid' });
  else if (input.pidNamespace !== 'host') namespaces.push({ type: 'pid', path: input.pidNamespace });
  const mounts = [
    { destination: '/proc', type: 'proc', source: 'proc', options: ['nosuid', 'noexec', 'nodev'] },
    input.privileged
      ? { destination: '/dev', type: 'bind', source: '/dev', options: ['rbind', 'nosuid'] }
      : {
          destination: '/dev',
          type: 'tmpfs',
          source: 'tmpfs',
          options: ['nosuid', 'strictatime', 'mode=755', 'size=65536k'],
        },
    {
      destination: '/dev/pts',
      type: 'devpts',
      source: 'devpts',
      options: ['nosuid', 'noexec', 'newinstance', 'ptmxmode=0666', 'mode=0620', 'gid=5'],
    },
    {
      destination: '/dev/shm',
      type: 'tmpfs',
      source: 'shm',
      options: ['nosuid', 'noexec', 'nodev', 'mode=1777', 'size=65536k'],
    },
    { destination: '/dev/mqueue', type: 'mqueue', source: 'mqueue', options: ['nosuid', 'noexec', 'nodev'] },
    { destination: '/sys', type: 'sysfs', source: 'sysfs', options: ro(['nosuid', 'noexec', 'nodev']) },
    {
      destination: '/sys/fs/cgroup',
      type: 'cgroup',
      source: 'cgroup',
      options: ro(['nosuid', 'noexec', 'nodev', 'relatime']),
    },
    ...input.mounts.map((m) => ({
      destination: m.destination,
      type: 'bind',
      source: m.source,
      options: ['rbind', 'rprivate', m.readOnly ? 'ro' : 'rw'],
    })),
  ];
  return {
    ociVersion: '1.0.2-dev',
    process: {
      terminal: false,
      user: { uid: input.uid, gid: input.gid },
      args: input.argv,
      env: Object.entries(input.env).map(([k, v]) => `${k}=${v}`),
      cwd: input.cwd,
      capabilities: {
        bounding: input.capabilities,
        effective: input.capabilities,
        permitted: input.capabilities,
      },
      noNewPrivileges: input.noNewPrivileges,
    },
    root: { path: input.rootfs, readonly: input.readOnlyRootFilesystem },
    mounts,
    linux: {
      cgroupsPath: input.cgroupsPath,
      namespaces,
      resources: {
        devices: [{ allow: input.privileged, access: 'rwm' }],
        ...(input.limits?.memoryBytes
          ? { memory: { limit: Math.floor(input.limits.memoryBytes), swap: Math.floor(input.limits.memoryBytes) } }
          : {}),
        ...(input.limits?.cpuMillis
          ? { cpu: { quota: Math.ceil((input.limits.cpuMillis * CPU_PERIOD_US) / 1000), period: CPU_PERIOD_US } }
          : {}),
      },
      ...(input.privileged ? {} : { maskedPaths: MASKED_PATHS, readonlyPaths: READONLY_PATHS }),
    },
  };
}

function lookup(file: string, name: string): string[] | undefined {
  let text = '';
  try {
    text = readFileSync(file, 'utf8');
  } catch {
    return undefined;
  }
  return text
    .split('\n')
    .map((line) => line.split(':'))
    .find((fields) => fields[0] === name || fields[2] === name);
}

/**
 * The uid/gid a container runs as, as the CRI plugin decides: runAsUser/runAsGroup when set, else the image's `User`
 * (`name`, `uid`, `name:group`, `uid:gid`) looked up in the rootfs' /etc/passwd and /etc/group; the primary group of
 * the user when no group is named; root when nothing is said.
 */
export function resolveUser(
  rootfs: string,
  imageUser: string | undefined,
  runAsUser?: number,
  runAsGroup?: number,
): { uid: number; gid: number } {
  const [userPart, groupPart] = (imageUser ?? '').split(':');
  let uid = 0;
  let gid: number | undefined;
  if (runAsUser !== undefined) {
    uid = runAsUser;
    const entry = lookup(join(rootfs, 'etc', 'passwd'), String(runAsUser));
    if (entry) gid = Number(entry[3]);
  } else if (userPart) {
    const entry = lookup(join(rootfs, 'etc', 'passwd'), userPart);
    if (/^\d+$/.test(userPart)) uid = Number(userPart);
    else if (entry) uid = Number(entry[2]);
    else throw new Error(`unable to find user ${userPart}: no matching entries in passwd file`);
    if (entry) gid = Number(entry[3]);
  }
  if (runAsGroup !== undefined) gid = runAsGroup;
  else if (groupPart && runAsUser === undefined) {
    const entry = lookup(join(rootfs, 'etc', 'group'), groupPart);
    if (/^\d+$/.test(groupPart)) gid = Number(groupPart);
    else if (entry) gid = Number(entry[2]);
    else throw new Error(`unable to find group ${groupPart}: no matching entries in group file`);
  }
  return { uid, gid: gid ?? 0 };
}

/**
 * The capabilities this process may hand on (its bounding set): a container cannot get more, and runc fails to start
 * one that asks for more — so `privileged` and `ALL` mean these, as on a node whose kubelet is itself restricted.
 */
export function boundingCapabilities(): string[] {
  const line = /^CapBnd:\s*([0-9a-f]+)$/m.exec(readFileSync('/proc/self/status', 'utf8'));
  const mask = BigInt(`0x${line?.[1] ?? '0'}`);
  return ALL_CAPABILITIES.filter((_, bit) => (mask >> BigInt(bit)) & 1n);
}
