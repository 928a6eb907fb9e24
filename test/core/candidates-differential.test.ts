/**
 * The render reads fewer documents than explain (src/core/decide/deciding-mentions.ts):
 * a document with containers is parsed only where a mention of a target word
 * could decide one. This holds the render with that rule (`deciding-mention`)
 * to the render with the old one (`any-mention`, still explain's), over every
 * input of the repository (fixture cases with their options and their
 * expected outputs, the real renders, the pod corpus as YAML and as JSON,
 * every other YAML and JSON file it tracks, the test charts rendered by the
 * real helm) and over seeded generated documents
 * that place the words in names, labels, annotations, images, args, block
 * scalars, flow and JSON style. For each stream and each of its documents alone:
 * - the output is byte for byte the same, and so are the images asked of registries;
 * - the warnings and errors are the same, save the problems of a document's
 *   own YAML (a syntax error, a duplicate key, command or args that are not
 *   lists of strings) in a document only the old rule reads: the render passes
 *   it through unread, as any document that does not mention vLLM;
 * - the container reports differ only by containers of documents only the old
 *   rule reads, each a skip with no warnings and no notes (or an error of that
 *   document's own YAML, as above).
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import fc from 'fast-check';
import { parseAllDocuments, stringify } from 'yaml';
import { describe, expect, it } from 'vitest';
import { DEFAULT_OPTIONS, type Options } from '../../src/core/options.js';
import { candidateTest, transform, type ContainerReport, type TransformResult } from '../../src/core/transform.js';
import { splitStream } from '../../src/core/yaml/stream.js';
import { optionsFor } from '../support/doors.js';
import { runCli } from './run-cli.js';

const ROOT = path.resolve(import.meta.dirname, '../..');
const RUNS = Number(process.env.CANDIDATE_RUNS ?? 300);
const SEED = Number(process.env.CANDIDATE_SEED ?? 20261204);

/** Problems of a document's own YAML or argv, which only a parse finds: the render no longer parses a document whose mentions decide nothing. */
const OWN_YAML_ERRORS = new Set(['YAML_SYNTAX', 'BAD_CONTAINER']);
const DUPLICATE_KEY_WARNING = /: key ".*" appears more than once in /;

/** What the sharper rule changed in one comparison. */
interface Difference {
  /** Documents (chunks) that only the old rule reads. */
  unread: number;
  /** Container reports only the old rule makes: skips with no warnings and no notes, or errors of an unread document's YAML. */
  dropped: ContainerReport[];
  droppedErrors: string[];
  droppedWarnings: string[];
}

function documentCount(text: string): number {
  const docs = parseAllDocuments(text, { uniqueKeys: false });
  return Math.max(1, Array.isArray(docs) ? docs.length : 1);
}

const described = (c: ContainerReport): string => `${c.workload} ${c.template} container "${c.container}" (${c.action}: ${c.reason})`;

