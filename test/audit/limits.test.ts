/**
 * `vram-preflight audit` held to the webhook's standard, against the real API
 * server (scripts/cluster.sh): what a cluster holds bounds neither its memory
 * (pods of 1.4 MB in one page, under the chart's heap cap) nor its time (an
 * answer dripped byte by byte through a slow network, a list that goes on
 * past its deadline), and what a pod names cannot aim its registry lookups
 * at a host and port of the pod creator's choice.
 */
import { spawn, spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse, stringify } from 'yaml';
import { bundle, cluster, kubectl, kubectlOk, namespace, removeTempDirs, runBundle, tempDir, type Cluster } from './harness.js';

const id = `${process.pid.toString(36)}${Date.now().toString(36).slice(-5)}`;
const NS = { big: `audit-${id}-big`, many: `audit-${id}-many`, lookup: `audit-${id}-lookup` };
const NONE = `absent-${id}`;

let c: Cluster;
let file = '';

const vllm = (image = 'vllm/vllm-openai:v0.10.1') => ({ name: 'model', image, args: ['--model', 'm'], resources: { limits: { 'nvidia.com/gpu': '1' } } });
const pod = (namespace: string, name: string, containers: unknown[]) => ({ apiVersion: 'v1', kind: 'Pod', metadata: { name, namespace }, spec: { containers } });

/** Creates pods through the API, a List at a time. */
function create(pods: unknown[], batch = 100): void {
  for (let i = 0; i < pods.length; i += batch) kubectlOk(['create', '-f', '-'], { input: JSON.stringify({ apiVersion: 'v1', kind: 'List', items: pods.slice(i, i + batch) }) });
}

/** The audit with its peak RSS (GNU time's maximum resident set size), MiB, and how long it took. */
function measured(args: readonly string[], env: Record<string, string>): ReturnType<typeof runBundle> & { peakMiB: number; ms: number } {
  const out = path.join(tempDir('time'), 'rss');
  const t0 = performance.now();
  const r = spawnSync('/usr/bin/time', ['-f', '%M', '-o', out, process.execPath, file, 'audit', ...args], { encoding: 'utf8', env: { PATH: process.env.PATH, ...env }, maxBuffer: 64 << 20 });
  const ms = performance.now() - t0;
  if (r.error) throw r.error;
  return { status: r.status, stdout: r.stdout, stderr: r.stderr, peakMiB: Number(readFileSync(out, 'utf8').trim().split('\n').at(-1)) / 1024, ms };
}

/** The audit as its own process, without blocking this one (the proxy below runs here). */
function auditAsync(args: readonly string[], env: Record<string, string>): Promise<{ status: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [file, 'audit', ...args], { env: { PATH: process.env.PATH, ...env } });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('error', reject);
    child.on('close', (status) => resolve({ status, stdout, stderr }));
  });
}

/** A kubeconfig like the admin's, with another server address (a proxy in front of the API server). */
function kubeconfigVia(server: string): string {
  const config = parse(readFileSync(c.kubeconfig, 'utf8'));
  for (const entry of config.clusters) entry.cluster.server = server;
  const out = path.join(tempDir('via'), 'config');
  writeFileSync(out, stringify(config));
  return out;
}

