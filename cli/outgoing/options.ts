// The outgoing flags of `devop exec` and their merge over devop.json — apart from the proxy and the session they set up
// (exec-hook.ts), so that defining the flags loads none of that.
import type { Command } from 'commander';
import type { DevopConfig } from '../config/types.js';

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