/** The render with the sharper rule against the render with the old one; the assertions of the file's comment. */
function compare(stream: string, options: Options, label: string): Difference {
  const old: TransformResult = transform(stream, options, { candidates: 'any-mention' });
  const sharp: TransformResult = transform(stream, options, { candidates: 'deciding-mention' });
  const readsOld = candidateTest(options, 'any-mention');
  const readsSharp = candidateTest(options, 'deciding-mention');
  // Document indices (as reports count them: one per chunk, more for a chunk of several) that only the old rule reads.
  const unreadIndices = new Set<number>();
  let unread = 0;
  splitStream(stream).forEach((chunk, p) => {
    const byOld = readsOld(chunk.text);
    const bySharp = readsSharp(chunk.text);
    expect(!bySharp || byOld, `${label}: document ${p + 1} is read by the sharper rule but not by the old one`).toBe(true);
    if (byOld && !bySharp) {
      unread++;
      for (let i = 0, n = documentCount(chunk.text); i < n; i++) unreadIndices.add(p + 1 + i);
    }
  });
  const unreadDoc = (index: number | undefined): boolean => index !== undefined && unreadIndices.has(index);

  // Every document's piece of the output (pieces are kept on error too: a refused document's piece is its text).
  expect(sharp.pieces, `${label}: the output must be byte for byte the same`).toEqual(old.pieces);
  expect(sharp.wantedImages, `${label}: the images asked of registries must be the same`).toEqual(old.wantedImages);

  const droppedErrors = old.errors.filter((e) => unreadDoc(e.details.document?.index));
  for (const error of droppedErrors) {
    expect(OWN_YAML_ERRORS.has(error.code), `${label}: only an error of a document's own YAML or argv may be left out (a document the render no longer reads passes through unread), not: ${error.format()}`).toBe(true);
  }
  expect(sharp.errors.map((e) => e.format()), `${label}: the errors must be the same, save those of documents the render no longer reads`).toEqual(old.errors.filter((e) => !droppedErrors.includes(e)).map((e) => e.format()));
  if (sharp.errors.length === 0 && old.errors.length > 0) {
    // The old render failed only on documents the render no longer reads: it now writes the stream, those documents as they were.
    expect(sharp.output, `${label}: a render that no longer fails writes every document's piece`).toBe(old.pieces.join(''));
  } else {
    expect(sharp.output, `${label}: the output must be byte for byte the same`).toBe(old.output);
  }

  const dropped = old.containers.filter((c) => unreadDoc(c.document.index));
  for (const c of dropped) {
    const silentSkip = c.action === 'skip' && c.warnings.length === 0 && c.notes.length === 0;
    const ownYamlError = c.action === 'error' && c.error !== undefined && droppedErrors.includes(c.error);
    // An operator's resource without containers that names a vLLM image: explain names it, the render writes it back unread.
    const operatorResource = c.action === 'cannot-wrap' && c.container === '-' && c.warnings.length === 0 && c.notes.length === 0 && c.reason.includes('has no containers of its own');
    expect(silentSkip || ownYamlError || operatorResource, `${label}: the reports may differ only by containers whose action is skip with no warnings and no notes (or an operator's resource explain alone names); this one is not: ${described(c)} warnings ${JSON.stringify(c.warnings)} notes ${JSON.stringify(c.notes)}`).toBe(true);
  }
  expect(sharp.containers, `${label}: the container reports must be the same, save silent skips of documents the render no longer reads`).toEqual(old.containers.filter((c) => !dropped.includes(c)));

  // Warnings: the old list less those the sharper one lacks (as a multiset), which must be duplicate-key warnings of unread documents.
  const left = [...sharp.warnings];
  const droppedWarnings: string[] = [];
  for (const warning of old.warnings) {
    const at = left.indexOf(warning);
    if (at === -1) droppedWarnings.push(warning);
    else left.splice(at, 1);
  }
  expect(left, `${label}: warnings only the sharper rule gives`).toEqual([]);
  for (const warning of droppedWarnings) {
    expect(DUPLICATE_KEY_WARNING.test(warning), `${label}: the warnings must be the same, save a duplicate key in a document the render no longer reads; lost: ${warning}`).toBe(true);
  }
  expect(sharp.warnings.length + droppedWarnings.length).toBe(old.warnings.length);
  return { unread, dropped, droppedErrors: droppedErrors.map((e) => e.format()), droppedWarnings };
}

/** The stream, and each of its documents alone. */
function compareAll(stream: string, options: Options, label: string): Difference[] {
  const chunks = splitStream(stream);
  return [compare(stream, options, label), ...(chunks.length > 1 ? chunks.map((chunk, i) => compare(chunk.text, options, `${label}, document ${i + 1} alone`)) : [])];
}

// ---------------------------------------------------------------------------
// Every input of the repository.

interface Input {
  label: string;
  text: string;
  options: Options;
}

