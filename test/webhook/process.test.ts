/**
 * `vram-preflight webhook` as the process a Deployment runs: the built
 * bundle (launcher and application) started as a child on port 0, its
 * `listening PORT` line, its usage errors, and SIGTERM with requests in
 * flight (held by a stalled registry): every one answered, new connections
 * refused, exit 0.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import https from 'node:https';
import net from 'node:net';
import { X509Certificate } from 'node:crypto';
import { mkdirSync, readFileSync, symlinkSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as r from '../registry/harness.js';
import * as h from './harness.js';

h.requireTools();

const ROOT = path.resolve(import.meta.dirname, '../..');
const dir = h.tempDir('process');
let bundle: string;
let pki: h.Pki;
let leaf: { cert: string; key: string };

beforeAll(() => {
  bundle = path.join(dir, 'dist/vram-preflight.cjs');
  const built = spawnSync(process.execPath, [path.join(ROOT, 'scripts/build.mjs'), '--outfile', bundle], { encoding: 'utf8' });
  if (built.status !== 0) throw new Error(built.stderr);
  pki = h.makePki(path.join(dir, 'pki'));
  leaf = pki.leaf('webhook');
});

afterAll(() => h.removeDir(dir));

const env = { PATH: process.env.PATH, HOME: dir };

function runSync(args: string[]) {
  return spawnSync(process.execPath, [bundle, ...args], { encoding: 'utf8', env, timeout: 20_000 });
}

/** Starts the webhook; resolves with the child and its port once it prints `listening PORT`. */
function startChild(args: string[]): Promise<{ child: ChildProcess; port: number; stderr: () => string; exit: Promise<number | null> }> {
  const child = spawn(process.execPath, [bundle, 'webhook', '--tls-cert-file', leaf.cert, '--tls-key-file', leaf.key, '--port', '0', '--address', '127.0.0.1', ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  const exit = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  return new Promise((resolve, reject) => {
    let stdout = '';
    child.stdout!.on('data', (d: Buffer) => {
      stdout += d.toString();
      const m = stdout.match(/^listening (\d+)\n/);
      if (m) resolve({ child, port: Number(m[1]), stderr: () => stderr, exit });
    });
    child.on('exit', (code) => reject(new Error(`exited ${code} before listening: ${stderr}`)));
  });
}

describe('vram-preflight webhook (the process)', () => {
  it('--help documents the webhook flags and the wrap options; exit 0', () => {
    const help = runSync(['webhook', '--help']);
    expect(help.status).toBe(0);
    for (const flag of ['--tls-cert-file', '--tls-key-file', '--port', '--address', '--config', '--registry-budget-ms', '--kubernetes-budget-ms', '--drain-timeout-ms', '--timeout-seconds', '/mutate', '/healthz', '/readyz', '/metrics']) {
      expect(help.stdout).toContain(flag);
    }
    expect(runSync(['--help']).stdout).toContain('vram-preflight webhook --help');
  });

  it('usage errors: exit 2 with one message, nothing on stdout', () => {
    for (const args of [['webhook'], ['webhook', '--tls-cert-file', 'x'], ['webhook', '--tls-cert-file', 'a', '--tls-key-file', 'b', '--bogus', '1'], ['webhook', '--tls-cert-file', 'a', '--tls-key-file', 'b', '--port', 'http']]) {
      const run = runSync(args);
      expect(run.status, args.join(' ')).toBe(2);
      expect(run.stdout).toBe('');
      expect(run.stderr).toMatch(/^vram-preflight: error USAGE: /);
    }
  });

  it('a bad value of a wrap option, as a flag or a VRAM_PREFLIGHT_* variable: exit 2 at start with the message the post-renderer gives (no change of the config file can fix it)', () => {
    const cases: { args: string[]; env?: Record<string, string> }[] = [
      { args: ['--timeout-seconds=0'] },
      { args: ['--default-utilization', '2'] },
      { args: ['--on-nvidia-smi-unavailable=maybe'] },
      { args: [], env: { VRAM_PREFLIGHT_TIMEOUT_SECONDS: '0' } },
      { args: [], env: { VRAM_PREFLIGHT_TIMOUT_SECONDS: '30' } },
    ];
    for (const { args, env: extra } of cases) {
      const what = `${args.join(' ')} ${JSON.stringify(extra ?? {})}`;
      const webhook = spawnSync(process.execPath, [bundle, 'webhook', '--tls-cert-file', leaf.cert, '--tls-key-file', leaf.key, '--port', '0', '--address', '127.0.0.1', ...args], { encoding: 'utf8', env: { ...env, ...extra }, timeout: 10_000 });
      const render = spawnSync(process.execPath, [bundle, ...args], { encoding: 'utf8', env: { ...env, ...extra }, input: '', timeout: 10_000 });
      expect(render.status, what).toBe(2);
      expect(webhook.status, `${what}: ${webhook.stdout}${webhook.stderr}`).toBe(2);
      expect(webhook.stdout, what).toBe('');
      expect(webhook.stderr, what).toBe(render.stderr);
      expect(webhook.stderr, what).toMatch(/^vram-preflight: error (BAD_OPTION|USAGE): [^\n]+\n/);
    }
  });

  it('--metrics-port serves /metrics over plain HTTP (nothing else); the certificate expiry is a metric, and a warning in the log when it is near', async () => {
    const { child, stderr, exit } = await startChild(['--metrics-port', '0', '--cert-expiry-warning-days', '5']);
    try {
      const lines = () => stderr().trim().split('\n').map((l) => JSON.parse(l) as Record<string, unknown>);
      const port = lines().find((l) => l.msg === 'metrics listening')!.port as number;
      const get = async (p: string) => {
        const res = await fetch(`http://127.0.0.1:${port}${p}`);
        return { status: res.status, type: res.headers.get('content-type'), body: await res.text() };
      };
      const metrics = await get('/metrics');
      expect(metrics.status).toBe(200);
      expect(metrics.type).toBe('text/plain; version=0.0.4; charset=utf-8');
      // The test leaf is valid 2 days (openssl -days 2): its notAfter, to the second.
      const notAfter = Math.round(Date.parse(new X509Certificate(readFileSync(leaf.cert)).validTo) / 1000);
      expect(metrics.body).toContain(`\nvram_preflight_webhook_certificate_expiry_timestamp_seconds ${notAfter}\n`);
      const mutate = await fetch(`http://127.0.0.1:${port}/mutate`, { method: 'POST', body: '{}' });
      expect(mutate.status).toBe(404);
      expect(await mutate.json()).toMatchObject({ status: 404 });
      expect(lines().find((l) => String(l.msg).startsWith('certificate expires in'))).toMatchObject({ level: 'warn', msg: 'certificate expires in 1 day(s)', daysLeft: 1, cert: leaf.cert, fix: expect.stringContaining('renew it') });
    } finally {
      child.kill('SIGTERM');
    }
    expect(await exit).toBe(0);
    // The two ports must differ.
    const plain = runSync(['webhook', '--tls-cert-file', leaf.cert, '--tls-key-file', leaf.key, '--metrics-port', '8443']);
    expect(plain.status).toBe(2);
    expect(plain.stderr).toContain('--metrics-port is --port (8443)');
  });

  it('the metrics port is bounded as the HTTPS port is: 1,000 silent connections, at most 64 open at once (the longest idle closed to make room), each closed by the headers deadline; a scrape is answered meanwhile', async () => {
    const { child, stderr, exit } = await startChild(['--metrics-port', '0', '--shutdown-delay-ms', '0']);
    const sockets: net.Socket[] = [];
    try {
      const port = (stderr().trim().split('\n').map((l) => JSON.parse(l) as Record<string, unknown>).find((l) => l.msg === 'metrics listening')!.port as number);
      let open = 0;
      const t0 = performance.now();
      for (let i = 0; i < 1000; i += 100) {
        await Promise.all(
          Array.from({ length: 100 }, () =>
            new Promise<void>((resolve) => {
              const socket = net.connect(port, '127.0.0.1', () => {
                open++;
                resolve();
              });
              socket.on('error', () => resolve());
              socket.on('close', () => open--);
              // Read what comes (the deadline's 408), so that the server's close is seen.
              socket.resume();
              sockets.push(socket);
            }),
          ),
        );
      }
      // Until the count holds for 300 ms: the server's closes take a moment to arrive.
      for (let last = -1; open !== last; ) {
        last = open;
        await new Promise((resolve) => setTimeout(resolve, 300));
      }
      const heldAtOnce = open;
      const scrape = await fetch(`http://127.0.0.1:${port}/metrics`);
      const text = await scrape.text();
      const closedAtCap = Number(/^vram_preflight_webhook_limit_hits_total\{limit="metrics-connections-idle-closed"\} (\d+)$/m.exec(text)?.[1]);
      while (open > 0 && performance.now() - t0 < 10_000) await new Promise((resolve) => setTimeout(resolve, 100));
      const allClosedMs = performance.now() - t0;
      console.log(`[metrics port] 1,000 silent connections: ${heldAtOnce} open at once, ${closedAtCap} closed at the cap; scrape ${scrape.status}; all closed after ${allClosedMs.toFixed(0)} ms`);
      expect(heldAtOnce).toBeLessThanOrEqual(64);
      expect(closedAtCap).toBeGreaterThanOrEqual(1000 - 64);
      expect(scrape.status).toBe(200);
      // The headers deadline (3 s), checked every second; the rest is a busy machine's room.
      expect(open).toBe(0);
      expect(allClosedMs).toBeLessThan(8000);
    } finally {
      for (const socket of sockets) socket.destroy();
      child.kill('SIGTERM');
    }
    expect(await exit).toBe(0);
  }, 30_000);

  it('the curl recipe of docs/webhook.md ("Try it without a cluster"), run as written: its output is what the text says, the log has only the lines it names, and `kill %1` ends the webhook at once', async () => {
    const docs = readFileSync(path.join(ROOT, 'docs/webhook.md'), 'utf8');
    const recipe = /The webhook itself on loopback[\s\S]*?```sh\n([\s\S]*?)```/.exec(docs)![1]!;
    expect(recipe).toContain('kill %1');
    const work = path.join(dir, 'recipe');
    const bin = path.join(work, 'bin');
    mkdirSync(path.join(work, 'docs'), { recursive: true });
    mkdirSync(bin);
    symlinkSync(path.join(ROOT, 'docs/examples'), path.join(work, 'docs/examples'));
    symlinkSync(bundle, path.join(bin, 'vram-preflight'));
    // A free port instead of 8443, which another test may hold; then how long the webhook takes to exit after `kill %1`.
    const port = await new Promise<number>((resolve) => {
      const probe = net.createServer().listen(0, '127.0.0.1', () => {
        const { port: free } = probe.address() as net.AddressInfo;
        probe.close(() => resolve(free));
      });
    });
    const script = `set -e\n${recipe.replaceAll('8443', String(port))}t0=$(date +%s%N); wait; echo "exited after $(( ($(date +%s%N) - t0) / 1000000 )) ms"\n`;
    const run = spawnSync('bash', ['-c', script], { cwd: work, encoding: 'utf8', env: { PATH: `${bin}:${process.env.PATH}`, HOME: dir }, timeout: 60_000 });
    expect(run.stderr).toBe('');
    expect(run.status).toBe(0);
    // What the text says the commands print.
    expect(JSON.parse(/^\{[\s\S]*?^\}$/m.exec(run.stdout)![0])).toMatchObject({ allowed: true, patchType: 'JSONPatch' });
    expect(run.stdout).toContain('"/spec/containers/0/command"\n"/spec/containers/0/args"\n"/metadata/annotations"\n');
    expect(run.stdout).toMatch(/admissions_total\{outcome="wrapped",dry_run="false"\} 1\n/);
    const exitMs = Number(/exited after (\d+) ms/.exec(run.stdout)![1]);
    expect(exitMs).toBeLessThan(2000);
    // The log: the start's lines the text names, one line for the admission, the shutdown; nothing else.
    const log = readFileSync(path.join(work, 'webhook.log'), 'utf8').trim().split('\n').map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(log.map((l) => l.msg)).toEqual(['config loaded', 'listening', expect.stringMatching(/^certificate expires in less than a day \(2[0-3] h\)$/), 'admission', 'SIGTERM: shutting down', 'shutting down', 'draining', 'drained']);
    expect(log[2]).toMatchObject({ level: 'warn', fix: expect.stringMatching(/^renew it: a self-signed certificate \(made by hand/) });
    expect(log[3]).toMatchObject({ outcome: 'wrapped' });
    expect(log.every((l) => l.level !== 'error')).toBe(true);
  }, 90_000);

  it('a certificate that cannot be read: exit 1, the reason logged', () => {
    const run = runSync(['webhook', '--tls-cert-file', path.join(dir, 'none.crt'), '--tls-key-file', leaf.key]);
    expect(run.status).toBe(1);
    expect(JSON.parse(run.stderr.trim().split('\n').pop()!)).toMatchObject({ level: 'error', msg: 'cannot start', error: expect.stringMatching(/cannot load the TLS certificate .*none\.crt.*ENOENT/) });
  });

  it('SIGTERM with requests in flight and no shutdown delay: each answered, new connections refused, exit 0', async () => {
    const stalled = await r.startStalled();
    try {
      const { child, port, stderr, exit } = await startChild(['--registry-budget-ms', '2500', '--cache-dir', path.join(dir, 'cache'), '--registry-insecure', stalled.host, '--shutdown-delay-ms', '0']);
      const url = `https://127.0.0.1:${port}`;
      expect((await h.h1(url, pki.caCert, { method: 'GET', path: '/readyz' })).status).toBe(200);
      // Each of these waits for the stalled registry (up to the 2.5 s budget) inside the webhook.
      const pod = h.vllmPod({ containers: [{ name: 'model', image: `${stalled.host}/vllm/vllm-openai:v0.12.0`, args: ['--model', 'm'], resources: { limits: { 'nvidia.com/gpu': 1 } } }] });
      const agent = new https.Agent({ keepAlive: true, ca: readFileSync(pki.caCert) });
      const session = h.h2session(url, pki.caCert);
      const inFlight = [
        ...Array.from({ length: 6 }, () => h.h1(url, pki.caCert, { body: h.review(pod) }, agent)),
        ...Array.from({ length: 6 }, () => session.request({ body: h.review(pod) })),
      ];
      // Once all twelve are inside the webhook (the /metrics request itself is the thirteenth), ask for the drain.
      for (;;) {
        const metrics = await h.h1(url, pki.caCert, { method: 'GET', path: '/metrics' });
        if (/^vram_preflight_webhook_in_flight_requests 13$/m.test(metrics.body)) break;
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      child.kill('SIGTERM');
      const answers = await Promise.all(inFlight);
      for (const answer of answers) {
        expect(answer.status).toBe(200);
        const review = h.readReview(answer);
        expect(review.allowed).toBe(true);
        expect(review.warnings?.[0]).toMatch(/the lookup failed \(the webhook's log says why\)/);
      }
      expect(await exit).toBe(0);
      session.close();
      agent.destroy();
      await expect(h.h1(url, pki.caCert, { method: 'GET', path: '/healthz' })).rejects.toThrow(/ECONNREFUSED/);
      const lines = stderr()
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as Record<string, unknown>);
      expect(lines.filter((l) => l.msg === 'admission')).toHaveLength(12);
      expect(lines.filter((l) => l.msg === 'registry lookup unfinished').map((l) => l.error)).toContainEqual(expect.stringMatching(/budget of 2500 ms/));
      expect(lines.find((l) => l.msg === 'drained')).toMatchObject({ unfinished: 0 });
    } finally {
      await stalled.close();
    }
  });
});
