/**
 * `vram-preflight admit`: the webhook's answer without a cluster. In process
 * (runAdmit) for the answers and exit codes; through the built bundle for
 * the command's routing (src/cli/bin.ts requires the webhook's bundle); and
 * docs/webhook.md's "Try it without a cluster" recipe run as written: the
 * webhook on loopback, called with curl, the patch decoded with jq.
 */
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { ADMIT_HELP, runAdmit } from '../../src/webhook/admit-command.js';
import { BODY_LIMIT } from '../../src/webhook/body.js';
import { DEFAULT_OPTIONS } from '../../src/core/options.js';
import { transform } from '../../src/core/transform.js';
import { runCli } from '../core/run-cli.js';
import { freePort } from '../registry/harness.js';
import { applyWithJsonpatch } from '../support/doors.js';
import * as h from './harness.js';

h.requireTools();

const ROOT = path.resolve(import.meta.dirname, '../..');
const EXAMPLES = path.join(ROOT, 'docs/examples');
const dir = h.tempDir('admit');
let bundle: string;

beforeAll(() => {
  bundle = path.join(dir, 'dist/vram-preflight.cjs');
  const built = spawnSync(process.execPath, [path.join(ROOT, 'scripts/build.mjs'), '--outfile', bundle], { encoding: 'utf8' });
  if (built.status !== 0) throw new Error(built.stderr);
});
afterAll(() => h.removeDir(dir));

async function admitBytes(argv: string[], stdin: string | Uint8Array, env: Record<string, string> = {}) {
  let stdout = '';
  let stderr = '';
  const code = await runAdmit(argv, {
    stdin: async () => stdin,
    stdout: { write: (t: string) => (stdout += t) },
    stderr: { write: (t: string) => (stderr += t) },
    env,
    readFile: (p) => readFileSync(p, 'utf8'),
  });
  return { code, stdout, stderr };
}

async function admit(argv: string[], stdin: string, env: Record<string, string> = {}) {
  let stdout = '';
  let stderr = '';
  const code = await runAdmit(argv, {
    stdin: async () => stdin,
    stdout: { write: (t: string) => (stdout += t) },
    stderr: { write: (t: string) => (stderr += t) },
    env,
    readFile: (p) => readFileSync(p, 'utf8'),
  });
  return { code, stdout, stderr };
}

type Obj = Record<string, any>;
const podYaml = readFileSync(path.join(EXAMPLES, 'pod.yaml'), 'utf8');
const reviewJson = readFileSync(path.join(EXAMPLES, 'admission-review.json'), 'utf8');

