// How `devop exec` gets outgoing traffic, DNS and remote files: the flags it adds, their merge over devop.json, and the
// child-env hook that starts the proxy on the session's tunnel and returns the env plus its cleanup.
import { networkInterfaces } from 'node:os';
import type { Command } from 'commander';
import type { DevopConfig } from '../../shared/config.js';
import { FEATURES } from '../../shared/protocol.js';
import type { ChildEnvHook } from '../services/exec.js';
import { createMuxDialer } from './mux-dialer.js';
import { apiServerRule, startOutgoing } from './session.js';

const collect = (value: string, previous: string[] = []): string[] => [...previous, value];

/** What the exec session does with outgoing traffic (flags merged over devop.json). */
export interface OutgoingSettings {
  enabled: boolean;
  proxyEnv: boolean;
  nodePreload: boolean;
  include: string[];
  exclude: string[];
  remoteFiles: string[];
  /** Names resolved by the pod's DNS (devop.json dns.enabled), else by this machine's. */
  clusterDns: boolean;
}

/** Adds --remote-file, --outgoing-include/--outgoing-exclude, --no-outgoing, --no-proxy-env, --no-node-preload. */
export function addOutgoingOptions(command: Command): Command {
  return command
    .option('--remote-file <path>', 'file of the target container to copy under $DEVOP_ROOT (same path), repeatable', collect)
    .option('--outgoing-include <rule>', 'only these destinations go through the pod: HOST, *.DOMAIN, IP, CIDR, [:PORT], repeatable', collect)
    .option('--outgoing-exclude <rule>', 'destinations that stay local (same forms), repeatable; loopback always does', collect)
    .option('--no-outgoing', "keep the local command's outgoing connections and DNS local")
    .option('--no-proxy-env', 'do not set HTTP(S)_PROXY / ALL_PROXY / NO_PROXY for the local command')
    .option('--no-node-preload', 'do not add the Node preload to NODE_OPTIONS');
}

/** Flags win over devop.json; a negated flag counts only when it was given on the command line. */
export function outgoingSettingsFrom(command: Command, config: DevopConfig): OutgoingSettings {
  const opts = command.opts<{ remoteFile?: string[]; outgoingInclude?: string[]; outgoingExclude?: string[] }>();
  const given = (name: string): boolean | undefined =>
    command.getOptionValueSource(name) === 'cli' ? Boolean(command.getOptionValue(name)) : undefined;
  return {
    enabled: given('outgoing') ?? config.outgoing.enabled,
    proxyEnv: given('proxyEnv') ?? config.outgoing.proxy,
    nodePreload: given('nodePreload') ?? config.outgoing.nodePreload,
    include: opts.outgoingInclude && opts.outgoingInclude.length > 0 ? opts.outgoingInclude : config.outgoing.include,
    exclude: [...config.outgoing.exclude, ...(opts.outgoingExclude ?? [])],
    remoteFiles: [...new Set([...config.remoteFiles, ...(opts.remoteFile ?? [])])],
    clusterDns: config.dns.enabled,
  };
}

/** This machine's own addresses (a local program connecting to them means this machine, not something in the pod). */
export function thisMachineAddresses(): string[] {
  return Object.values(networkInterfaces())
    .flatMap((entries) => entries ?? [])
    .filter((entry) => !entry.internal && !entry.address.startsWith('fe80:'))
    .map((entry) => entry.address);
}

/** The exec child-env hook: proxy + preload env and DEVOP_ROOT; its cleanup stops the proxy and removes DEVOP_ROOT. */
export function outgoingChildEnvHook(settings: OutgoingSettings): ChildEnvHook {
  return async (env, { session, reporter }) => {
    const features = session.hello.features;
    const canDial = features.includes(FEATURES.outgoing);
    if (settings.enabled && !canDial) {
      reporter.emit({ type: 'log', level: 'warn', message: "this agent does not offer outgoing connections: the local command's traffic stays local" });
    }
    const outgoing = await startOutgoing({
      dialer: createMuxDialer(session.mux),
      enabled: settings.enabled && canDial,
      proxyEnv: settings.proxyEnv,
      nodePreload: settings.nodePreload,
      include: settings.include,
      exclude: settings.exclude,
      alwaysLocal: [apiServerRule(session.kc.getCurrentCluster()?.server), ...thisMachineAddresses()].filter((rule): rule is string => Boolean(rule)),
      remoteFiles: settings.remoteFiles,
      localNames: !settings.clusterDns,
      reporter,
    });
    if (outgoing.proxy) {
      reporter.emit({ type: 'log', level: 'info', message: `outgoing proxy on ${outgoing.proxy.address} (SOCKS5 + HTTP): connections and DNS go through the pod` });
    }
    return { env: { ...env, ...outgoing.env(env) }, cleanup: () => outgoing.close() };
  };
}
