/**
 * Helm 4 (v4.1.4, the real binary) running vram-preflight as an installed
 * postrenderer/v1 plugin: installed from the packaged directory and from the
 * .tgz, --post-renderer-args, hooks, the postrender-filename annotation,
 * `helm install --dry-run`, and failures (Helm 4 discards the plugin's stderr,
 * so the reason comes out as the YAML document Helm cannot read, and through
 * the diagnostics file).
 *
 * Helm 4 re-serialises every document before a post-renderer sees it, so the
 * baseline for "byte-identical" is Helm 4's output through an identity
 * post-renderer plugin (`tee`), not plain `helm template`.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  assertOnlyVllmChanged,
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
  run,
  splitHelmOutput,
  tempDir,
  unwrap,
  ZOO_WRAPPED,
  PACKAGE_VERSION,
  type Artifacts,
} from './helpers.js';

const FILENAME_ANNOTATION = 'postrenderer.helm.sh/postrender-filename';

let art: Artifacts;
let env: ReturnType<typeof helmEnv>;
let capture: string;
/** Helm 4 output through the identity plugin: the baseline. */
let identity: string;
/** What Helm 4 sent to a post-renderer (captured by the identity plugin). */
let sent: string;
let rendered: string;

/** An identity postrenderer/v1 plugin that also keeps a copy of its input (helm expands ${VAR} in args). */
function identityPlugin(): string {
  const dir = path.join(tempDir('identity'), 'identity');
  mkdirSync(dir);
  writeFileSync(
    path.join(dir, 'plugin.yaml'),
    [
      'apiVersion: v1',
      'name: identity',
      'version: 0.0.1',
      'type: postrenderer/v1',
      'runtime: subprocess',
      'runtimeConfig:',
      '  platformCommand:',
      '    - command: tee',
      '      args: ["${VRAM_E2E_CAPTURE}"]',
      '',
    ].join('\n'),
  );
  return dir;
}

beforeAll(() => {
  ensureHelm();
  art = buildArtifacts();
  capture = path.join(tempDir('capture'), 'sent.yaml');
  env = helmEnv({ VRAM_E2E_CAPTURE: capture });
  expect(helmOk(4, ['plugin', 'install', art.pluginDir], env)).toContain('Installed plugin: vram-preflight');
  helmOk(4, ['plugin', 'install', identityPlugin()], env);
  identity = helmOk(4, ['template', 'zoo', CHART, '--post-renderer', 'identity'], env);
  sent = readFileSync(capture, 'utf8');
  rendered = helmOk(4, ['template', 'zoo', CHART, '--post-renderer', 'vram-preflight'], env);
});

afterAll(removeTempDirs);

describe('helm 4 plugin install', () => {
  it('lists the installed directory as a postrenderer/v1 plugin with the package version', () => {
    const list = helmOk(4, ['plugin', 'list'], env);
    expect(list).toMatch(new RegExp(`^vram-preflight\\s+${PACKAGE_VERSION.replaceAll(".", "\\.")}\\s+postrenderer/v1\\s+v1\\b`, "m"));
  });

  it('installs from the .tgz with --verify=false and renders the same', () => {
    const tgzEnv = helmEnv();
    const out = helm(4, ['plugin', 'install', art.pluginTgz, '--verify=false'], tgzEnv);
    expect(out.status, out.stderr).toBe(0);
    expect(out.stdout + out.stderr).toContain('Installed plugin: vram-preflight');
    // Without --verify=false Helm 4 wants a .prov signature next to a tarball.
    const again = helm(4, ['plugin', 'install', art.pluginTgz], helmEnv());
    expect(again.status).not.toBe(0);
    expect(again.stderr).toContain('.prov');
    expect(helmOk(4, ['template', 'zoo', CHART, '--post-renderer', 'vram-preflight'], tgzEnv)).toBe(rendered);
  });

  it('takes only plugin names: an executable path is refused', () => {
    const r = helm(4, ['template', 'zoo', CHART, '--post-renderer', art.bundle], env);
    expect(r.status).not.toBe(0);
    expect(r.stderr).toContain('not found');
  });
});

