// What `devop exec` does with outgoing traffic, read off devop.json with the flags over it — apart from the proxy and
// the session they set up (exec-hook.ts).
import type { Command } from 'commander';
import { givenFlags } from '../config/commander.js';
import { withFlags } from '../config/flags.js';
import type { DevopConfig } from '../config/types.js';

/** What the exec session does with outgoing traffic (flags merged over devop.json). */
export interface OutgoingSettings {
  enabled: boolean;
  proxyEnv: boolean;
  nodePreload: boolean;
  /** LD_PRELOAD shim for dynamically linked programs (outgoing.nativePreload). */
  nativePreload: boolean;
  /** Run the command in a network namespace of its own whose TCP and DNS reach devop (outgoing.netns, Linux). */
  netns: boolean;
  include: string[];
  exclude: string[];
  remoteFiles: string[];
  /** Names resolved by the pod's DNS (devop.json dns.enabled), else by this machine's. */
  clusterDns: boolean;
}

/** Flags win over devop.json (the flags layer, cli/config/flags.ts); a negated flag counts only when it was given. */
export function outgoingSettingsFrom(command: Command, config: DevopConfig): OutgoingSettings {
  return outgoingSettings(withFlags(config, givenFlags(command)));
}

/** The outgoing settings of a resolved config (devop.json with the flags over it). */
export function outgoingSettings(config: DevopConfig): OutgoingSettings {
  return {
    enabled: config.outgoing.enabled,
    proxyEnv: config.outgoing.proxy,
    nodePreload: config.outgoing.nodePreload,
    nativePreload: config.outgoing.nativePreload,
    netns: config.outgoing.netns,
    include: config.outgoing.include,
    exclude: config.outgoing.exclude,
    remoteFiles: [...new Set(config.remoteFiles)],
    clusterDns: config.dns.enabled,
  };
}
