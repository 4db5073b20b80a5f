// The outgoing flags of `devop exec` (defined in cli/config/options.ts) merged over devop.json — apart from the proxy
// and the session they set up (exec-hook.ts).
import type { Command } from 'commander';
import type { FlagValues } from '../config/options.js';
import type { DevopConfig } from '../config/types.js';

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

/** Flags win over devop.json; a negated flag counts only when it was given on the command line. */
export function outgoingSettingsFrom(command: Command, config: DevopConfig): OutgoingSettings {
  const opts = command.opts<FlagValues<'remoteFile' | 'outgoingInclude' | 'outgoingExclude'>>();
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
