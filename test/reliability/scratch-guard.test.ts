import { readFile } from 'node:fs/promises';
import { afterAll, it } from 'vitest';
import { pidsOfContainer } from '../cluster/kubelet/testing.js';
import { LOCAL_SERVER_COMMAND, devopExec, freePort, killLocalServer, startE2ECluster } from '../e2e/harness.js';
import { agentPods, deployReplicas, devopRules, podPid } from './harness.js';
let stop: () => Promise<void> = async () => undefined;
afterAll(() => stop());
it('guard timing', async () => {
  const e = await startE2ECluster(); stop = () => e.cluster.stop();
  const [pod] = await deployReplicas(e, 'g', 1);
  const local = await freePort();
  const run = devopExec(e.cluster, ['-t', 'deploy/g', '--steal', '-p', `8080:${local}`], [...LOCAL_SERVER_COMMAND], { env: { LOCAL_PORT: String(local) } });
  await run.ready();
  const pid = await podPid(pod);
  const [agent] = await agentPods(e, pod.metadata!.name!);
  const all = await pidsOfContainer(agent.status!.containerStatuses![0].containerID!);
  for (const p of all) console.log(p, (await readFile(`/proc/${p}/cmdline`, 'utf8')).replace(/\0/g, ' ').slice(0, 150));
  const { execFileSync } = await import('node:child_process');
  const guard = all.find((x) => true);
  for (const p of all) { try { console.log('FD', p, execFileSync('ls', ['-l', `/proc/${p}/fd`]).toString().split('\n').filter((l) => l.includes('socket') || l.includes('pipe')).join(' | ')); } catch {} }
  console.log('SS', execFileSync('sh', ['-c', `nsenter -t ${all[1]} -n ss -xpn | grep -E 'cat|sh' || true`]).toString());
  for (const p of all) console.log('ENV', p, (await readFile(`/proc/${p}/environ`, 'utf8').catch(() => '')).split('\0').filter((l) => /^PATH=/.test(l)).join(' '));
  const { spawn } = await import('node:child_process');
  const shPid = all[2];
  const tr = spawn('strace', ['-f', '-e', 'trace=execve,exit_group,read', '-o', '/tmp/guard-strace.txt', '-p', String(shPid), '-p', String(all[3])], { stdio: 'ignore' });
  await new Promise((r) => setTimeout(r, 1000));
  const t0 = Date.now();
  process.kill(all[1], 'SIGKILL');
  for (let i = 0; i < 40; i++) {
    const alive = [];
    for (const p of all) { try { process.kill(p, 0); alive.push(p); } catch {} }
    if (i === 1) for (const p of all) console.log('ST', p, (await readFile(`/proc/${p}/status`, 'utf8').catch(() => '')).split('\n').filter((l) => /^(State|PPid|Name)/.test(l)).join(' '));
    if (i === 2) console.log('SS2', execFileSync('sh', ['-c', `nsenter -t ${pid} -n ss -xpn | grep -E 'cat|sh|node' || true`]).toString());
    console.log(Date.now() - t0, 'alive', alive.join(','), 'rules', (await devopRules(pid)).length);
    await new Promise((r) => setTimeout(r, 250));
  }
  await run.stop('SIGKILL'); killLocalServer(run);
}, 120000);
