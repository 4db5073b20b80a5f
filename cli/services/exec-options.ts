// `devop exec` options: the flags merged over devop.json (flags win) into the one options object the exec service
// takes. Pure, so the precedence rules are unit-tested.
import type { ExecOptionName, FlagValues } from '../config/options.js';
import type { DevopConfig } from '../config/types.js';
import { UserError } from '../../shared/errors.js';
import { compileFilterRegex } from '../../shared/filter-regex.js';
import type { HttpFilter, StealMode } from '../../shared/protocol.js';
import type { ExecServiceOptions } from './exec.js';
import { replaceKindOf } from './replace.js';
import { parsePortSpec } from './ports.js';
import { SESSION_DEFAULTS } from '../session/connect.js';

/** The flags as commander hands them over (undefined = not given). */
export type ExecFlags = FlagValues<ExecOptionName>;

/** `90`, `90s`, `1500ms`, `2m` → milliseconds. */
export function parseDuration(text: string, flag: string): number {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m)?$/.exec(text.trim());
  if (!m)
    throw new UserError(
      `${flag} ${text} is not a duration`,
      `pass seconds (e.g. ${flag} 60) or a number with ms, s or m`,
    );
  const n = Number(m[1]);
  const unit = m[2] ?? 's';
  return Math.round(unit === 'ms' ? n : unit === 'm' ? n * 60_000 : n * 1000);
}

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

export function mergeExecOptions(
  flags: ExecFlags,
  config: DevopConfig,
  command: readonly string[],
  configDir?: string,
): ExecServiceOptions {
  if (command.length === 0) {
    throw new UserError(
      'no local command given',
      'put the command after `--`, e.g. devop exec -t deploy/api -- node server.js',
    );
  }
  if (flags.steal && flags.mirror)
    throw new UserError('--steal and --mirror were both given', 'pass one of them (the default is --mirror)');
  const mode: StealMode = flags.steal ? 'steal' : flags.mirror ? 'mirror' : config.incoming.mode;
  refuseLoneRecordSecrets(flags);

  const fileFilter = config.incoming.httpFilter;
  const anyFilterFlag =
    flags.httpHeaderFilter !== undefined || flags.httpPathFilter !== undefined || flags.httpMethodFilter !== undefined;
  let httpFilter: HttpFilter | undefined;
  if (anyFilterFlag) {
    if (flags.httpHeaderFilter !== undefined) checkHeaderFilter(flags.httpHeaderFilter);
    if (flags.httpPathFilter !== undefined) checkRegex(flags.httpPathFilter, '--http-path-filter');
    if (flags.httpMethodFilter !== undefined && !/^[A-Za-z]+$/.test(flags.httpMethodFilter)) {
      throw new UserError(
        `--http-method-filter "${flags.httpMethodFilter}" is not an HTTP method`,
        'pass e.g. --http-method-filter GET',
      );
    }
    httpFilter = {
      ...(flags.httpHeaderFilter !== undefined ? { header: flags.httpHeaderFilter } : {}),
      ...(flags.httpPathFilter !== undefined ? { path: flags.httpPathFilter } : {}),
      ...(flags.httpMethodFilter !== undefined ? { method: flags.httpMethodFilter.toUpperCase() } : {}),
      match: fileFilter?.match ?? 'all',
    };
  } else if (fileFilter && (fileFilter.header || fileFilter.path || fileFilter.method)) {
    httpFilter = { ...fileFilter };
  }

  const ports = flags.port && flags.port.length > 0 ? flags.port : config.incoming.ports.map(String);
  ports.forEach(parsePortSpec);

  const envFile =
    flags.envFile ??
    (config.env.file !== undefined && configDir ? resolveFrom(configDir, config.env.file) : config.env.file);

  const replace = flags.replace ?? config.replace;
  const target = flags.target ?? config.target;
  const allPods = flags.allPods ?? config.allPods;
  if (replace) replaceKindOf({ target, allPods });

  return {
    command: command[0],
    args: command.slice(1),
    target,
    namespace: flags.namespace ?? config.namespace,
    context: flags.context ?? config.context,
    kubeconfig: flags.kubeconfig ?? config.kubeconfig,
    requestTimeout: flags.requestTimeout ?? config.requestTimeout,
    mode,
    ports,
    httpFilter,
    flush: flags.flush ?? config.incoming.flush,
    stealProbes: flags.stealProbes ?? config.incoming.stealProbes,
    env: {
      include: flags.envInclude && flags.envInclude.length > 0 ? flags.envInclude : config.env.include,
      exclude: [...config.env.exclude, ...(flags.envExclude ?? [])],
      allow: [...config.env.allow, ...(flags.envAllow ?? [])],
      override: config.env.override,
      file: envFile,
    },
    agentImage: flags.agentImage ?? config.agent.image ?? SESSION_DEFAULTS.agentImage,
    agentNamespace: flags.agentNamespace ?? config.agent.namespace,
    agentPrivileged: flags.agentPrivileged ?? false,
    ...(flags.reuseAgent ? { reuseAgent: flags.reuseAgent } : {}),
    ephemeral: flags.ephemeral ?? config.agent.ephemeral,
    agentTtlSeconds:
      flags.agentTtl !== undefined
        ? Math.round(parseDuration(flags.agentTtl, '--agent-ttl') / 1000)
        : config.agent.ttlSeconds,
    startupTimeoutMs:
      flags.startupTimeout !== undefined
        ? parseDuration(flags.startupTimeout, '--startup-timeout')
        : config.agent.startupTimeoutSeconds * 1000,
    agentExtras: {
      labels: config.agent.labels,
      annotations: config.agent.annotations,
      tolerations: config.agent.tolerations,
    },
    verbose: flags.verbose ?? false,
    allPods,
    allowHostNetwork: flags.allowHostNetwork ?? config.allowHostNetwork,
    ...(flags.record ? { record: flags.record } : {}),
    ...(flags.record ? { recordSecrets: recordSecrets(flags, config) } : {}),
    shadow: mergeShadow(flags, config),
    replace,
  };
}

/** --record-secrets (or recordSecrets in devop.json / DEVOP_RECORD_SECRETS); the flag alone means nothing. */
function recordSecrets(flags: ExecFlags, config: DevopConfig): boolean {
  return flags.recordSecrets ?? config.recordSecrets;
}

function refuseLoneRecordSecrets(flags: ExecFlags): void {
  if (flags.recordSecrets && !flags.record)
    throw new UserError(
      '--record-secrets only applies to --record FILE',
      'add --record FILE, or drop --record-secrets',
    );
}

function mergeShadow(flags: ExecFlags, config: DevopConfig): ExecServiceOptions['shadow'] {
  const enabled = flags.shadow ?? config.shadow.enabled;
  const inCluster = flags.inCluster ?? config.shadow.inCluster;
  if (flags.inCluster && !enabled)
    throw new UserError('--in-cluster only applies to --shadow', 'add --shadow, or drop --in-cluster');
  return enabled ? { inCluster } : undefined;
}

function resolveFrom(dir: string, path: string): string {
  return path.startsWith('/') ? path : `${dir.replace(/\/$/, '')}/${path}`;
}
