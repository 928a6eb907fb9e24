#!/usr/bin/env node
// `npm run bench`: performance figures of the bundled CLI, in one run on one
// machine, as ratios against a baseline measured in the same run.
//
//   (a) start-up: the real vLLM render (fixtures/real/vllm.input.yaml) through
//       the bundle vs `node -e 0`                               goal <= 1.3x
//   (b) helm template of test/charts/inference-zoo alone vs with the
//       post-renderer, Helm 3 (by path) and Helm 4 (plugin)    goal <= 1.5x
//   (c) throughput: a generated stream of 10,000 documents (~50 MB, 1 % vLLM
//       workloads): time (goal < 3 s) and peak RSS (goal < 4x input), and
//       1,000 vs 10,000 documents for linear growth
//   (d) kubectl kustomize applying the equivalent one-container patch to the
//       same real render: time and changed lines vs ours
//
// Timing: processes are spawned from node and timed with hrtime, A and B runs
// interleaved so that a noisy neighbour slows both alike; medians reported.
// Peak RSS comes from process.resourceUsage().maxRSS in the child (a
// --require'd hook), so no /usr/bin/time is needed.
//
//   node scripts/bench.mjs [--quick] [--only a,b,c,d] [--json FILE]
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildBundle } from './build.mjs';
import { generate } from './bench/generate.mjs';
import { packagePlugin } from './package-plugin.mjs';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const argv = process.argv.slice(2);
const quick = argv.includes('--quick');
const onlyArg = argv.find((a) => a.startsWith('--only'));
const only = onlyArg ? (onlyArg.includes('=') ? onlyArg.split('=')[1] : argv[argv.indexOf(onlyArg) + 1]).split(',') : ['a', 'b', 'c', 'd'];
const jsonArg = argv.indexOf('--json');
const jsonOut = jsonArg !== -1 ? argv[jsonArg + 1] : undefined;
const results = { date: new Date().toISOString(), machine: machine(), node: process.version };

const work = mkdtempSync(path.join(os.tmpdir(), 'vram-preflight-bench-'));
process.on('exit', () => rmSync(work, { recursive: true, force: true }));

function machine() {
  const cpus = os.cpus();
  return `${cpus.length} CPU (${cpus[0]?.model?.trim() ?? 'unknown'}), ${(os.totalmem() / 2 ** 30).toFixed(0)} GiB, ${os.platform()} ${os.release()}`;
}

// ---------------------------------------------------------------------------
function timeOnce(cmd, args, { input, env } = {}) {
  const t0 = process.hrtime.bigint();
  const r = spawnSync(cmd, args, { input, env: env ?? process.env, maxBuffer: 1 << 30, stdio: ['pipe', 'pipe', 'pipe'] });
  const ms = Number(process.hrtime.bigint() - t0) / 1e6;
  if (r.error) throw r.error;
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')} exited ${r.status}: ${r.stderr.toString().slice(0, 2000)}`);
  return { ms, stdout: r.stdout, stderr: r.stderr };
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
const pct = (xs, p) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))];
const fmt = (ms) => (ms >= 1000 ? `${(ms / 1000).toFixed(2)} s` : `${ms.toFixed(1)} ms`);
const stats = (xs) => `median ${fmt(median(xs))} (p10 ${fmt(pct(xs, 10))}, p90 ${fmt(pct(xs, 90))}, n=${xs.length})`;

/** Interleaved runs of several commands; returns the times of each. */
function compare(cases, runs, warmup = 3) {
  const times = cases.map(() => []);
  for (let i = 0; i < warmup; i++) for (const c of cases) timeOnce(c.cmd, c.args, c);
  for (let i = 0; i < runs; i++) {
    for (const [k, c] of cases.entries()) times[k].push(timeOnce(c.cmd, c.args, c).ms);
  }
  return times;
}

function ratioLine(label, base, x, goal) {
  const r = median(x) / median(base);
  const verdict = goal === undefined ? '' : r <= goal ? `  (goal <= ${goal}x: met)` : `  (goal <= ${goal}x: NOT met)`;
  return `  ${label.padEnd(50)} ${r.toFixed(2)}x${verdict}`;
}

