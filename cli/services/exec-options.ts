// `devop exec` options: the flags as the last layer over devop.json (cli/config/flags.ts), then read into the one
// options object the exec service takes. Pure, so the precedence rules are unit-tested.
import type { ExecOptionName, FlagValues } from '../config/options.js';
import type { DevopConfig } from '../config/types.js';
import { withFlags } from '../config/flags.js';
import { UserError } from '../../shared/errors.js';
import { compileBodyFilter } from '../../shared/body-filter.js';
import { compileFilterRegex } from '../../shared/filter-regex.js';
import type { HttpFilter } from '../../shared/protocol.js';
import type { ExecServiceOptions } from './exec.js';
import { replaceKindOf } from '../replace/stage.js';
import { parsePortSpec } from './ports.js';
import { parseTlsSecretSpec } from '../config/tls-secret-spec.js';
import { SESSION_DEFAULTS } from '../session/connect.js';

export { parseDuration } from '../config/duration.js';

/** The flags as commander hands them over (undefined = not given). */
export type ExecFlags = FlagValues<ExecOptionName>;

/** A filter pattern: RE2 syntax (matched in linear time by the agent), refused here before any agent is touched. */
function checkRegex(source: string, flag: string): void {
  compileFilterRegex(source, flag);
}

/** Header filter `Name: value-regex`. */
export function checkHeaderFilter(text: string): string {
  const i = text.indexOf(':');
  if (i <= 0 || !/^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/.test(text.slice(0, i).trim())) {
    throw new UserError(
      `--http-header-filter "${text}" is not "Name: value-regex"`,
      "pass e.g. --http-header-filter 'x-user: alice'",
    );
  }
  checkRegex(text.slice(i + 1).trim(), '--http-header-filter');
  return text;
}

/** The exec flags that say more than the schema can (each in its own line), before they join the config. */
function checkExecFlags(flags: ExecFlags): void {
  if (flags.steal && flags.mirror)
    throw new UserError('--steal and --mirror were both given', 'pass one of them (the default is --mirror)');
  refuseLoneRecordSecrets(flags);
  if (flags.httpHeaderFilter !== undefined) checkHeaderFilter(flags.httpHeaderFilter);
  if (flags.httpPathFilter !== undefined) checkRegex(flags.httpPathFilter, '--http-path-filter');
  if (flags.httpBodyFilter !== undefined) compileBodyFilter(flags.httpBodyFilter, '--http-body-filter');
  flags.tlsSecret?.forEach(parseTlsSecretSpec);
  if (flags.httpMethodFilter !== undefined && !/^[A-Za-z]+$/.test(flags.httpMethodFilter)) {
    throw new UserError(
      `--http-method-filter "${flags.httpMethodFilter}" is not an HTTP method`,
      'pass e.g. --http-method-filter GET',
    );
  }
  flags.port?.forEach(parsePortSpec);
}

/**
 * devop.json (its env.file read from the file's folder) with the exec flags over it: the config `devop exec` runs
 * with, for the session (execOptionsFrom) and its outgoing traffic (outgoing/options.ts) alike.
 */
export function resolveExecConfig(flags: ExecFlags, config: DevopConfig, configDir?: string): DevopConfig {
  checkExecFlags(flags);
  const file = config.env.file;
  const fromDir =
    file !== undefined && configDir
      ? { ...config, env: { ...config.env, file: resolveFrom(configDir, file) } }
      : config;
  return withFlags(fromDir, flags);
}

/** `devop exec` needs the local command after `--`: checked before anything else. */
export function requireLocalCommand(command: readonly string[]): void {
  if (command.length === 0) {
    throw new UserError(
      'no local command given',
      'put the command after `--`, e.g. devop exec -t deploy/api -- node server.js',
    );
  }
}

export function mergeExecOptions(
  flags: ExecFlags,
  config: DevopConfig,
  command: readonly string[],
  configDir?: string,
): ExecServiceOptions {
  requireLocalCommand(command);
  return execOptionsFrom(flags, resolveExecConfig(flags, config, configDir), command);
}

