// Tests of how `devop exec`'s outgoing flags merge over devop.json (flags win; negated flags only when given), and of
// this machine's own name kept local.
import { Command } from 'commander';
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../config/schema.js';
import { addExecOptions } from '../config/commander.js';
import { thisMachineNames } from './exec-hook.js';
import { parseOutgoingRule } from './filters.js';
import { outgoingSettingsFrom } from './options.js';

function parse(args: string[], file: Record<string, unknown> = {}): ReturnType<typeof outgoingSettingsFrom> {
  const command = addExecOptions(new Command('exec').exitOverride());
  command.parse(args, { from: 'user' });
  return outgoingSettingsFrom(command, parseConfig(file, 'devop.json'));
}

describe('exec outgoing settings', () => {
  it('defaults: everything on, no rules, no remote files', () => {
    expect(parse([])).toEqual({
      enabled: true,
      proxyEnv: true,
      nodePreload: true,
      nativePreload: true,
      netns: false,
      include: [],
      exclude: [],
      remoteFiles: [],
      clusterDns: true,
    });
  });

  it('takes devop.json when no flag is given', () => {
    const settings = parse([], {
      outgoing: {
        enabled: false,
        proxy: false,
        nodePreload: false,
        nativePreload: false,
        netns: true,
        include: ['*.svc.cluster.local'],
        exclude: ['10.0.0.0/8'],
      },
      remoteFiles: ['/var/run/secrets/kubernetes.io/serviceaccount/token'],
      dns: { enabled: false },
    });
    expect(settings).toEqual({
      enabled: false,
      proxyEnv: false,
      nodePreload: false,
      nativePreload: false,
      netns: true,
      include: ['*.svc.cluster.local'],
      exclude: ['10.0.0.0/8'],
      remoteFiles: ['/var/run/secrets/kubernetes.io/serviceaccount/token'],
      clusterDns: false,
    });
  });

  it('flags win: includes replace, excludes and remote files add up, negations apply', () => {
    const settings = parse(
      [
        '--outgoing-include',
        'db.prod',
        '--outgoing-exclude',
        ':5432',
        '--remote-file',
        '/etc/a',
        '--remote-file',
        '/etc/b',
        '--no-node-preload',
        '--no-native-preload',
        '--outgoing-netns',
      ],
      { outgoing: { include: ['*.svc.cluster.local'], exclude: ['10.0.0.0/8'] }, remoteFiles: ['/etc/a'] },
    );
    expect(settings).toEqual({
      enabled: true,
      proxyEnv: true,
      nodePreload: false,
      nativePreload: false,
      netns: true,
      include: ['db.prod'],
      exclude: ['10.0.0.0/8', ':5432'],
      remoteFiles: ['/etc/a', '/etc/b'],
      clusterDns: true,
    });
    expect(parse(['--no-outgoing', '--no-proxy-env'])).toMatchObject({ enabled: false, proxyEnv: false });
  });
});

describe("this machine's own name", () => {
  it('stays local (the pod does not know it) when it is a host rule, and is left out when it cannot be one', () => {
    expect(thisMachineNames('dev-laptop.corp.example')).toEqual(['dev-laptop.corp.example']);
    expect(parseOutgoingRule('dev-laptop.corp.example').kind).toBe('host');
    expect(thisMachineNames('my laptop')).toEqual([]);
    expect(thisMachineNames('')).toEqual([]);
  });
});