/** A TCP proxy to the API server that relays its answers `bytes` at a time every `everyMs` (a slow, dripping network); the requests go through at once. */
async function drippingProxy(bytes: number, everyMs: number): Promise<{ url: string; close(): Promise<void> }> {
  const target = new URL(c.api);
  const sockets = new Set<net.Socket>();
  const timers = new Set<NodeJS.Timeout>();
  const server = net.createServer((client) => {
    const upstream = net.connect(Number(target.port), target.hostname);
    sockets.add(client).add(upstream);
    client.pipe(upstream);
    const pending: Buffer[] = [];
    upstream.on('data', (chunk: Buffer) => pending.push(chunk));
    const timer = setInterval(() => {
      const all = Buffer.concat(pending.splice(0));
      if (all.length === 0) return;
      client.write(all.subarray(0, bytes));
      if (all.length > bytes) pending.push(all.subarray(bytes));
    }, everyMs);
    timers.add(timer);
    const end = () => {
      clearInterval(timer);
      client.destroy();
      upstream.destroy();
    };
    client.on('close', end).on('error', end);
    upstream.on('close', end).on('error', end);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `https://127.0.0.1:${(server.address() as net.AddressInfo).port}`,
    close: async () => {
      for (const t of timers) clearInterval(t);
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

beforeAll(async () => {
  c = cluster();
  file = bundle();
  for (const ns of Object.values(NS)) await namespace(ns, { 'vram-preflight.test/suite': `audit-${id}` });
}, 600_000);

afterAll(() => {
  if (c) kubectl(['delete', 'namespace', ...Object.values(NS), '--wait=false', '--ignore-not-found']);
  removeTempDirs();
});

describe('the audit\'s memory is bounded, whatever the cluster holds', () => {
  it('40 pods of 1.4 MB in one page: decided under the CronJob\'s heap cap (96 MiB of its 256Mi), far below the page\'s size', () => {
    // 1.4 MB each, in a sidecar's env (the API server takes a pod's env whole; annotations stop at 256 KiB).
    const pad = 'x'.repeat(1_400_000);
    create(Array.from({ length: 40 }, (_, i) => pod(NS.big, `big-${i}`, [vllm(), { name: 'pad', image: 'busybox:1.36', env: [{ name: 'PAD', value: pad }] }])), 4);
    const run = measured(['--namespace', NS.big, '--webhook-configuration', NONE, '--registry-lookup=never', '--output=json'], { KUBECONFIG: c.kubeconfig, HOME: tempDir('home'), NODE_OPTIONS: '--max-old-space-size=96' });
    console.log(`[audit memory] 40 pods of 1.4 MB in one page (56 MB of JSON), heap cap 96 MiB: exit ${run.status}, peak RSS ${run.peakMiB.toFixed(0)} MiB, ${run.ms.toFixed(0)} ms`);
    expect(run.stderr).toBe('');
    expect(run.status).toBe(3);
    const report = JSON.parse(run.stdout);
    expect(report.summary.pods).toBe(40);
    expect(report.containers).toHaveLength(40);
    // The page held whole took 4-5 times its size (259 MiB, then out of heap); one pod at a time takes a few.
    expect(run.peakMiB).toBeLessThan(160);
  }, 300_000);
});

describe('the audit has a deadline', () => {
  it('an answer dripped byte by byte (a slow network in front of the real API server): it stops at --timeout, says so, nothing on stdout', async () => {
    const proxy = await drippingProxy(64, 250);
    try {
      const t0 = performance.now();
      const run = await auditAsync(['--namespace', NS.many, '--webhook-configuration', NONE, '--registry-lookup=never', '--timeout=3s'], { KUBECONFIG: kubeconfigVia(proxy.url), HOME: tempDir('home') });
      const ms = performance.now() - t0;
      console.log(`[audit deadline] dripped answers, --timeout=3s: exit ${run.status} after ${ms.toFixed(0)} ms: ${run.stderr.split('\n')[0]}`);
      expect(run.status).toBe(1);
      expect(run.stdout).toBe('');
      expect(run.stderr).toMatch(/^vram-preflight: error KUBERNETES_API: the audit did not finish within --timeout 3s( \(\d+ pods read\))?: no whole answer to GET \S+ before the deadline\n/);
      expect(run.stderr).toContain('fix: give it more time (--timeout 5m');
      expect(ms).toBeLessThan(3000 + 2500);
    } finally {
      await proxy.close();
    }
  }, 60_000);

  it('a list that goes on past the deadline (300 pods, one per page): it stops at --timeout with how far it got; the default is 30 s', () => {
    create(Array.from({ length: 300 }, (_, i) => pod(NS.many, `p-${i}`, [vllm()])));
    const env = { KUBECONFIG: c.kubeconfig, HOME: tempDir('home') };
    const whole = runBundle(file, ['audit', '--namespace', NS.many, '--webhook-configuration', NONE, '--registry-lookup=never', '--chunk-size=1'], env);
    expect(whole.stderr).toBe('');
    expect(whole.stdout).toContain('300 pods;');
    const t0 = performance.now();
    const cut = runBundle(file, ['audit', '--namespace', NS.many, '--webhook-configuration', NONE, '--registry-lookup=never', '--chunk-size=1', '--timeout=400ms'], env);
    const ms = performance.now() - t0;
    console.log(`[audit deadline] 300 pages, --timeout=400ms: exit ${cut.status} after ${ms.toFixed(0)} ms: ${cut.stderr.split('\n')[0]}`);
    expect(cut.status).toBe(1);
    expect(cut.stdout).toBe('');
    const read = Number(/within --timeout 400ms \((\d+) pods read\)/.exec(cut.stderr)?.[1]);
    expect(read).toBeLessThan(300);
    expect(ms).toBeLessThan(400 + 2500);
    // The flag: a duration as kubectl and helm write one; the default is said in --help.
    expect(runBundle(file, ['audit', '--timeout=soon'], env).stderr).toContain('error USAGE: --timeout is "soon"');
    expect(runBundle(file, ['audit', '--help'], env).stdout).toMatch(/--timeout DURATION\s+the whole audit at most this long: 90s, 5m, 1m30s \(a bare number: seconds; 0: no limit\) \(default 30s\)/);
  }, 120_000);
});

describe('the audit looks images up under the webhook\'s registry policy', () => {
  it('a pod naming an image on a loopback host and port: no connection is made there, the container says why; allowed by the operator, it is asked', async () => {
    let connections = 0;
    const listener = net.createServer((socket) => {
      connections++;
      socket.destroy();
    });
    await new Promise<void>((resolve) => listener.listen(0, '127.0.0.1', resolve));
    const there = `127.0.0.1:${(listener.address() as net.AddressInfo).port}`;
    try {
      create([pod(NS.lookup, 'aimed', [vllm(`${there}/x/vllm:1`)])]);
      const env = { KUBECONFIG: c.kubeconfig, HOME: tempDir('home'), XDG_CACHE_HOME: tempDir('cache') };
      // Its own process, so that this one's listener sees every connection as it comes.
      const run = await auditAsync(['--namespace', NS.lookup, '--webhook-configuration', NONE, '--output=json'], env);
      expect(run.stderr).toBe('');
      expect(run.status).toBe(3);
      expect(connections).toBe(0);
      const [container] = JSON.parse(run.stdout).containers;
      expect(container.decision.action).toBe('error');
      expect(container.decision.reason).toContain(`lookup failed: its registry ${there} is not one the lookups are allowed to reach`);
      // The operator allows it (as for the webhook, the config's registryAllow or registryInsecure): now it is asked.
      await auditAsync(['--namespace', NS.lookup, '--webhook-configuration', NONE, `--registry-insecure=${there}`], env);
      expect(connections).toBeGreaterThan(0);
    } finally {
      await new Promise<void>((resolve) => listener.close(() => resolve()));
    }
  }, 60_000);
});