describe('helm 4 template --post-renderer vram-preflight', () => {
  it('only the vLLM containers change; every other document is byte-identical to an identity post-render', () => {
    const wrapped = assertOnlyVllmChanged(identity, rendered, ZOO_WRAPPED);
    expect(wrapped.size).toBe(4);
    const after = bySource(splitHelmOutput(rendered));
    expect(after.get(`${CHART_NAME}/templates/web.yaml`)!.text).toContain('defaultMode: 0644');
    // Helm 4's re-serialisation keeps the meaning of everything else (only layout differs from plain output).
    const plain = bySource(splitHelmOutput(helmOk(4, ['template', 'zoo', CHART], env)));
    for (const [source, doc] of bySource(splitHelmOutput(identity))) {
      expect(parseK8s(doc.text), source).toEqual(parseK8s(plain.get(source)!.text));
    }
  });

  it('hooks are sent to the post-renderer, and every document comes back tagged with its file', () => {
    const sentDocs = sent.split(/^---$/m).filter((d) => d.trim() !== '');
    const files = sentDocs.map((d) => /postrenderer\.helm\.sh\/postrender-filename: '?([^'\n]+)'?/.exec(d)?.[1]);
    expect(files).toContain(`${CHART_NAME}/templates/hook-job.yaml`);
    expect(files.every((f) => f !== undefined)).toBe(true);

    // Our output keeps the annotation on every document (Helm needs it to split the result by file)...
    const direct = run(process.execPath, [art.bundle], { input: sent, env: helmEnv() });
    expect(direct.status, direct.stderr).toBe(0);
    const outDocs = direct.stdout.split(/^---$/m).filter((d) => d.trim() !== '');
    expect(outDocs.length).toBe(sentDocs.length);
    for (const [i, d] of outDocs.entries()) {
      expect(parseK8s(d).metadata).toMatchObject({ annotations: { [FILENAME_ANNOTATION]: files[i] } });
    }
    // ...so Helm restores every `# Source:` (it would print generated-by-postrender-N.yaml otherwise),
    // and strips the annotation again.
    const sources = splitHelmOutput(rendered).map((d) => d.source);
    expect(sources).toContain(`${CHART_NAME}/templates/hook-job.yaml`);
    expect(sources.every((s) => s.startsWith(`${CHART_NAME}/templates/`))).toBe(true);
    expect(rendered).not.toContain(FILENAME_ANNOTATION);
  });

  it('--post-renderer-args reach the plugin (--timeout-seconds=900)', () => {
    const out = helmOk(4, ['template', 'zoo', CHART, '--post-renderer', 'vram-preflight', '--post-renderer-args=--timeout-seconds=900'], env);
    const wrapped = assertOnlyVllmChanged(identity, out, ZOO_WRAPPED);
    const defaults = assertOnlyVllmChanged(identity, rendered, ZOO_WRAPPED);
    for (const [key, w] of wrapped) {
      expect(w.script, key).toMatch(/\b900\b/);
      expect(defaults.get(key)!.script, key).not.toMatch(/\b900\b/);
    }
  });

  it('--show-only works with the plugin', () => {
    const out = helmOk(4, ['template', 'zoo', CHART, '--post-renderer', 'vram-preflight', '--show-only', 'templates/vllm-statefulset.yaml'], env);
    const docs = splitHelmOutput(out);
    expect(docs.map((d) => d.source)).toEqual([`${CHART_NAME}/templates/vllm-statefulset.yaml`]);
    expect(unwrap(podContainers(parseK8s(docs[0]!.text))[0]!).start).toContain('--gpu-memory-utilization=0.85');
  });
});

describe('helm 4 install --dry-run', () => {
  for (const flag of ['--dry-run', '--dry-run=client']) {
    it(`${flag} needs no cluster and post-renders manifests and hooks`, () => {
      const out = helmOk(4, ['install', 'zoo', CHART, flag, '--post-renderer', 'vram-preflight'], env);
      const hooksAt = out.indexOf('\nHOOKS:\n');
      const manifestAt = out.indexOf('\nMANIFEST:\n');
      expect(hooksAt).toBeGreaterThan(0);
      expect(manifestAt).toBeGreaterThan(hooksAt);
      const manifest = bySource(splitHelmOutput(out.slice(manifestAt + 11)));
      const expected = bySource(splitHelmOutput(rendered));
      for (const [source, doc] of manifest) expect(doc.text.trimEnd(), source).toBe(expected.get(source)!.text.trimEnd());
      const hooks = bySource(splitHelmOutput(out.slice(hooksAt + 8, manifestAt)));
      expect([...hooks.keys()]).toEqual([`${CHART_NAME}/templates/hook-job.yaml`]);
    });
  }
});

describe('helm 4 failures', () => {
  it('an invalid option: non-zero exit, no manifests, and Helm shows the reason', () => {
    const r = helm(4, ['template', 'zoo', CHART, '--post-renderer', 'vram-preflight', '--post-renderer-args=--timeout-seconds=soon'], env);
    expect(r.status).not.toBe(0);
    expect(r.stdout).toBe('');
    expect(r.stderr).toMatch(/# vram-preflight: error BAD_OPTION: .*timeout-seconds/);
  });

  it('the diagnostics file (--diagnostics-file via --post-renderer-args) has the reason', () => {
    const file = path.join(tempDir('diag'), 'diag.log');
    const r = helm(
      4,
      ['template', 'zoo', CHART, '--post-renderer', 'vram-preflight', '--post-renderer-args=--timeout-seconds=soon', `--post-renderer-args=--diagnostics-file=${file}`],
      env,
    );
    expect(r.status).not.toBe(0);
    expect(r.stdout).toBe('');
    expect(readFileSync(file, 'utf8')).toMatch(/BAD_OPTION[\s\S]*timeout-seconds/);
  });

  it('an unknown vLLM image: the diagnostics file (VRAM_PREFLIGHT_DIAGNOSTICS_FILE in helm\'s environment) has the reason', () => {
    const file = path.join(tempDir('diag'), 'diag.log');
    const r = helm(4, ['template', 'zoo', CHART, '--post-renderer', 'vram-preflight', '--set', 'unknownImage.enabled=true'], {
      ...env,
      VRAM_PREFLIGHT_DIAGNOSTICS_FILE: file,
    });
    expect(r.status).not.toBe(0);
    expect(r.stdout).toBe('');
    expect(r.stderr).toMatch(/# vram-preflight: error UNKNOWN_START: .*vllm\/vllm-openai:nightly/);
    const diag = readFileSync(file, 'utf8');
    expect(diag).toContain('UNKNOWN_START');
    expect(diag).toContain('vllm/vllm-openai:nightly');
  });
});
