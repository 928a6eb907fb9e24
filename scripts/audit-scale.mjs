#!/usr/bin/env node
// The audit's memory and time on a large cluster, against the real API server
// of the tests (scripts/cluster.sh up): prints figures, compares builds in the
// same run (docs/webhook.md, "Audit", cites them).
//
//   node scripts/audit-scale.mjs [--pods 5000] [--big 40] [--runs 3] [--bundle FILE]... [--clean]
//
// It creates (once; later runs find them) a namespace of N small vLLM pods
// and one of 40 pods of 1.4 MB, through the API in batches (they need no
// node: no kubelet runs them), then runs `vram-preflight audit` on each,
// alternating the builds given (default: this checkout's dist/), and prints
// each build's peak RSS (GNU time's maximum resident set size) and wall time,
// median of the runs. The 1.4 MB pods are audited with the heap cap the
// chart gives the audit's CronJob (96 MiB of its 256Mi) and without one.
// NODE_EXTRA_CA_CERTS is unset for the runs: it slows every Node start.
// --clean deletes the namespaces afterwards (the cluster's other tests audit
// all namespaces, and 5,000 more pods slow them down).
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const args = process.argv.slice(2);
const option = (name, fallback) => {
  const i = args.indexOf(name);
  return i === -1 ? fallback : args[i + 1];
};
const pods = Number(option('--pods', '5000'));
const big = Number(option('--big', '40'));
const runs = Number(option('--runs', '3'));
const bundles = args.flatMap((a, i) => (args[i - 1] === '--bundle' ? [path.resolve(a)] : []));
if (bundles.length === 0) bundles.push(path.join(root, 'dist/vram-preflight.cjs'));

const env = Object.fromEntries(
  spawnSync('bash', [path.join(root, 'scripts/cluster.sh'), 'env'], { encoding: 'utf8' })
    .stdout.trim()
    .split('\n')
    .map((line) => [line.slice(0, line.indexOf('=')), line.slice(line.indexOf('=') + 1)]),
);
if (!env.KUBECONFIG) throw new Error('no control plane: run bash scripts/cluster.sh up');
const kubectl = (argv, input) => {
  const r = spawnSync(path.join(env.VRAM_PREFLIGHT_CLUSTER_BIN, 'kubectl'), argv, { encoding: 'utf8', input, env: { PATH: process.env.PATH, HOME: tmpdir(), KUBECONFIG: env.KUBECONFIG }, maxBuffer: 256 << 20 });
  if (r.status !== 0) throw new Error(`kubectl ${argv.join(' ')}: ${r.stderr}`);
  return r.stdout;
};

const vllm = { name: 'model', image: 'vllm/vllm-openai:v0.10.1', args: ['--model', 'Qwen/Qwen3-8B', '--gpu-memory-utilization', '0.9'], resources: { limits: { 'nvidia.com/gpu': '1' } } };

/** A namespace holding `count` pods made by `make`, created once. */
function populate(namespace, count, make, batch) {
  const existing = spawnSync(path.join(env.VRAM_PREFLIGHT_CLUSTER_BIN, 'kubectl'), ['get', 'namespace', namespace], { env: { PATH: process.env.PATH, HOME: tmpdir(), KUBECONFIG: env.KUBECONFIG } }).status === 0;
  if (!existing) kubectl(['create', 'namespace', namespace]);
  const have = kubectl(['-n', namespace, 'get', 'pods', '-o', 'name', '--chunk-size=500']).split('\n').filter(Boolean).length;
  const t0 = Date.now();
  for (let i = have; i < count; i += batch) {
    const items = Array.from({ length: Math.min(batch, count - i) }, (_, k) => make(i + k));
    kubectl(['create', '-f', '-'], JSON.stringify({ apiVersion: 'v1', kind: 'List', items }));
  }
  if (have < count) process.stdout.write(`created ${count - have} pods in ${namespace} in ${((Date.now() - t0) / 1000).toFixed(1)} s\n`);
}