describe('vram-preflight admit', () => {
  it('a Pod (YAML): the pod as the webhook lets it in, in YAML, exit 0; a line on stderr says what was wrapped', async () => {
    const r = await admit([], podYaml);
    expect(r.stderr).toBe('vram-preflight: Pod/qwen3-8b: wrapped: vllm\n');
    expect(r.code).toBe(0);
    const pod = parseYaml(r.stdout) as Obj;
    expect(pod.metadata.annotations).toEqual({ 'vram-preflight.io/wrapped': 'vllm' });
    const container = pod.spec.containers[0];
    expect(container.command).toEqual(['/bin/sh', '-ec']);
    expect(container.args.slice(1)).toEqual(['--', 'python3', '-m', 'vllm.entrypoints.openai.api_server', '--model', 'Qwen/Qwen3-8B', '--gpu-memory-utilization', '0.9']);
    // The same answer as the webhook's patch applied by an independent RFC 6902 implementation.
    const review = JSON.parse((await admit([], reviewJson)).stdout) as { response: { patch: string } };
    const [applied] = applyWithJsonpatch([{ pod: (JSON.parse(reviewJson) as Obj).request.object, patch: JSON.parse(Buffer.from(review.response.patch, 'base64').toString('utf8')) }]);
    expect((applied as Obj).spec).toEqual({ ...pod.spec, containers: [{ ...container, resources: { limits: { 'nvidia.com/gpu': '1' } } }] });
  });

  it('an AdmissionReview (JSON): the AdmissionReview the webhook answers, in JSON, exit 0', async () => {
    const r = await admit([], reviewJson);
    expect(r.code).toBe(0);
    const answer = JSON.parse(r.stdout) as Obj;
    expect(answer).toMatchObject({ apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', response: { uid: '0d3a9c6e-7f1b-4a8e-9c2d-5b6e7f8a9b0c', allowed: true, patchType: 'JSONPatch' } });
    const patch = JSON.parse(Buffer.from(answer.response.patch, 'base64').toString('utf8')) as { path: string }[];
    expect(patch.map((op) => op.path)).toEqual(['/spec/containers/0/command', '/spec/containers/0/args', '/metadata/annotations']);
  });

  it('a workload (a Deployment): its pod template wrapped, exit 0', async () => {
    const pod = parseYaml(podYaml) as Obj;
    const deployment = { apiVersion: 'apps/v1', kind: 'Deployment', metadata: { name: 'qwen' }, spec: { selector: { matchLabels: { app: 'q' } }, template: { metadata: { labels: { app: 'q' } }, spec: pod.spec } } };
    const r = await admit([], JSON.stringify(deployment));
    expect(r.code).toBe(0);
    const out = JSON.parse(r.stdout) as Obj;
    expect(out.spec.template.spec.containers[0].command).toEqual(['/bin/sh', '-ec']);
    expect(out.metadata).toEqual(deployment.metadata);
  });

  it('a container that would not be wrapped: exit 1, nothing on stdout, the reason and the config.images entry on stderr', async () => {
    const r = await admit(['--registry-lookup=never'], podYaml.replace('v0.10.1', 'v0.12.0'));
    expect(r.code).toBe(1);
    expect(r.stdout).toBe('');
    expect(r.stderr).toMatch(/^vram-preflight: vllm: the container gives no command/);
    expect(r.stderr).toContain('vram-preflight:   fix: add this entry to config.images in the webhook chart\'s values');
    expect(r.stderr).toContain('vram-preflight:         - repository: vllm/vllm-openai\nvram-preflight:           tag: "v0.12.0"');
    // The same for the review of that pod: the webhook would answer allowed with warnings; admit fails like the CLI.
    const review = JSON.parse(reviewJson) as Obj;
    review.request.object.spec.containers[0].image = 'vllm/vllm-openai:v0.12.0';
    const viaReview = await admit(['--registry-lookup=never'], JSON.stringify(review));
    expect(viaReview.code).toBe(1);
    expect(viaReview.stdout).toBe('');
  });

  it('options as the webhook takes them: a config file (the chart\'s config) places the image; a render-only flag is refused (exit 2)', async () => {
    const config = path.join(dir, 'config.yaml');
    writeFileSync(config, 'images:\n  - repository: vllm/vllm-openai\n    tag: "v0.12.0"\n    entrypoint: ["vllm", "serve"]\n');
    const placed = await admit([`--config=${config}`, '--registry-lookup=never'], podYaml.replace('v0.10.1', 'v0.12.0'));
    expect(placed.code, placed.stderr).toBe(0);
    expect((parseYaml(placed.stdout) as Obj).spec.containers[0].args.slice(2, 4)).toEqual(['vllm', 'serve']);
    const renderOnly = await admit(['--report-file=r.json'], podYaml);
    expect(renderOnly.code).toBe(2);
    expect(renderOnly.stderr).toContain('option --report-file belongs to the post-renderer (vram-preflight --help), not to admit');
    const renderOnlyEnv = await admit([], podYaml, { VRAM_PREFLIGHT_DIAGNOSTICS_FILE: '/tmp/d.log' });
    expect(renderOnlyEnv.code).toBe(2);
    expect(renderOnlyEnv.stderr).toContain('VRAM_PREFLIGHT_DIAGNOSTICS_FILE is an option of the post-renderer, not of admit');
    const typo = await admit(['--timout-seconds=5'], podYaml);
    expect(typo.code).toBe(2);
    expect(typo.stderr).toContain('did you mean --timeout-seconds? (all options: vram-preflight admit --help)');
  });

  it('input that holds no object: exit 1 with what to give', async () => {
    for (const [input, message] of [
      ['', 'nothing on stdin'],
      ['{"kind": ', 'stdin is not JSON'],
      ['{"a": 1}', 'stdin is not a Kubernetes object (no kind)'],
      ['- a\n- b\n', 'stdin holds no Kubernetes object'],
      ['# only a comment\n---\n', 'stdin holds no Kubernetes object'],
    ] as const) {
      const r = await admit([], input);
      expect(r.code, message).toBe(1);
      expect(r.stdout).toBe('');
      expect(r.stderr).toContain(message);
    }
  });

  it('through the executable: `vram-preflight admit` runs the webhook bundle; --help and exit codes', () => {
    const run = (args: string[], input: string) => spawnSync(process.execPath, [bundle, ...args], { input, encoding: 'utf8', env: { PATH: process.env.PATH, HOME: dir } });
    const ok = run(['admit'], reviewJson);
    expect(ok.stderr).toBe('vram-preflight: AdmissionReview (Pod/qwen3-8b): wrapped: vllm\n');
    expect(ok.status).toBe(0);
    expect(JSON.parse(ok.stdout).response.uid).toBe('0d3a9c6e-7f1b-4a8e-9c2d-5b6e7f8a9b0c');
    const help = run(['admit', '--help'], '');
    expect(help.status).toBe(0);
    expect(help.stdout).toContain('vram-preflight admit [options] < pod.yaml');
    expect(run(['--help'], '').stdout).toContain('vram-preflight admit [options] < pod.yaml');
    expect(run(['admit', '--bogus'], '').status).toBe(2);
  });
});

/** PyYAML (YAML 1.1, merge keys) stands in for go-yaml, which Helm and kubectl read manifests with: each document's value, as JSON. */
function readAsGoYaml(text: string): Obj[] {
  const r = spawnSync('/usr/bin/python3', ['-c', 'import json,sys,yaml\nprint(json.dumps(list(yaml.safe_load_all(sys.stdin.buffer.read()))))'], { input: text, encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`PyYAML cannot read it: ${r.stderr}`);
  return (JSON.parse(r.stdout) as (Obj | null)[]).filter((d): d is Obj => d !== null);
}

/** The argv a wrapped container runs after its wait (what follows `--`), or its own start when it is not wrapped. */
function runs(container: Obj): string[] {
  const argv = [...(container.command ?? []), ...(container.args ?? [])] as string[];
  return argv[0] === '/bin/sh' && argv.includes('--') ? argv.slice(argv.indexOf('--') + 1) : argv;
}

const wrappedIn = (container: Obj): boolean => container.command?.[0] === '/bin/sh' && String(container.args?.[0]).startsWith('# vram-preflight ');

describe('admit reads as the post-renderer reads: one reader for YAML at every door', () => {
  const pod = (containers: string) => `apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n${containers}`;
  const gpu = '    resources:\n      limits:\n        nvidia.com/gpu: 1\n';

  it('merge keys (<<): a merged argv is run after the wait, a container merged from a vLLM sibling is wrapped too', async () => {
    const input = pod(
      `  - &base\n    name: prefill\n    image: vllm/vllm-openai:v0.10.1\n    command: [vllm, serve, m]\n    args: [--port, "8000"]\n${gpu}` +
        `  - <<: *base\n    name: decode\n    args: [--port, "8001"]\n` +
        `  - name: merged-args\n    image: vllm/vllm-openai:v0.10.1\n    command: [vllm, serve, m]\n    <<: {args: [--port, "8002"]}\n${gpu}`,
    );
    const r = await admit(['--registry-lookup=never'], input);
    expect(r.code, r.stderr).toBe(0);
    const want = readAsGoYaml(input)[0]!.spec.containers as Obj[];
    const got = readAsGoYaml(r.stdout)[0]!.spec.containers as Obj[];
    expect(got.map((c) => c.name)).toEqual(['prefill', 'decode', 'merged-args']);
    got.forEach((c, i) => {
      expect(wrappedIn(c), c.name).toBe(true);
      expect(runs(c), `${c.name}: the argv the input runs, read as go-yaml reads both`).toEqual(runs(want[i]!));
    });
    expect(r.stderr).toBe('vram-preflight: Pod/p: wrapped: prefill, decode, merged-args\n');
  });

  it("items go-yaml does not read as strings (yes, on, 1_000, ?x, a tag) are refused as the post-renderer refuses them; a duplicate key's last value wins", async () => {
    for (const item of ['yes', 'on', '1_000', '?x', '!foo m', '0x10', '~']) {
      const input = pod(`  - name: m\n    image: vllm/vllm-openai:v0.10.1\n    command: [vllm, serve, m, --x, ${item}]\n${gpu}`);
      const post = transform(input, { ...DEFAULT_OPTIONS, registryLookup: 'never' });
      expect(post.errors.map((e) => e.code), item).toEqual(['BAD_CONTAINER']);
      const r = await admit(['--registry-lookup=never'], input);
      expect(r.code, item).toBe(1);
      expect(r.stdout).toBe('');
      expect(r.stderr, item).toContain(`vram-preflight: m: ${post.errors[0]!.message}`);
    }
    const twice = pod(`  - name: m\n    image: vllm/vllm-openai:v0.10.1\n    command: [vllm, serve, a]\n    command: [vllm, serve, b]\n${gpu}`);
    const r = await admit(['--registry-lookup=never'], twice);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toContain('key "command" appears more than once');
    expect(runs(readAsGoYaml(r.stdout)[0]!.spec.containers[0])).toEqual(['vllm', 'serve', 'b']);
  });

  it('NEL, LS and PS in an argv come out escaped: a YAML 1.1 reader reads the argv the input holds, and a plain "yes" stays a string', async () => {
    const input = pod(`  - name: m\n    image: vllm/vllm-openai:v0.10.1\n    command: [vllm, serve, m, "qwen\\Nchat", "a\\Lb", "\\P", "yes", "1_000", "0.9"]\n${gpu}`);
    for (const output of [[], ['--output', 'yaml']]) {
      const r = await admit(['--registry-lookup=never', ...output], input);
      expect(r.code, r.stderr).toBe(0);
      expect(r.stdout).not.toMatch(/[\u0085\u2028\u2029]/);
      expect(runs(readAsGoYaml(r.stdout)[0]!.spec.containers[0])).toEqual(['vllm', 'serve', 'm', 'qwen\u0085chat', 'a\u2028b', '\u2029', 'yes', '1_000', '0.9']);
      expect(runs(readAsGoYaml(input)[0]!.spec.containers[0])).toEqual(runs(readAsGoYaml(r.stdout)[0]!.spec.containers[0]));
    }
  });

  it('bytes that are not UTF-8: refused, as the webhook answers 400 and the post-renderer says BAD_ENCODING', async () => {
    for (const bytes of [Buffer.from([0xff]), Buffer.from([0xc0, 0xaf]), Buffer.from([0xed, 0xa0, 0x80])]) {
      const input = Buffer.concat([Buffer.from(reviewJson.replace('Qwen/Qwen3-8B', 'Qwen/Qw')), bytes]);
      const r = await admitBytes([], Buffer.concat([Buffer.from(reviewJson.slice(0, reviewJson.indexOf('Qwen/Qwen3-8B') + 6)), bytes, Buffer.from(reviewJson.slice(reviewJson.indexOf('Qwen/Qwen3-8B') + 6))]));
      expect(input.length).toBeGreaterThan(0);
      expect(r.code).toBe(1);
      expect(r.stdout).toBe('');
      expect(r.stderr).toMatch(/^vram-preflight: error BAD_ENCODING: the input is not UTF-8\n/);
    }
  });

  it('nesting and alias bombs: the post-renderer\'s refusal (NESTING_TOO_DEEP, the alias limit), or the webhook\'s answer for a review; never an internal error', async () => {
    const nest = (n: number) => '['.repeat(n) + ']'.repeat(n);
    const container = (extra: string) => `{"name":"m","image":"vllm/vllm-openai:v0.10.1","command":["vllm","serve","m"],"resources":{"limits":{"nvidia.com/gpu":1}}${extra}}`;
    const podJson = (extra: string) => `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"containers":[${container(extra)}]}}`;
    const deep = await admit([], podJson(`,"env":${nest(5000)}`));
    expect(deep.code).toBe(1);
    expect(deep.stderr).toContain('error NESTING_TOO_DEEP: the object nests 5005 levels deep; admit writes objects up to 512 levels');
    // The review of that pod: the webhook's reader and answer (it writes only a patch).
    const review = `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"","version":"v1","kind":"Pod"},"operation":"CREATE","namespace":"d","object":${podJson(`,"env":${nest(5000)}`)}}}`;
    const viaReview = await admit([], review);
    expect(viaReview.code, viaReview.stderr).toBe(0);
    expect(viaReview.stderr).toBe('vram-preflight: AdmissionReview (Pod/p): wrapped: m\n');
    // 200,000 levels, no GPU: nothing to wrap, the pod as it came.
    const unwrapped = podJson(`,"x":${nest(200_000)}`).replace(',"resources":{"limits":{"nvidia.com/gpu":1}}', '');
    const plain = await admit([], unwrapped);
    expect(plain.code, plain.stderr).toBe(0);
    expect(plain.stdout).toBe(unwrapped);
    const yamlDeep = await admit([], `apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: m\nspec:\n  template:\n    spec:\n      containers:\n      - name: m\n        image: vllm/vllm-openai:v0.10.1\n        env: ${nest(1000)}\n`);
    expect(yamlDeep.code).toBe(1);
    expect(yamlDeep.stderr).toContain('error NESTING_TOO_DEEP: Deployment/m (document 1, line 1): the document nests');
    const bomb = ['a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]', ...Array.from({ length: 9 }, (_, i) => `a${i + 1}: &a${i + 1} [${Array(10).fill(`*a${i}`).join(', ')}]`)].join('\n');
    const bombed = await admit([], `apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n${bomb}\nspec:\n  containers:\n  - name: c\n    image: vllm/vllm-openai:v0.10.1\n    args: *a9\n`);
    expect(bombed.code).toBe(1);
    expect(bombed.stderr).toContain('error YAML_SYNTAX');
    expect(bombed.stderr).toContain('Excessive alias count');
    // Any other object in JSON is read as the post-renderer reads a document: only where a mention could decide, within 512 levels.
    const template = (inner: string) => `{"apiVersion":"template.openshift.io/v1","kind":"Template","metadata":{"name":"t"},"objects":[{"apiVersion":"serving.kserve.io/v1alpha1","kind":"ServingRuntime","metadata":{"name":"vllm"}${inner},"x":${nest(200_000)}}]}`;
    const deciding = await admit([], template(',"spec":{"containers":[{"name":"c","image":"vllm/vllm-openai:v0.10.1"}]}'));
    expect(deciding.code).toBe(1);
    expect(deciding.stderr).toContain('error NESTING_TOO_DEEP: Template/t (document 1, line 1): the document nests 200004 levels deep');
    const named = await admit([], template(''));
    expect(named.code, named.stderr).toBe(0);
    expect(named.stderr).toBe('vram-preflight: Template/t: nothing to wrap: no container of it can start vLLM (passed through unread, as the post-renderer passes it)\n');
    for (const r of [deep, plain, yamlDeep, bombed, deciding, named]) expect(r.stderr).not.toMatch(/INTERNAL|Maximum call stack/);
  }, 60_000);

  it('stdin past the webhook\'s body limit: refused, with what reads any size', async () => {
    const r = await admit([], 'x'.repeat(BODY_LIMIT + 1));
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(`stdin holds more than ${BODY_LIMIT} bytes, the most the webhook reads of one admission request`);
    expect(r.stderr).toContain('vram-preflight explain < rendered.yaml reads any size');
  });
});

describe('admit for an operator: a stream, a line per object, --output', () => {
  const deployment = `apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: qwen\nspec:\n  template:\n    spec:\n      containers:\n        - name: vllm\n          image: vllm/vllm-openai:v0.10.1\n          args: [--model, Qwen/Qwen3-8B, --gpu-memory-utilization, "0.9"]\n          resources:\n            limits:\n              nvidia.com/gpu: 1\n        - name: proxy\n          image: envoyproxy/envoy:v1.31.0\n`;
  const service = `apiVersion: v1\nkind: Service\nmetadata:\n  name: qwen\nspec:\n  ports:\n    - port: 8000\n`;
  const stream = `---\n# Source: chart/templates/service.yaml\n${service}---\n# Source: chart/templates/deployment.yaml\n${deployment}---\n${podYaml}`;

  it('helm template … | admit: every object answered in order (the workload as the post-renderer writes it, the pod as the webhook lets it in); a line each', async () => {
    const r = await admit(['--registry-lookup=never'], stream);
    expect(r.code, r.stderr).toBe(0);
    const post = transform(stream, { ...DEFAULT_OPTIONS, registryLookup: 'never' });
    const docs = readAsGoYaml(r.stdout);
    expect(docs.map((d) => `${d.kind}/${d.metadata.name}`)).toEqual(['Service/qwen', 'Deployment/qwen', 'Pod/qwen3-8b']);
    // The Service and the Deployment: the post-renderer's output, byte for byte; the pod: the webhook's (annotated).
    expect(r.stdout.startsWith(post.pieces[0]! + post.pieces[1]!)).toBe(true);
    expect(docs[2]!.metadata.annotations).toEqual({ 'vram-preflight.io/wrapped': 'vllm' });
    expect(r.stderr.split('\n')).toEqual([
      'vram-preflight: Service/qwen: nothing to wrap: no container of it can start vLLM (passed through unread, as the post-renderer passes it)',
      'vram-preflight: Deployment/qwen: wrapped: vllm; not a target: proxy (not vLLM (neither its image nor its start names vLLM), and no NVIDIA GPU)',
      'vram-preflight: Pod/qwen3-8b: wrapped: vllm',
      '',
    ]);
  });

  it('--output json: YAML in, JSON out (several objects: a List, as kubectl prints them); --output yaml: JSON in, YAML out', async () => {
    const one = await admit(['--output', 'json'], podYaml);
    expect(one.code, one.stderr).toBe(0);
    expect((await admit(['-o', 'json'], podYaml)).stdout, '-o, as kubectl').toBe(one.stdout);
    expect(JSON.parse(one.stdout)).toEqual(parseYaml((await admit([], podYaml)).stdout));
    const several = await admit(['--output=json', '--registry-lookup=never'], stream);
    const list = JSON.parse(several.stdout) as Obj;
    expect(list).toMatchObject({ apiVersion: 'v1', kind: 'List' });
    expect(list.items.map((d: Obj) => d.kind)).toEqual(['Service', 'Deployment', 'Pod']);
    expect(list.items).toEqual(readAsGoYaml((await admit(['--registry-lookup=never'], stream)).stdout));
    const asYaml = await admit(['--output', 'yaml'], reviewJson);
    expect(asYaml.code).toBe(0);
    expect(readAsGoYaml(asYaml.stdout)[0]).toEqual(JSON.parse((await admit([], reviewJson)).stdout));
    const bad = await admit(['--output', 'text'], podYaml);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('error USAGE: --output is "text"\n  fix: use --output json or --output yaml');
  });

  it('--help: admit lists --output json|yaml; the post-renderer\'s help no longer says admit takes text|json', async () => {
    expect(ADMIT_HELP).toMatch(/-o, --output json\|yaml\s+the answer's format/);
    expect(ADMIT_HELP).toContain('helm template NAME CHART | vram-preflight admit');
    const main = (await runCli(['--help'], '')).stdout;
    expect(main.split('\n').find((l) => l.includes('--output text|json'))).not.toContain("admit's format");
  });

  it('a failed registry lookup says why, here, where there is no webhook log to read', async () => {
    const port = await freePort(); // nothing listens on it
    const input = podYaml.replace('vllm/vllm-openai:v0.10.1', `127.0.0.1:${port}/vllm/vllm-openai:v0.12.0`);
    const r = await admit([`--registry-allow=127.0.0.1:${port}`, '--registry-lookup=missing'], input);
    expect(r.code).toBe(1);
    expect(r.stderr).not.toContain("the webhook's log says why");
    expect(r.stderr).toMatch(new RegExp(`^vram-preflight: registry lookup of "127\\.0\\.0\\.1:${port}/vllm/vllm-openai:v0\\.12\\.0" failed: .*ECONNREFUSED`, 'm'));
    expect(r.stderr).toContain('the lookup failed (why: the "registry lookup" line above)');
  });

  it("DRA claims on stdin with the pod are read as the webhook reads them from the cluster; without them, the pod is not wrapped and says which claim", async () => {
    const dir = path.join(ROOT, 'fixtures/pods');
    const claimed = JSON.parse(readFileSync(path.join(dir, 'dra-vllm-resourceclaimtemplate.json'), 'utf8')) as Obj;
    const claims = JSON.parse(readFileSync(path.join(dir, 'dra-vllm-resourceclaimtemplate.claims.json'), 'utf8')) as Obj[];
    const withClaims = await admit(['--registry-lookup=never'], [...claims, claimed].map((d) => JSON.stringify(d)).join('\n---\n'));
    expect(withClaims.code, withClaims.stderr).toBe(0);
    expect(withClaims.stderr).toContain(': wrapped: vllm');
    const alone = await admit(['--registry-lookup=never'], JSON.stringify(claimed));
    expect(alone.code).toBe(1);
    expect(alone.stderr).toContain('vram-preflight: vllm: DRA ResourceClaimTemplate single-nvidia-gpu: not on stdin (admit reads no cluster: give the ResourceClaimTemplate with the pod');
  });

  it("an operator's resource that names a vLLM image but has no containers (LMDeployment): named, its pods the webhook's to wrap", async () => {
    const lmd = 'apiVersion: llm.geeper.io/v1alpha1\nkind: LMDeployment\nmetadata:\n  name: vllm-gpu\nspec:\n  vllm:\n    enabled: true\n    image: vllm/vllm-openai:latest\n    models: ["meta-llama/Llama-2-13b-chat-hf"]\n    resources:\n      limits:\n        nvidia.com/gpu: "1"\n';
    const r = await admit([], lmd);
    expect(r.code).toBe(0);
    expect(r.stdout).toBe(lmd);
    expect(r.stderr).toContain('vram-preflight: LMDeployment/vllm-gpu: cannot be wrapped here: its kind is not one vram-preflight knows and it has no containers of its own; it names the vLLM image vllm/vllm-openai:latest, so its operator creates the pods, which the webhook wraps when they are created');
    const explained = await runCli(['explain', '--output', 'json'], lmd);
    const report = JSON.parse(explained.stdout) as Obj;
    expect(report.containers).toEqual([expect.objectContaining({ workload: 'LMDeployment/vllm-gpu', container: '-', action: 'cannot-wrap', image: 'vllm/vllm-openai:latest', template: '(object)' })]);
    // A values file that names the image is no resource of an operator: nothing said.
    expect(JSON.parse((await runCli(['explain', '--output', 'json'], 'vllm:\n  image: vllm/vllm-openai:latest\n')).stdout).containers).toEqual([]);
  });
});

describe("docs/webhook.md: 'Try it without a cluster', run as written", () => {
  const doc = readFileSync(path.join(ROOT, 'docs/webhook.md'), 'utf8');
  const section = doc.slice(doc.indexOf('## Try it without a cluster'), doc.indexOf('## How the post-renderer and the webhook work together'));
  const blocks = [...section.matchAll(/```sh\n([\s\S]*?)```/g)].map((m) => m[1]!);

  it('has the two recipes, and the sample files they name exist', () => {
    expect(blocks).toHaveLength(2);
    for (const file of section.matchAll(/docs\/examples\/[\w.-]+/g)) expect(() => readFileSync(path.join(ROOT, file[0]))).not.toThrow();
  });

  it('the webhook on loopback answers curl with the sample review: the patch paths, the metric, a log line', async () => {
    // `vram-preflight` is the bundle built here; the port a free one (8443 may be taken on a shared machine).
    const work = path.join(dir, 'recipe');
    mkdirSync(path.join(work, 'bin'), { recursive: true });
    writeFileSync(path.join(work, 'bin/vram-preflight'), `#!/bin/sh\nexec '${process.execPath}' '${bundle}' "$@"\n`);
    chmodSync(path.join(work, 'bin/vram-preflight'), 0o755);
    symlinkSync(path.join(ROOT, 'docs'), path.join(work, 'docs'));
    const port = String(await freePort());
    const first = spawnSync('bash', ['-euo', 'pipefail', '-c', blocks[0]!.split('\n').filter((l) => !l.startsWith('kubectl') && !l.startsWith('helm')).join('\n')], { cwd: work, encoding: 'utf8', env: { PATH: `${path.join(work, 'bin')}:${process.env.PATH}`, HOME: dir } });
    expect(first.status, first.stderr).toBe(0);
    const r = spawnSync('bash', ['-euo', 'pipefail', '-c', blocks[1]!.replaceAll('8443', port)], { cwd: work, encoding: 'utf8', timeout: 60_000, env: { PATH: `${path.join(work, 'bin')}:${process.env.PATH}`, HOME: dir } });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toContain('"/spec/containers/0/command"\n"/spec/containers/0/args"\n"/metadata/annotations"');
    expect(r.stdout).toMatch(/admissions_total\{outcome="wrapped",dry_run="false"\} 1/);
    const log = readFileSync(path.join(work, 'webhook.log'), 'utf8').trim().split('\n').map((l) => JSON.parse(l) as Obj);
    expect(log.filter((l) => l.msg === 'admission')).toEqual([expect.objectContaining({ outcome: 'wrapped', wrapped: ['vllm'], namespace: 'models' })]);
  }, 90_000);
});
