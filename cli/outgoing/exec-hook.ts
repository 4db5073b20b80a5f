// How `devop exec` gets outgoing traffic, DNS and remote files: the flags it adds, their merge over devop.json, and the
// child-env hook that starts the proxy on the session's tunnel and returns the env plus its cleanup.
import { hostname, networkInterfaces } from 'node:os';
import { FEATURES } from '../../shared/protocol.js';
import type { ChildEnvHook } from '../session/connect.js';
import { createMuxDialer } from './mux-dialer.js';
import type { OutgoingSettings } from './options.js';
import { apiServerRule, startOutgoing } from './session.js';
import { info, warn } from '../reporter.js';

/** This machine's own addresses (a local program connecting to them means this machine, not something in the pod). */
export function thisMachineAddresses(): string[] {
  return Object.values(networkInterfaces())
    .flatMap((entries) => entries ?? [])
    .filter((entry) => !entry.internal && !entry.address.startsWith('fe80:'))
    .map((entry) => entry.address);
}

/**
 * This machine's own name: programs look it up for themselves (Java's InetAddress.getLocalHost, Python's
 * socket.getfqdn), and the pod's DNS does not know it.
 */
export function thisMachineNames(name = hostname()): string[] {
  return /^[a-z0-9_-]+(\.[a-z0-9_-]+)*$/i.test(name) ? [name] : [];
}

/** The exec child-env hook: proxy + preload env and DEVOP_ROOT; its cleanup stops the proxy and removes DEVOP_ROOT. */
export function outgoingChildEnvHook(settings: OutgoingSettings): ChildEnvHook {
  return async ({ session, reporter }) => {
    const features = session.hello.features;
    const canDial = features.includes(FEATURES.outgoing);
    if (settings.enabled && !canDial) {
      warn(reporter, "this agent does not offer outgoing connections: the local command's traffic stays local");
    }
    const udpRefusal = features.includes(FEATURES.udp)
      ? undefined
      : `agent ${session.hello.agentVersion} does not relay UDP: the local command's UDP and the DNS queries it ` +
        'sends itself stay on this machine — fix: use the agent image of this devop version (--agent-image)';
    if (settings.enabled && canDial && udpRefusal) warn(reporter, udpRefusal);
    const dialer = createMuxDialer(session.tunnel);
    // Without it, the proxy refuses SOCKS5 UDP ASSOCIATE and the shim leaves UDP sockets alone.
    if (udpRefusal) dialer.udp = undefined;
    const outgoing = await startOutgoing({
      dialer,
      enabled: settings.enabled && canDial,
      proxyEnv: settings.proxyEnv,
      nodePreload: settings.nodePreload,
      nativePreload: settings.nativePreload,
      netns: settings.netns,
      include: settings.include,
      exclude: settings.exclude,
      alwaysLocal: [
        apiServerRule(session.kc.getCurrentCluster()?.server),
        ...thisMachineNames(),
        ...thisMachineAddresses(),
      ].filter((rule): rule is string => Boolean(rule)),
      remoteFiles: settings.remoteFiles,
      localNames: !settings.clusterDns,
      reporter,
    });
    if (outgoing.proxy) {
      info(
        reporter,
        `outgoing proxy on ${outgoing.proxy.address} (SOCKS5 + HTTP): connections and DNS go through the pod`,
      );
    }
    if (outgoing.launcher) {
      info(reporter, 'the command runs in a network namespace of its own: its TCP connects and DNS go through devop');
    }
    return {
      apply: (env) => ({ ...env, ...outgoing.env(env) }),
      cleanup: () => outgoing.close(),
      launcher: outgoing.launcher,
    };
  };
}