const pod = (namespace, name, containers) => ({ apiVersion: 'v1', kind: 'Pod', metadata: { name, namespace, labels: { app: 'scale' } }, spec: { containers } });
populate(`audit-scale-${pods}`, pods, (i) => pod(`audit-scale-${pods}`, `model-${i}`, [vllm, { name: 'metrics', image: 'busybox:1.36', command: ['sleep', 'infinity'] }]), 500);
const pad = 'x'.repeat(1_400_000);
populate(`audit-scale-big-${big}`, big, (i) => pod(`audit-scale-big-${big}`, `big-${i}`, [vllm, { name: 'pad', image: 'busybox:1.36', env: [{ name: 'PAD', value: pad }] }]), 4);

const work = mkdtempSync(path.join(tmpdir(), 'audit-scale-'));
/** Whether a build takes --timeout (0.4.0 does not, and has no deadline). */
const takesTimeout = new Map(bundles.map((b) => [b, spawnSync(process.execPath, [b, 'audit', '--help'], { encoding: 'utf8' }).stdout.includes('--timeout DURATION')]));
function audit(bundle, namespace, heap) {
  const out = path.join(work, 'rss');
  const runEnv = { PATH: process.env.PATH, HOME: work, KUBECONFIG: env.KUBECONFIG, ...(heap ? { NODE_OPTIONS: `--max-old-space-size=${heap}` } : {}) };
  const t0 = process.hrtime.bigint();
  const r = spawnSync('/usr/bin/time', ['-f', '%M', '-o', out, process.execPath, bundle, 'audit', '--namespace', namespace, '--registry-lookup=never', ...(takesTimeout.get(bundle) ? ['--timeout=0'] : []), '--output=json'], { encoding: 'utf8', env: runEnv, maxBuffer: 256 << 20 });
  const ms = Number(process.hrtime.bigint() - t0) / 1e6;
  const peak = Number(readFileSync(out, 'utf8').trim().split('\n').at(-1)) / 1024;
  let containers = '?';
  try {
    containers = JSON.parse(r.stdout).containers.length;
  } catch {
    // no report: the exit code and stderr say why
  }
  return { status: r.status, ms, peak, containers, error: r.status === 0 || r.status === 3 ? '' : r.stderr.split('\n').find((l) => l.trim()) ?? '' };
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const cases = [
  { what: `${pods} pods (each a vLLM container and a sidecar)`, namespace: `audit-scale-${pods}` },
  { what: `${big} pods of 1.4 MB, one page, heap cap 96 MiB (the CronJob's)`, namespace: `audit-scale-big-${big}`, heap: 96 },
  { what: `${big} pods of 1.4 MB, one page, no heap cap`, namespace: `audit-scale-big-${big}` },
];
for (const c of cases) {
  const results = new Map(bundles.map((b) => [b, []]));
  for (let i = 0; i < runs; i++) for (const b of bundles) results.get(b).push(audit(b, c.namespace, c.heap));
  process.stdout.write(`\n${c.what}:\n`);
  for (const [b, rs] of results) {
    const label = path.relative(root, b) || b;
    const failed = rs.find((r) => r.error);
    process.stdout.write(
      `  ${label}: exit ${[...new Set(rs.map((r) => r.status))].join('/')}, ${rs[0].containers} containers listed, peak RSS ${median(rs.map((r) => r.peak)).toFixed(0)} MiB (runs: ${rs.map((r) => r.peak.toFixed(0)).join(', ')}), time ${(median(rs.map((r) => r.ms)) / 1000).toFixed(2)} s (runs: ${rs.map((r) => (r.ms / 1000).toFixed(2)).join(', ')})${failed ? `; ${failed.error.slice(0, 160)}` : ''}\n`,
    );
  }
}
rmSync(work, { recursive: true, force: true });
if (args.includes('--clean')) kubectl(['delete', 'namespace', `audit-scale-${pods}`, `audit-scale-big-${big}`, '--wait=false']);
