/**
 * Helm 3 (v3.17.2, the real binary) running the bundle as a post-renderer:
 * found on PATH by name and given by absolute path, with --post-renderer-args,
 * --show-only and failures. `helm install` itself, its dry run included, runs
 * against the real API server in test/apiserver/helm-install.test.ts.
 */
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  assertOnlyVllmChanged,
  binDirWithBundle,
  buildArtifacts,
  bySource,
  CHART,
  CHART_NAME,
  ensureHelm,
  helm,
  helmEnv,
  helmOk,
  parseK8s,
  podContainers,
  removeTempDirs,
  splitHelmOutput,
  unwrap,
  ZOO_WRAPPED,
  type Artifacts,
} from './helpers.js';

let art: Artifacts;
let env: ReturnType<typeof helmEnv>;
let plain: string;
let byName: string;

beforeAll(() => {
  ensureHelm();
  art = buildArtifacts();
  // Helm 3 looks a bare --post-renderer name up on PATH.
  const bin = binDirWithBundle(art.bundle);
  env = helmEnv();
  env.PATH = `${bin}${path.delimiter}${env.PATH}`;
  plain = helmOk(3, ['template', 'zoo', CHART], env);
  byName = helmOk(3, ['template', 'zoo', CHART, '--post-renderer', 'vram-preflight'], env);
});

afterAll(removeTempDirs);

describe('helm 3 template --post-renderer', () => {
  it('by PATH name: only the vLLM containers change, every other document is byte-identical', () => {
    const wrapped = assertOnlyVllmChanged(plain, byName, ZOO_WRAPPED);
    expect([...wrapped.keys()].sort()).toEqual([
      'templates/vllm-args.yaml/model',
      'templates/vllm-command.yaml/vllm',
      'templates/vllm-null-args.yaml/engine',
      'templates/vllm-statefulset.yaml/server',
    ]);
    // The rest of the chart, spelled out: untouched on a GPU (llama.cpp, LocalAI), opted out, hooks, octal modes.
    const after = bySource(splitHelmOutput(byName));
    for (const t of ['llamacpp', 'localai', 'vllm-skipped', 'web', 'configmap', 'hook-job', 'service']) {
      expect(after.has(`${CHART_NAME}/templates/${t}.yaml`), t).toBe(true);
    }
    expect(after.get(`${CHART_NAME}/templates/web.yaml`)!.text).toContain('defaultMode: 0644');
    // Helm 3 does not send hooks to a post-renderer: the hook comes out as rendered.
    expect(after.get(`${CHART_NAME}/templates/hook-job.yaml`)!.text).toBe(bySource(splitHelmOutput(plain)).get(`${CHART_NAME}/templates/hook-job.yaml`)!.text);
  });

  it('never leaves a null command or args on a wrapped container', () => {
    const doc = parseK8s(bySource(splitHelmOutput(byName)).get(`${CHART_NAME}/templates/vllm-null-args.yaml`)!.text);
    const [engine] = podContainers(doc);
    const { start } = unwrap(engine!);
    expect(start.length).toBeGreaterThan(0);
    expect(start.every((a) => typeof a === 'string' && a.length > 0)).toBe(true);
  });

  it('by absolute path gives the same output', () => {
    const out = helmOk(3, ['template', 'zoo', CHART, '--post-renderer', art.bundle], env);
    expect(out).toBe(byName);
  });

  it('--post-renderer-args changes an option (--timeout-seconds=900), in both spellings', () => {
    const joined = helmOk(3, ['template', 'zoo', CHART, '--post-renderer', 'vram-preflight', '--post-renderer-args=--timeout-seconds=900'], env);
    const split = helmOk(
      3,
      ['template', 'zoo', CHART, '--post-renderer', 'vram-preflight', '--post-renderer-args', '--timeout-seconds', '--post-renderer-args', '900'],
      env,
    );
    expect(split).toBe(joined);
    const wrapped = assertOnlyVllmChanged(plain, joined, ZOO_WRAPPED);
    const defaults = assertOnlyVllmChanged(plain, byName, ZOO_WRAPPED);
    for (const [key, w] of wrapped) {
      expect(w.script, key).toMatch(/\b900\b/);
      expect(defaults.get(key)!.script, key).not.toMatch(/\b900\b/);
      expect(w.start).toEqual(defaults.get(key)!.start);
    }
  });

  it('--show-only still finds documents by their # Source: comment', () => {
    const vllm = helmOk(3, ['template', 'zoo', CHART, '--post-renderer', 'vram-preflight', '--show-only', 'templates/vllm-args.yaml'], env);
    const docs = splitHelmOutput(vllm);
    expect(docs.map((d) => d.source)).toEqual([`${CHART_NAME}/templates/vllm-args.yaml`]);
    // --show-only prints each document followed by an empty line; compare without it.
    expect(docs[0]!.text.trimEnd()).toBe(bySource(splitHelmOutput(byName)).get(`${CHART_NAME}/templates/vllm-args.yaml`)!.text.trimEnd());

    const llama = helmOk(3, ['template', 'zoo', CHART, '--post-renderer', 'vram-preflight', '--show-only', 'templates/llamacpp.yaml'], env);
    expect(llama).toBe(helmOk(3, ['template', 'zoo', CHART, '--show-only', 'templates/llamacpp.yaml'], env));
  });

  it('an invalid option fails helm: non-zero exit, no manifests, the reason on stderr', () => {
    const r = helm(3, ['template', 'zoo', CHART, '--post-renderer', 'vram-preflight', '--post-renderer-args=--timeout-seconds=soon'], env);
    expect(r.status).not.toBe(0);
    expect(r.stdout).toBe('');
    expect(r.stderr).toContain('error while running post render');
    expect(r.stderr).toMatch(/timeout-seconds/);
  });

  it('a vLLM container whose start cannot be known fails helm with the reason', () => {
    const r = helm(3, ['template', 'zoo', CHART, '--post-renderer', 'vram-preflight', '--set', 'unknownImage.enabled=true'], env);
    expect(r.status).not.toBe(0);
    expect(r.stdout).toBe('');
    expect(r.stderr).toContain('UNKNOWN_START');
    expect(r.stderr).toContain('vllm/vllm-openai:nightly');
  });
});

describe('helm 3 install --dry-run=client', () => {
  it('needs a reachable API server in Helm 3 (unlike Helm 4)', () => {
    const r = helm(3, ['install', 'zoo', CHART, '--dry-run=client', '--post-renderer', 'vram-preflight', '--kube-apiserver', 'http://127.0.0.1:9'], env);
    expect(r.status).not.toBe(0);
    expect(r.stderr).toMatch(/cluster unreachable/i);
  });
});
