// The env that points the local command at the session's outgoing proxy: proxy variables for any program (with the
// session's credentials in the URLs), NODE_OPTIONS --import of the preload for Node programs, LD_PRELOAD of the shim
// for dynamically linked ones, DEVOP_PRELOAD_CONFIG (both preloads' config, with the token), DEVOP_ROOT (remote files).
// The env, unlike a command line, only the user reads.
import { existsSync } from 'node:fs';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { PRELOAD_CONFIG_ENV, type PreloadConfig } from './control-protocol.js';
import { noProxyEntries } from './filters.js';

export const DEVOP_ROOT_ENV = 'DEVOP_ROOT';

/**
 * The preload bundle: next to the running bundle (dist/cli.js → dist/preload.js), or dist/preload.js of the checkout
 * when devop runs from source (tests, tsx).
 */
export function preloadBundlePath(): string | undefined {
  for (const relative of ['./preload.js', '../../dist/preload.js']) {
    const candidate = fileURLToPath(new URL(relative, import.meta.url));
    if (existsSync(candidate)) return candidate;
  }
  return undefined;
}

/**
 * The LD_PRELOAD shim for dynamically linked programs (cli/native/outgoing-shim.c, built on Linux only): next to the
 * running bundle, or in dist/ of the checkout when devop runs from source.
 */
export function outgoingShimPath(): string | undefined {
  if (process.platform !== 'linux') return undefined;
  for (const relative of ['./devop-outgoing.so', '../../dist/devop-outgoing.so']) {
    const candidate = fileURLToPath(new URL(relative, import.meta.url));
    if (existsSync(candidate)) return candidate;
  }
  return undefined;
}

export interface OutgoingEnvInput {
  proxy: { host: string; port: number };
  /** The proxy's credentials (OutgoingProxy.credentials). */
  credentials: { username: string; secret: string };
  include: readonly string[];
  exclude: readonly string[];
  /** Absolute path of dist/preload.js; undefined = no Node preload (proxy env only). */
  preloadPath?: string;
  /** Absolute path of dist/devop-outgoing.so (no space or colon: ld.so splits there); undefined = no shim. */
  shimPath?: string;
  /** The per-session directory holding the remote files. */
  root?: string;
}

/** The variables to add; NODE_OPTIONS is the child's own (if any) with the --import appended. */
export function outgoingEnv(
  childEnv: Readonly<Record<string, string>>,
  input: OutgoingEnvInput,
): Record<string, string> {
  const hostPort = input.proxy.host.includes(':')
    ? `[${input.proxy.host}]:${input.proxy.port}`
    : `${input.proxy.host}:${input.proxy.port}`;
  // userinfo in a proxy URL is what curl, Python (requests, urllib), Go's net/http and Node's proxy agents send as
  // Proxy-Authorization Basic (HTTP) or RFC 1929 username/password (SOCKS5). The secret is hex: no escaping needed.
  const { username, secret } = input.credentials;
  const userinfo = `${encodeURIComponent(username)}:${encodeURIComponent(secret)}@`;
  const httpProxy = `http://${userinfo}${hostPort}`;
  // socks5h: the proxy, not the program, resolves names (they must be resolved by the pod's DNS).
  const socksProxy = `socks5h://${userinfo}${hostPort}`;
  const noProxy = noProxyEntries(input.exclude).join(',');
  const vars: Record<string, string> = {
    HTTP_PROXY: httpProxy,
    http_proxy: httpProxy,
    HTTPS_PROXY: httpProxy,
    https_proxy: httpProxy,
    ALL_PROXY: socksProxy,
    all_proxy: socksProxy,
    NO_PROXY: noProxy,
    no_proxy: noProxy,
  };
  if (input.preloadPath || input.shimPath) {
    const config: PreloadConfig = {
      proxy: input.proxy,
      include: [...input.include],
      exclude: [...input.exclude],
      token: secret,
    };
    vars[PRELOAD_CONFIG_ENV] = JSON.stringify(config);
  }
  if (input.shimPath) {
    const existing = childEnv.LD_PRELOAD?.trim();
    vars.LD_PRELOAD = existing ? `${existing}:${input.shimPath}` : input.shimPath;
  }
  if (input.preloadPath) {
    // A file: URL needs no quoting inside NODE_OPTIONS, whatever the path contains.
    const importFlag = `--import=${pathToFileURL(input.preloadPath).href}`;
    const existing = childEnv.NODE_OPTIONS?.trim();
    vars.NODE_OPTIONS = existing ? `${existing} ${importFlag}` : importFlag;
  }
  if (input.root) vars[DEVOP_ROOT_ENV] = input.root;
  return vars;
}