function section(title) {
  process.stdout.write(`\n== ${title}\n`);
}
const say = (s) => process.stdout.write(`${s}\n`);

// ---------------------------------------------------------------------------
const bundle = path.join(work, 'vram-preflight.cjs');
await buildBundle({ outfile: bundle, quiet: true });
say(`vram-preflight bench — ${results.date.slice(0, 10)} — ${results.machine} — node ${process.version}${quick ? ' — QUICK' : ''}`);

const realVllm = path.join(root, 'fixtures/real/vllm.input.yaml');
if (!existsSync(realVllm)) {
  say(`missing ${realVllm} (the real renders are copied there by the lead); stop.`);
  process.exit(1);
}
const vllmText = readFileSync(realVllm);

// (a) ------------------------------------------------------------------------
if (only.includes('a')) {
  section('(a) start-up on the real vLLM render (10 KB, 8 documents, 1 rewritten)');
  const runs = quick ? 15 : 40;
  const [base, ours, passthrough] = compare(
    [
      { cmd: process.execPath, args: ['-e', '0'], input: vllmText },
      { cmd: process.execPath, args: [bundle], input: vllmText },
      { cmd: process.execPath, args: [bundle], input: readFileSync(path.join(root, 'fixtures/real/llamacpp.input.yaml')) },
    ],
    runs,
  );
  say(`  node -e 0                                    ${stats(base)}`);
  say(`  vram-preflight < vllm.input.yaml             ${stats(ours)}`);
  say(`  vram-preflight < llamacpp.input.yaml         ${stats(passthrough)}`);
  say(ratioLine('vllm render / node -e 0', base, ours, 1.3));
  say(ratioLine('llamacpp render (pass-through) / node -e 0', base, passthrough));
  results.a = { nodeE0: median(base), vllm: median(ours), llamacpp: median(passthrough), ratio: median(ours) / median(base) };
}

// (b) ------------------------------------------------------------------------
if (only.includes('b')) {
  section('(b) helm template test/charts/inference-zoo, alone vs with the post-renderer');
  const helm3 = path.join(root, '.cache/helm/v3/helm');
  const helm4 = path.join(root, '.cache/helm/v4/helm');
  if (!existsSync(helm3) || !existsSync(helm4)) {
    spawnSync('bash', [path.join(root, 'scripts/fetch-helm.sh')], { stdio: 'inherit' });
  }
  const chart = path.join(root, 'test/charts/inference-zoo');
  const home = path.join(work, 'helm');
  const env = {
    ...Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('HELM_'))),
    HOME: home,
    HELM_DATA_HOME: path.join(home, 'data'),
    HELM_CONFIG_HOME: path.join(home, 'config'),
    HELM_CACHE_HOME: path.join(home, 'cache'),
    PATH: `${path.dirname(process.execPath)}${path.delimiter}${process.env.PATH}`,
  };
  mkdirSync(home, { recursive: true });
  // The floor for any post-renderer written for node: one that only copies stdin to stdout.
  const noop = path.join(work, 'noop-post-renderer.cjs');
  writeFileSync(noop, '#!/usr/bin/env node\nprocess.stdin.pipe(process.stdout);\n', { mode: 0o755 });
  const runs = quick ? 8 : 20;
  results.b = {};
  if (existsSync(helm3)) {
    const [alone, withPr, floor3] = compare(
      [
        { cmd: helm3, args: ['template', 'zoo', chart], env },
        { cmd: helm3, args: ['template', 'zoo', chart, '--post-renderer', bundle], env },
        { cmd: helm3, args: ['template', 'zoo', chart, '--post-renderer', noop], env },
      ],
      runs,
    );
    say(`  helm 3 template                              ${stats(alone)}`);
    say(`  helm 3 template --post-renderer <bundle>     ${stats(withPr)}`);
    say(`  helm 3 template --post-renderer <no-op node> ${stats(floor3)}`);
    say(ratioLine('helm 3: with / alone', alone, withPr, 1.5));
    say(ratioLine('helm 3: with a no-op node post-renderer / alone', alone, floor3));
    say(`  added by the post-renderer                   ${fmt(median(withPr) - median(alone))} (a no-op node one: ${fmt(median(floor3) - median(alone))})`);
    results.b.helm3 = { alone: median(alone), with: median(withPr), noop: median(floor3), ratio: median(withPr) / median(alone) };
  } else say('  helm 3 missing (npm run fetch-helm); skipped');
  if (existsSync(helm4)) {
    const { dir } = await packagePlugin({ distDir: path.join(work, 'dist'), quiet: true });
    timeOnce(helm4, ['plugin', 'install', dir], { env });
    const [alone, withPr] = compare(
      [
        { cmd: helm4, args: ['template', 'zoo', chart], env },
        { cmd: helm4, args: ['template', 'zoo', chart, '--post-renderer', 'vram-preflight'], env },
      ],
      runs,
    );
    say(`  helm 4 template                              ${stats(alone)}`);
    say(`  helm 4 template --post-renderer (plugin)     ${stats(withPr)}`);
    say(ratioLine('helm 4: with / alone', alone, withPr, 1.5));
    say(`  added by the post-renderer                   ${fmt(median(withPr) - median(alone))}`);
    results.b.helm4 = { alone: median(alone), with: median(withPr), ratio: median(withPr) / median(alone) };
  } else say('  helm 4 missing (npm run fetch-helm); skipped');
}