/** The HTTP filter of a resolved config (the method in capitals), or undefined when it names no criterion. */
export function httpFilterOf(config: DevopConfig): HttpFilter | undefined {
  const filter = config.incoming.httpFilter;
  if (!filter || !(filter.header || filter.path || filter.method || filter.body)) return undefined;
  // The TLS Secrets are the CLI's to read: their names never go to the agent.
  const { tlsSecret: _secrets, ...criteria } = filter;
  return { ...criteria, ...(filter.method !== undefined ? { method: filter.method.toUpperCase() } : {}) };
}

/** `--tls-secret` / incoming.httpFilter.tlsSecret: only a filtered steal ends TLS; anything else is one line. */
function tlsSecretsOf(config: DevopConfig, httpFilter: HttpFilter | undefined): string[] | undefined {
  const secrets = config.incoming.httpFilter?.tlsSecret;
  if (!secrets?.length) return undefined;
  if (!httpFilter || config.incoming.mode !== 'steal')
    throw new UserError(
      '--tls-secret applies to a filtered steal only',
      'add --steal and an HTTP filter (e.g. --http-header-filter), or drop --tls-secret: a whole-port steal or ' +
        'a mirror passes TLS through as it is',
    );
  return secrets;
}

/** The exec service's options from the resolved config, and the flags that have no devop.json key. */
export function execOptionsFrom(flags: ExecFlags, config: DevopConfig, command: readonly string[]): ExecServiceOptions {
  requireLocalCommand(command);
  const httpFilter = httpFilterOf(config);
  const tlsSecrets = tlsSecretsOf(config, httpFilter);
  const ports = config.incoming.ports.map(String);
  ports.forEach(parsePortSpec);
  if (config.replace) replaceKindOf({ target: config.target, allPods: config.allPods });

  return {
    command: command[0],
    args: command.slice(1),
    target: config.target,
    namespace: config.namespace,
    context: config.context,
    kubeconfig: config.kubeconfig,
    requestTimeout: config.requestTimeout,
    mode: config.incoming.mode,
    ports,
    httpFilter,
    ...(tlsSecrets ? { tlsSecrets } : {}),
    flush: config.incoming.flush,
    stealProbes: config.incoming.stealProbes,
    env: {
      include: config.env.include,
      exclude: config.env.exclude,
      allow: config.env.allow,
      override: config.env.override,
      file: config.env.file,
    },
    agentImage: config.agent.image ?? SESSION_DEFAULTS.agentImage,
    agentNamespace: config.agent.namespace,
    agentPrivileged: flags.agentPrivileged ?? false,
    ...(flags.reuseAgent ? { reuseAgent: flags.reuseAgent } : {}),
    ephemeral: config.agent.ephemeral,
    agentTtlSeconds: config.agent.ttlSeconds,
    startupTimeoutMs: Math.round(config.agent.startupTimeoutSeconds * 1000),
    agentExtras: {
      labels: config.agent.labels,
      annotations: config.agent.annotations,
      tolerations: config.agent.tolerations,
    },
    verbose: flags.verbose ?? false,
    allPods: config.allPods,
    allowHostNetwork: config.allowHostNetwork,
    ...(flags.record ? { record: flags.record } : {}),
    ...(flags.record ? { recordSecrets: config.recordSecrets } : {}),
    shadow: shadowOf(flags, config),
    replace: config.replace,
  };
}

function refuseLoneRecordSecrets(flags: ExecFlags): void {
  if (flags.recordSecrets && !flags.record)
    throw new UserError(
      '--record-secrets only applies to --record FILE',
      'add --record FILE, or drop --record-secrets',
    );
}

function shadowOf(flags: ExecFlags, config: DevopConfig): ExecServiceOptions['shadow'] {
  if (flags.inCluster && !config.shadow.enabled)
    throw new UserError('--in-cluster only applies to --shadow', 'add --shadow, or drop --in-cluster');
  return config.shadow.enabled ? { inCluster: config.shadow.inCluster } : undefined;
}

function resolveFrom(dir: string, path: string): string {
  return path.startsWith('/') ? path : `${dir.replace(/\/$/, '')}/${path}`;
}