function repositoryInputs(): Input[] {
  const inputs: Input[] = [];
  const casesDir = path.join(ROOT, 'fixtures/cases');
  for (const name of readdirSync(casesDir).sort()) {
    const dir = path.join(casesDir, name);
    let options: Options;
    try {
      options = optionsFor(dir);
    } catch {
      options = { ...DEFAULT_OPTIONS }; // a case about a bad option: its input still is one
    }
    inputs.push({ label: `fixtures/cases/${name}/input.yaml`, text: readFileSync(path.join(dir, 'input.yaml'), 'utf8'), options });
    // Outputs are inputs too: a render of a render finds the earlier wrap.
    if (existsSync(path.join(dir, 'expected.yaml'))) inputs.push({ label: `fixtures/cases/${name}/expected.yaml`, text: readFileSync(path.join(dir, 'expected.yaml'), 'utf8'), options });
  }
  for (const file of readdirSync(path.join(ROOT, 'fixtures/real')).sort()) {
    inputs.push({ label: `fixtures/real/${file}`, text: readFileSync(path.join(ROOT, 'fixtures/real', file), 'utf8'), options: { ...DEFAULT_OPTIONS } });
  }
  for (const file of ['good.yaml', 'bad.yaml']) {
    inputs.push({ label: `fixtures/config/${file}`, text: readFileSync(path.join(ROOT, 'fixtures/config', file), 'utf8'), options: { ...DEFAULT_OPTIONS } });
  }
  // The pod corpus (pods as operators build them, and as the webhook leaves them): as JSON text, and as block YAML.
  const pods = readdirSync(path.join(ROOT, 'fixtures/pods')).filter((f) => f.endsWith('.json')).sort();
  for (const file of pods) {
    const text = readFileSync(path.join(ROOT, 'fixtures/pods', file), 'utf8');
    inputs.push({ label: `fixtures/pods/${file}`, text, options: { ...DEFAULT_OPTIONS } });
    const value = JSON.parse(text) as unknown;
    const docs = Array.isArray(value) ? value : [value];
    inputs.push({ label: `fixtures/pods/${file} as YAML`, text: docs.map((d) => stringify(d, { lineWidth: 0 })).join('---\n'), options: { ...DEFAULT_OPTIONS } });
  }
  // Every other YAML or JSON file the repository tracks (chart templates as written, manifests, schemas, test results).
  const tracked = execFileSync('git', ['ls-files', '-z'], { cwd: ROOT, encoding: 'utf8' }).split('\0');
  for (const file of tracked.filter((f) => /\.(ya?ml|json)$/.test(f) && !/^fixtures\/(cases|real|pods|config)\//.test(f) && !/(^|\/)(package(-lock)?|tsconfig[^/]*)\.json$/.test(f)).sort()) {
    inputs.push({ label: file, text: readFileSync(path.join(ROOT, file), 'utf8'), options: { ...DEFAULT_OPTIONS } });
  }
  return inputs;
}

/** The test charts, rendered by the real helm (as the e2e and Argo CD tests render them). */
function chartRenders(): Input[] {
  const helm = path.join(ROOT, '.cache/helm/v3/helm');
  const charts = ['test/charts/inference-zoo', 'test/argocd/charts/vllm-app', 'test/argocd/charts/umbrella'];
  return charts.flatMap((chart) => {
    try {
      const text = execFileSync(helm, ['template', 'zoo', path.join(ROOT, chart)], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'], env: { ...process.env, HELM_CACHE_HOME: '/nonexistent', HELM_CONFIG_HOME: '/nonexistent' } });
      return [{ label: `helm template ${chart}`, text, options: { ...DEFAULT_OPTIONS } }];
    } catch {
      return []; // a chart with dependencies not vendored: checked by the count below
    }
  });
}

describe('the render with the sharper candidate test equals the render with the old one: every input of the repository', () => {
  const inputs = repositoryInputs();
  const renders = chartRenders();

  it('finds the inputs (fixture cases and their outputs, real renders, the pod corpus, every other YAML and JSON file, chart renders)', () => {
    expect(inputs.length).toBeGreaterThan(190);
    expect(renders.length).toBeGreaterThanOrEqual(2);
  });

  it.each([...inputs, ...renders].map((input) => [input.label, input] as const))('%s', (_, input) => {
    compareAll(input.text, input.options, input.label);
  });

  it('the real vLLM render: the seed Job, which names vllm only in its names, labels and a claim, is no longer parsed', () => {
    const text = readFileSync(path.join(ROOT, 'fixtures/real/vllm.input.yaml'), 'utf8');
    const [whole] = compareAll(text, { ...DEFAULT_OPTIONS }, 'real vllm');
    expect(whole!.unread).toBe(1);
    expect(whole!.dropped.map((c) => `${c.workload}/${c.container}: ${c.action}`)).toEqual(['Job/fixture-vllm-seed/seed: skip']);
  });
});

// ---------------------------------------------------------------------------
// Seeded generated documents.

/** Values that hold the target words in various cases and spellings, and some that hold none. */
const mentionValue = fc.constantFrom('fixture-vllm-seed', 'vllm', 'VLLM', 'vLLM-x', 'llm-d-decode', 'my-llm-d', 'huggingfaceserver', 'vram-preflight-x', 'web', 'seed', 'qwen', 'http://vllm:8000/v1', 'serves vLLM for the team', "vllm's", 'a,vllm', '0.9');
const labelKey = fc.constantFrom('app.kubernetes.io/name', 'ai-helm.adorsys-gis.github.io/model', 'app', 'vllm.ai/role', 'llm-d.ai/inferenceServing', 'tier');
const annotation = fc.constantFrom<[string, unknown][]>(
  [],
  [['vram-preflight.io/skip', 'true']],
  [['vram-preflight.io/skip', 'false']],
  [['vram-preflight.io/skip', 'yes']],
  [['vram-preflight.io/containers', 'seed']],
  [['vram-preflight.io/containers', 'model,seed']],
  [['vram-preflight.io/containers', 'nope']],
  [['vram-preflight.io/gpu-memory-utilization', '0.8']],
  [['example.com/note', 'vllm']],
  [['example.com/script', 'set -e\nexec vllm serve m\n']],
);
const image = fc.constantFrom('vllm/vllm-openai:v0.11.0', 'vllm/vllm-openai', 'VLLM/vllm-openai:v0.11.0', 'python:3.12-slim', 'lmcache/vllm-openai:v0.5.2', 'kserve/huggingfaceserver:v0.15.0', 'ghcr.io/llm-d/llm-d:v0.2.0', 'registry.example/team/engine:1.0', 'nginx:1.27', 'rayproject/ray:2.40.0', 'vllm/vllm-openai:v0.12.0', 'busybox:1.36');
const start = fc.constantFrom<{ command?: unknown; args?: unknown }>(
  {},
  { command: ['vllm', 'serve'], args: ['m', '--gpu-memory-utilization', '0.85'] },
  { command: ['python3', '-m', 'vllm.entrypoints.openai.api_server'], args: ['--model', 'm'] },
  { command: ['/bin/sh', '-ec'], args: ['exec vllm serve m --port 8000\n'] },
  { command: ['/bin/sh', '-c'], args: ['set -e\nmodel: vllm\nexec vllm serve m\n'] },
  // The one line that shows vLLM looks like `key: value`: inside a block scalar, or a quoted scalar over lines.
  { command: ['/bin/sh', '-c'], args: ['set -e\nserver: vllm serve m\n'] },
  { command: ['/bin/sh', '-c', 'echo starting\nserver: vllm serve m --gpu-memory-utilization 0.8'] },
  { command: ['sh', '-c', 'echo vllm; sleep 1'] },
  { args: ['--model', 'x', '--served-model-name', 'vllm'] },
  { args: ['--gpu-memory-utilization=0.9'] },
  { command: ['python', 'app.py'], args: ['--gpu_memory_utilization', '0.9'] },
  { command: ['huggingfaceserver'], args: ['--backend=vllm'] },
  { args: ['--backend=vllm', '--model_name=m'] },
  { command: ['ray', 'start', '--head'] },
  { command: ['sglang', 'serve'] },
  { args: ['--port', 8080] },
  { args: [{ '--model': 'vllm' }] },
  { command: 'vllm serve' },
);
const NVIDIA_GPU = { resources: { limits: { 'nvidia.com/gpu': 1 } } };
const gpu = fc.constantFrom<Record<string, unknown>>({}, NVIDIA_GPU, NVIDIA_GPU, NVIDIA_GPU, { env: [{ name: 'CUDA_VISIBLE_DEVICES', value: '0,1' }] }, { resources: { limits: { 'amd.com/gpu': 1 } } }, { resources: { claims: [{ name: 'gpu' }] } });
const env = fc.constantFrom<Record<string, unknown>>({}, { env: [{ name: 'VLLM_LOGGING_LEVEL', value: 'DEBUG' }] }, { env: [{ name: 'MODE', value: 'vllm' }] }, { env: [{ name: 'UTIL', value: '0.8' }] });

/** Images and starts that hold no target word: a document of such containers mentions vLLM only where the rule lets it decide nothing (or in its style). */
const quietImage = fc.constantFrom('python:3.12-slim', 'nginx:1.27', 'rayproject/ray:2.40.0', 'busybox:1.36', 'registry.example/team/engine:1.0');
const quietStart = fc.constantFrom<{ command?: unknown; args?: unknown }>(
  {},
  { command: ['python', 'app.py'] },
  { command: ['/bin/sh', '-ec'], args: ['echo seed\nexit 0\n'] },
  { args: ['--port', 8000] },
  { command: ['ray', 'start', '--head'] },
  { args: [{ model: 'vllm' }] },
  { args: ['--gpu-memory-utilization', '0.9'] },
);
const anyContainer = fc.record({ name: fc.constantFrom('model', 'seed', 'vllm', 'web'), image, start, gpu, env });
const quietContainer = fc.record({ name: fc.constantFrom('model', 'seed', 'vllm', 'web'), image: quietImage, start: quietStart, gpu, env });
const containerValue = fc.oneof({ arbitrary: quietContainer, weight: 1 }, { arbitrary: anyContainer, weight: 3 }).map(({ name, image, start, gpu, env }) => ({ name, image, ...start, ...env, ...gpu }));

const podSpec = fc.record({
  containers: fc.array(containerValue, { minLength: 1, maxLength: 2 }),
  runtimeClassName: fc.constantFrom(undefined, 'nvidia'),
  claim: fc.constantFrom(undefined, 'fixture-vllm-weights', 'weights'),
  dra: fc.boolean(),
}).map(({ containers, runtimeClassName, claim, dra }) => ({
  ...(runtimeClassName ? { runtimeClassName } : {}),
  ...(dra ? { resourceClaims: [{ name: 'gpu', resourceClaimTemplateName: 'vllm-gpu' }] } : {}),
  containers,
  ...(claim ? { volumes: [{ name: 'w', persistentVolumeClaim: { claimName: claim } }] } : {}),
}));

const metadata = fc.record({ name: mentionValue, labels: fc.dictionary(labelKey, mentionValue, { maxKeys: 2 }), annotations: fc.oneof({ arbitrary: fc.constant<[string, unknown][]>([]), weight: 2 }, { arbitrary: annotation, weight: 1 }) }).map(({ name, labels, annotations }) => ({
  name,
  ...(Object.keys(labels).length ? { labels } : {}),
  ...(annotations.length ? { annotations: Object.fromEntries(annotations) } : {}),
}));

const template = fc.record({ metadata, spec: podSpec });

/** Objects of the kinds whose containers are decided, of kinds explain names without them, and of a kind nobody knows. */
const object: fc.Arbitrary<Record<string, unknown>> = fc.oneof(
  fc.record({ metadata, template }).map(({ metadata, template }) => ({ apiVersion: 'apps/v1', kind: 'Deployment', metadata, spec: { template } })),
  fc.record({ metadata, template }).map(({ metadata, template }) => ({ apiVersion: 'batch/v1', kind: 'Job', metadata, spec: { template } })),
  fc.record({ metadata, spec: podSpec }).map(({ metadata, spec }) => ({ apiVersion: 'v1', kind: 'Pod', metadata, spec })),
  fc.record({ metadata, template }).map(({ metadata, template }) => ({ apiVersion: 'example.com/v1', kind: 'Widget', metadata, spec: { template } })),
  fc.record({ metadata, leader: template, worker: template }).map(({ metadata, leader, worker }) => ({ apiVersion: 'leaderworkerset.x-k8s.io/v1', kind: 'LeaderWorkerSet', metadata, spec: { leaderWorkerTemplate: { size: 2, leaderTemplate: leader, workerTemplate: worker } } })),
  fc.record({ metadata, template }).map(({ metadata, template }) => ({ apiVersion: 'ray.io/v1', kind: 'RayCluster', metadata, spec: { headGroupSpec: { template } } })),
  fc.record({ metadata, spec: podSpec }).map(({ metadata, spec }) => ({ apiVersion: 'serving.kserve.io/v1alpha1', kind: 'ServingRuntime', metadata, spec: { containers: spec.containers } })),
  fc.record({ metadata, spec: podSpec }).map(({ metadata, spec }) => ({ apiVersion: 'serving.kserve.io/v1beta1', kind: 'InferenceService', metadata, spec: { predictor: { containers: spec.containers } } })),
  fc.record({ metadata, template }).map(({ metadata, template }) => ({ apiVersion: 'v1', kind: 'List', items: [{ apiVersion: 'apps/v1', kind: 'Deployment', metadata, spec: { template } }] })),
);

const CLAIM_TEMPLATE = { apiVersion: 'resource.k8s.io/v1', kind: 'ResourceClaimTemplate', metadata: { name: 'vllm-gpu' }, spec: { spec: { devices: { requests: [{ name: 'gpu', exactly: { deviceClassName: 'gpu.nvidia.com' } }] } } } };

/** How a document is written: the yaml library's styles (block, flow, quoted, folded long lines), JSON, and edits it does not make. */
const style = fc.record({
  form: fc.constantFrom('block', 'block', 'block', 'block', 'flow', 'json', 'json-compact'),
  strings: fc.constantFrom('PLAIN', 'PLAIN', 'PLAIN', 'PLAIN', 'QUOTE_DOUBLE', 'QUOTE_SINGLE', 'BLOCK_LITERAL'),
  lineWidth: fc.constantFrom(0, 0, 24, 40),
  indentSeq: fc.boolean(),
  mutation: fc.constantFrom('none', 'none', 'none', 'syntax-error', 'duplicate-key', 'anchor-on-name', 'comment', 'crlf'),
});

function write(value: Record<string, unknown> | string, how: { form: string; strings: string; lineWidth: number; indentSeq: boolean; mutation: string }): string {
  let text: string;
  if (typeof value === 'string') text = value;
  else if (how.form === 'json') text = `${JSON.stringify(value, null, 2)}\n`;
  else if (how.form === 'json-compact') text = `${JSON.stringify(value)}\n`;
  else {
    text = stringify(value, {
      collectionStyle: how.form === 'flow' ? 'flow' : 'block',
      defaultStringType: how.strings as 'PLAIN',
      defaultKeyType: 'PLAIN',
      lineWidth: how.lineWidth,
      minContentWidth: 0,
      indentSeq: how.indentSeq,
    });
  }
  switch (how.mutation) {
    case 'syntax-error':
      return text.replace(/\n(\s*)([A-Za-z][\w.-]*): /, '\n$1$2: [unclosed\n$1$2: ');
    case 'duplicate-key':
      return text.replace(/\n(\s*)name: (.*)\n/, '\n$1name: $2\n$1name: $2\n');
    case 'anchor-on-name':
      return text.replace(/\n(\s*)name: /, '\n$1name: &n ');
    case 'comment':
      return text.replace(/\nspec:/, '\n# serves vllm\nspec:');
    case 'crlf':
      return text.replace(/\n/g, '\r\n');
    default:
      return text;
  }
}

/** Documents like the real render's seed Job: vLLM in names, labels, a claim and env names only, written in block style. */
const quietMention = fc.constantFrom('fixture-vllm-seed', 'vllm', 'VLLM', 'my-llm-d', 'huggingfaceserver-x', 'vram-preflight-x', 'serves vLLM for the team', 'http://vllm:8000/v1');
const quietMetadata = fc.record({ name: quietMention, labels: fc.dictionary(fc.constantFrom('app.kubernetes.io/name', 'ai-helm.adorsys-gis.github.io/model', 'app'), quietMention, { maxKeys: 2 }) });
const quietPod = fc.record({
  containers: fc.array(quietContainer.map(({ name, image, start, gpu, env }) => ({ name, image, ...start, ...env, ...gpu })), { minLength: 1, maxLength: 2 }),
  runtimeClassName: fc.constantFrom(undefined, 'nvidia'),
  claim: fc.constantFrom('fixture-vllm-weights', 'vllm-cache'),
}).map(({ containers, runtimeClassName, claim }) => ({ ...(runtimeClassName ? { runtimeClassName } : {}), containers, volumes: [{ name: 'w', persistentVolumeClaim: { claimName: claim } }] }));
const quietObject: fc.Arbitrary<Record<string, unknown>> = fc.oneof(
  fc.record({ metadata: quietMetadata, template: fc.record({ metadata: quietMetadata, spec: quietPod }) }).map(({ metadata, template }) => ({ apiVersion: 'batch/v1', kind: 'Job', metadata, spec: { template } })),
  fc.record({ metadata: quietMetadata, template: fc.record({ metadata: quietMetadata, spec: quietPod }) }).map(({ metadata, template }) => ({ apiVersion: 'apps/v1', kind: 'Deployment', metadata, spec: { template } })),
  fc.record({ metadata: quietMetadata, spec: quietPod }).map(({ metadata, spec }) => ({ apiVersion: 'v1', kind: 'Pod', metadata, spec })),
  fc.record({ metadata: quietMetadata, template: fc.record({ metadata: quietMetadata, spec: quietPod }) }).map(({ metadata, template }) => ({ apiVersion: 'example.com/v1', kind: 'Widget', metadata, spec: { template } })),
);
const quietStyle = fc.record({
  form: fc.constant('block'),
  strings: fc.constantFrom('PLAIN', 'PLAIN', 'PLAIN', 'BLOCK_LITERAL'),
  lineWidth: fc.constantFrom(0, 0, 24),
  indentSeq: fc.boolean(),
  mutation: fc.constantFrom('none', 'none', 'syntax-error', 'duplicate-key', 'anchor-on-name', 'comment', 'crlf'),
});
/**
 * Handwritten documents whose only sign of vLLM is a script line shaped like
 * `key: value` (a block scalar's line, a quoted scalar's continuation, inside a
 * flow sequence over lines): the rule must count it, the other mentions are names.
 */
const HIDDEN_SCRIPTS: readonly string[] = [
  '|\n              set -e\n              server: vllm serve m',
  '|-\n              set -e\n\n              server: vllm serve m --gpu-memory-utilization 0.8',
  '>\n              set -e;\n              server: vllm serve m',
  "'set -e\n\n              server: vllm serve m'",
  '"set -e\n\n              server: vllm serve m"',
  "'set -e\n\n              server: vllm serve m\n              '",
  '"set -e\n\n              server: vllm serve m\n              "',
  "&script |\n              server: vllm serve m",
  'set -e;\n              vllm serve m',
];
const hiddenStart = fc
  .record({ name: quietMention, script: fc.constantFrom(...HIDDEN_SCRIPTS), flow: fc.boolean(), gpu: fc.boolean(), env: fc.boolean() })
  .map(({ name, script, flow, gpu, env }) =>
    [
      'apiVersion: batch/v1',
      'kind: Job',
      'metadata:',
      `  name: ${name}`,
      'spec:',
      '  template:',
      '    spec:',
      ...(gpu ? ['      runtimeClassName: nvidia'] : []),
      '      containers:',
      '        - name: seed',
      '          image: python:3.12-slim',
      '          command: ["/bin/sh", "-c"]',
      ...(env ? ['          env:', '            - name: VLLM_LOGGING_LEVEL', '              value: DEBUG'] : []),
      ...(flow && script.startsWith('"') ? [`          args: [${script}]`] : ['          args:', `            - ${script}`]),
      '      volumes:',
      '        - name: w',
      '          persistentVolumeClaim:',
      '            claimName: fixture-vllm-weights',
      '',
    ].join('\n'),
  );
const plain = { form: 'text', strings: 'PLAIN', lineWidth: 0, indentSeq: true, mutation: 'none' };

const document = fc.oneof(
  { arbitrary: fc.tuple(quietObject, quietStyle), weight: 2 },
  { arbitrary: fc.tuple(object, style), weight: 3 },
  { arbitrary: hiddenStart.map((text) => [text, plain] as [string, typeof plain]), weight: 1 },
);

const streamOf = fc.record({ docs: fc.array(document, { minLength: 1, maxLength: 3 }), claims: fc.boolean(), sources: fc.boolean() });

const GENERATED_OPTIONS: Options[] = [
  { ...DEFAULT_OPTIONS, registryLookup: 'never' },
  { ...DEFAULT_OPTIONS },
  { ...DEFAULT_OPTIONS, images: [{ repository: 'registry.example/team/engine', entrypoint: ['vllm', 'serve'] }], containerNames: ['model', 'seed'] },
];

describe('the render with the sharper candidate test equals the render with the old one: seeded generated documents', () => {
  it(`${RUNS} streams (seed ${SEED}), each also after a render (an earlier wrap)`, () => {
    const seen = { unread: 0, droppedSkips: 0, droppedErrors: 0, droppedWarnings: 0, wraps: 0, streams: 0 };
    fc.assert(
      fc.property(streamOf, fc.constantFrom(...GENERATED_OPTIONS.keys()), ({ docs, claims, sources }, which) => {
        const options = GENERATED_OPTIONS[which]!;
        const texts = [...(claims ? [stringify(CLAIM_TEMPLATE)] : []), ...docs.map(([value, how]) => write(value, how))];
        const stream = texts.map((t, i) => `---\n${sources ? `# Source: chart/templates/t${i}.yaml\n` : ''}${t}`).join('');
        const differences = compareAll(stream, options, `generated (options ${which}):\n${stream}`);
        const rendered = transform(stream, options, { candidates: 'any-mention' });
        seen.wraps += rendered.containers.filter((c) => c.action === 'wrap').length;
        // The render's output again: the wrap is found again (unchanged), or undone where the annotation says skip.
        if (rendered.errors.length === 0 && rendered.output !== stream) differences.push(...compareAll(rendered.output, options, `generated, rendered again (options ${which}):\n${rendered.output}`));
        for (const d of differences) {
          seen.unread += d.unread;
          seen.droppedSkips += d.dropped.filter((c) => c.action === 'skip').length;
          seen.droppedErrors += d.droppedErrors.length;
          seen.droppedWarnings += d.droppedWarnings.length;
        }
        seen.streams++;
      }),
      { numRuns: RUNS, seed: SEED },
    );
    // The generator must reach both sides of the rule, and the documented differences.
    expect(seen.unread, JSON.stringify(seen)).toBeGreaterThan(RUNS / 10);
    expect(seen.droppedSkips, JSON.stringify(seen)).toBeGreaterThan(RUNS / 10);
    expect(seen.wraps, JSON.stringify(seen)).toBeGreaterThan(RUNS / 10);
    expect(seen.droppedErrors, JSON.stringify(seen)).toBeGreaterThan(0);
    expect(seen.droppedWarnings, JSON.stringify(seen)).toBeGreaterThan(0);
  });
});

// ---------------------------------------------------------------------------
// The documented difference, through the CLI.

describe('a document whose mentions of vLLM decide nothing is passed through unread by the render', () => {
  const broken = [
    '---',
    'apiVersion: batch/v1',
    'kind: Job',
    'metadata:',
    '  name: seed',
    '  labels:',
    '    ai-helm.adorsys-gis.github.io/model: fixture-vllm',
    'spec:',
    '  template:',
    '    spec:',
    '      containers:',
    '        - name: seed',
    '          image: python:3.12-slim',
    '          args: [--port, 8080',
    '',
  ].join('\n');

  it('a YAML syntax error in it: the render passes it through as written (Helm or kubectl reports it), explain still reports it', async () => {
    const render = await runCli([], broken);
    expect(render.code).toBe(0);
    expect(render.stdout).toBe(broken);
    expect(render.stderr).toBe('');
    const explain = await runCli(['explain'], broken);
    expect(explain.code).toBe(1);
    expect(explain.stdout).toBe('');
    expect(explain.stderr).toMatch(/^vram-preflight: error YAML_SYNTAX: Job\/seed/);
  });

  it('the fixture case unread-document-yaml-error (rendered identical by the fixture test): explain reports its error', async () => {
    const input = readFileSync(path.join(ROOT, 'fixtures/cases/unread-document-yaml-error/input.yaml'), 'utf8');
    expect(existsSync(path.join(ROOT, 'fixtures/cases/unread-document-yaml-error/identical'))).toBe(true);
    const explain = await runCli(['explain'], input);
    expect(explain.code).toBe(1);
    expect(explain.stderr).toMatch(/^vram-preflight: error YAML_SYNTAX: Job\/fixture-vllm-seed \(model\/templates\/seed-job.yaml\), line 21/);
  });

  it('the same document with its image vLLM\'s is parsed by the render, and refused', async () => {
    const render = await runCli([], broken.replace('python:3.12-slim', 'vllm/vllm-openai:v0.11.0'));
    expect(render.code).toBe(1);
    expect(render.stdout).toBe('');
    expect(render.stderr).toMatch(/^vram-preflight: error YAML_SYNTAX: Job\/seed/);
  });

  it('explain still lists its container (every container of every document that mentions vLLM); the report file of a render does not', async () => {
    const job = broken.replace('[--port, 8080', '[--port, "8080"]');
    const explain = await runCli(['explain', '--output', 'json'], job);
    expect(explain.code).toBe(0);
    expect((JSON.parse(explain.stdout) as { containers: { container: string; action: string }[] }).containers.map((c) => `${c.container}: ${c.action}`)).toEqual(['seed: skip']);
    const render = await runCli(['--report-file', 'report.json'], job);
    expect(render.code).toBe(0);
    expect(render.stdout).toBe(job);
    expect((JSON.parse(render.files.get('report.json')!) as { containers: unknown[] }).containers).toEqual([]);
  });
});