// (c) ------------------------------------------------------------------------
if (only.includes('c')) {
  section('(c) throughput: generated streams, 1 % vLLM workloads');
  const hook = path.join(work, 'maxrss.cjs');
  writeFileSync(
    hook,
    `process.on('exit', () => { require('fs').writeFileSync(process.env.BENCH_RSS_FILE, String(process.resourceUsage().maxRSS)); });\n`,
  );
  const rssFile = path.join(work, 'rss');
  const sizes = [1000, 5000, 10000];
  timeOnce(process.execPath, ['--require', hook, '-e', '0'], { env: { ...process.env, BENCH_RSS_FILE: rssFile } });
  const nodeRss = Number(readFileSync(rssFile, 'utf8')) * 1024;
  const runs = quick ? 1 : 3;
  const rows = [];
  for (const n of sizes) {
    const text = Buffer.from(generate(n));
    const times = [];
    const rss = [];
    let out;
    // (RSS - the RSS of node itself) is what the data costs.
    for (let i = 0; i < runs; i++) {
      const r = timeOnce(process.execPath, ['--require', hook, bundle], { input: text, env: { ...process.env, BENCH_RSS_FILE: rssFile } });
      times.push(r.ms);
      rss.push(Number(readFileSync(rssFile, 'utf8')) * 1024);
      out = r.stdout;
    }
    const wrapped = (out.toString().match(/^ *# vram-preflight \d/gm) ?? []).length;
    const row = { docs: n, bytes: text.length, ms: median(times), maxRss: Math.max(...rss), wrapped };
    rows.push(row);
    say(
      `  ${String(n).padStart(6)} docs ${(text.length / 1e6).toFixed(1).padStart(5)} MB  ${fmt(row.ms).padStart(9)}  ` +
        `peak RSS ${(row.maxRss / 1e6).toFixed(0)} MB = ${(row.maxRss / text.length).toFixed(2)}x input, ${((row.maxRss - nodeRss) / text.length).toFixed(2)}x above node's own ${(nodeRss / 1e6).toFixed(0)} MB  (${wrapped} containers wrapped)`,
    );
  }
  const [small, mid, big] = rows;
  // Linear growth means the same cost per extra document in both steps.
  const step1 = (mid.ms - small.ms) / (mid.docs - small.docs);
  const step2 = (big.ms - mid.ms) / (big.docs - mid.docs);
  say(`  per 1,000 extra documents: ${small.docs}->${mid.docs} ${fmt(step1 * 1000)}, ${mid.docs}->${big.docs} ${fmt(step2 * 1000)}` +
    `  (${(step2 / step1).toFixed(2)}x: ${step2 / step1 <= 1.3 ? 'linear' : 'SUPERLINEAR'})`);
  say(ratioLine(`time ${big.docs} / ${small.docs} docs (10x input)`, [small.ms], [big.ms]));
  say(`  ${big.docs} docs in < 3 s: ${big.ms < 3000 ? 'met' : 'NOT met'}; peak RSS < 4x input: ${big.maxRss < 4 * big.bytes ? 'met' : 'NOT met'}`);
  results.c = { rows, perThousand: [step1 * 1000, step2 * 1000], nodeRss };
}

// (d) ------------------------------------------------------------------------
if (only.includes('d')) {
  section('(d) kubectl kustomize with the equivalent one-container patch, on the real vLLM render');
  const kubectl = ['/usr/bin/kubectl', '/usr/local/bin/kubectl'].find((p) => existsSync(p)) ?? (spawnSync('sh', ['-c', 'command -v kubectl']).stdout?.toString().trim() || undefined);
  if (!kubectl) {
    say('  kubectl not found: skipped (install kubectl to compare with kustomize)');
  } else {
    const ours = timeOnce(process.execPath, [bundle], { input: vllmText }).stdout.toString();
    // The patch sets exactly what we set: the model container's command and args, taken from our output.
    const { parseAllDocuments } = await import('yaml');
    const dep = parseAllDocuments(ours).map((d) => d.toJS()).find((o) => o?.kind === 'Deployment');
    const model = dep.spec.template.spec.containers.find((c) => c.name === 'model');
    const kdir = path.join(work, 'kustomize');
    mkdirSync(kdir, { recursive: true });
    writeFileSync(path.join(kdir, 'render.yaml'), vllmText);
    writeFileSync(
      path.join(kdir, 'patch.yaml'),
      JSON.stringify({
        apiVersion: 'apps/v1',
        kind: 'Deployment',
        metadata: { name: dep.metadata.name, namespace: dep.metadata.namespace },
        spec: { template: { spec: { containers: [{ name: 'model', command: model.command, args: model.args }] } } },
      }),
    );
    writeFileSync(path.join(kdir, 'kustomization.yaml'), 'apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - render.yaml\npatches:\n  - path: patch.yaml\n');
    const kust = timeOnce(kubectl, ['kustomize', kdir]).stdout.toString();
    const runs = quick ? 8 : 20;
    const [tk, to] = compare(
      [
        { cmd: kubectl, args: ['kustomize', kdir] },
        { cmd: process.execPath, args: [bundle], input: vllmText },
      ],
      runs,
    );
    const changed = (a, b) => {
      writeFileSync(path.join(work, 'a.yaml'), a);
      writeFileSync(path.join(work, 'b.yaml'), b);
      const d = spawnSync('diff', [path.join(work, 'a.yaml'), path.join(work, 'b.yaml')]).stdout.toString();
      return d.split('\n').filter((l) => l.startsWith('<') || l.startsWith('>')).length;
    };
    const oursChanged = changed(vllmText.toString(), ours);
    const kustChanged = changed(vllmText.toString(), kust);
    const kv = spawnSync(kubectl, ['version', '--client', '-o', 'json']).stdout?.toString() ?? '';
    const kustomizeVersion = /"kustomizeVersion":\s*"([^"]+)"/.exec(kv)?.[1] ?? '?';
    say(`  kubectl kustomize (kustomize ${kustomizeVersion})        ${stats(tk)}`);
    say(`  vram-preflight                               ${stats(to)}`);
    say(ratioLine('kustomize / vram-preflight time', to, tk));
    say(`  changed lines (diff | grep -c '^[<>]'): vram-preflight ${oursChanged}, kustomize ${kustChanged} (${(kustChanged / oursChanged).toFixed(1)}x)`);
    // Comment lines of the input (Helm's `# Source:` lines and the chart's own comments) found again in the output.
    const inputComments = vllmText.toString().split('\n').map((l) => l.trim()).filter((l) => l.startsWith('#'));
    const kept = (t) => {
      const lines = new Set(t.split('\n').map((l) => l.trim()));
      return inputComments.filter((c) => lines.has(c)).length;
    };
    say(`  input comment lines kept (# Source: and chart comments): vram-preflight ${kept(ours)}/${inputComments.length}, kustomize ${kept(kust)}/${inputComments.length}`);
    results.d = { kustomize: median(tk), ours: median(to), oursChanged, kustChanged, kustomizeVersion, commentsKept: { ours: kept(ours), kustomize: kept(kust), of: inputComments.length } };
  }
}

if (jsonOut) writeFileSync(jsonOut, `${JSON.stringify(results, null, 2)}\n`);
