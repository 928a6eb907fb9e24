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
import { runAdmit } from '../../src/webhook/admit-command.js';
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
  it('a Pod (YAML): the pod as the webhook lets it in, in YAML, exit 0', async () => {
    const r = await admit([], podYaml);
    expect(r.stderr).toBe('');
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

  it('input that is not one object: exit 1 with what to give', async () => {
    for (const [input, message] of [
      ['', 'nothing on stdin'],
      ['{"kind": ', 'stdin is not JSON'],
      [`${podYaml}\n---\n${podYaml}`, 'stdin holds 2 YAML documents'],
      ['- a\n- b\n', 'stdin is not a Kubernetes object'],
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
    expect(ok.stderr).toBe('');
    expect(ok.status).toBe(0);
    expect(JSON.parse(ok.stdout).response.uid).toBe('0d3a9c6e-7f1b-4a8e-9c2d-5b6e7f8a9b0c');
    const help = run(['admit', '--help'], '');
    expect(help.status).toBe(0);
    expect(help.stdout).toContain('vram-preflight admit [options] < pod.yaml');
    expect(run(['--help'], '').stdout).toContain('vram-preflight admit [options] < pod.yaml');
    expect(run(['admit', '--bogus'], '').status).toBe(2);
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
    const first = spawnSync('bash', ['-euo', 'pipefail', '-c', blocks[0]!.split('\n').filter((l) => !l.startsWith('kubectl')).join('\n')], { cwd: work, encoding: 'utf8', env: { PATH: `${path.join(work, 'bin')}:${process.env.PATH}`, HOME: dir } });
    expect(first.status, first.stderr).toBe(0);
    const r = spawnSync('bash', ['-euo', 'pipefail', '-c', blocks[1]!.replaceAll('8443', port)], { cwd: work, encoding: 'utf8', timeout: 60_000, env: { PATH: `${path.join(work, 'bin')}:${process.env.PATH}`, HOME: dir } });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toContain('"/spec/containers/0/command"\n"/spec/containers/0/args"\n"/metadata/annotations"');
    expect(r.stdout).toMatch(/admissions_total\{outcome="wrapped",dry_run="false"\} 1/);
    const log = readFileSync(path.join(work, 'webhook.log'), 'utf8').trim().split('\n').map((l) => JSON.parse(l) as Obj);
    expect(log.filter((l) => l.msg === 'admission')).toEqual([expect.objectContaining({ outcome: 'wrapped', wrapped: ['vllm'], namespace: 'models' })]);
  }, 90_000);
});
