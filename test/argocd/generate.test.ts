/**
 * The CMP's init + generate scripts, run as argocd-cmp-server runs them, with
 * the real helm v3 and v4 and the real vram-preflight bundle.
 */
import { chmodSync, existsSync, mkdirSync, symlinkSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { PREFLIGHT_MARKER_PREFIX } from '../../src/core/preflight/script.js';
import { ensureHelm, ensureTool, HELMS, type HelmMajor, Sandbox, splitDocuments } from './harness.js';

type Container = { name: string; image: string; command?: string[]; args?: string[] };
type Doc = { kind?: string; metadata?: { name?: string }; data?: Record<string, string>; spec?: { template?: { spec?: { containers?: Container[] } } } };

const isVllm = (c: Container) => c.image.startsWith('vllm/vllm-openai');
const containersOf = (d: Doc | null) => d?.spec?.template?.spec?.containers ?? [];

/**
 * Document by document: every document without a vLLM container is
 * byte-identical to plain `helm template`; in the others, each vLLM container
 * runs the preflight and then its original start, and nothing else changed.
 * Returns the number of wrapped containers.
 */
function expectHelmPlusPreflight(actual: string, expected: string): number {
  const got = splitDocuments(actual);
  const want = splitDocuments(expected);
  expect(got.length).toBe(want.length);
  let wrapped = 0;
  want.forEach((w, i) => {
    const g = got[i]!;
    const wantDoc = parseYaml(w) as Doc;
    if (!containersOf(wantDoc).some(isVllm)) {
      expect(g).toBe(w);
      return;
    }
    expect(g.split('\n')[0]).toBe(w.split('\n')[0]); // the `# Source:` line
    const gotDoc = parseYaml(g) as Doc;
    const gc = containersOf(gotDoc);
    containersOf(wantDoc).forEach((wc, j) => {
      if (!isVllm(wc)) return;
      const c = gc[j]!;
      expect(c.name).toBe(wc.name);
      expect(c.command).toEqual(['/bin/sh', '-ec']);
      expect(c.args![0]!.startsWith(PREFLIGHT_MARKER_PREFIX)).toBe(true);
      expect(c.args![1]).toBe('--');
      expect(c.args!.slice(2)).toEqual([...(wc.command ?? []), ...(wc.args ?? [])]);
      delete c.command;
      delete c.args;
      delete wc.command;
      delete wc.args;
      wrapped++;
    });
    expect(gotDoc).toEqual(wantDoc);
  });
  return wrapped;
}

const byName = (stream: string, kind: string, name: string): Doc => {
  const d = splitDocuments(stream)
    .map((t) => parseYaml(t) as Doc)
    .find((x) => x?.kind === kind && x.metadata?.name === name);
  if (!d) throw new Error(`no ${kind}/${name} in output`);
  return d;
};
const preflightScript = (stream: string, deployment: string) =>
  containersOf(byName(stream, 'Deployment', deployment)).find(isVllm)!.args![0]!;

let tool = '';
beforeAll(() => {
  ensureHelm();
  tool = ensureTool();
}, 300_000);

describe.each(Object.keys(HELMS) as HelmMajor[])('CMP generate with helm %s', (helm) => {
  const box = new Sandbox();
  afterAll(() => box.dispose());

  it('wraps the vLLM container and leaves every other document exactly as helm template renders it', () => {
    const r = box.run('generate', helm, tool, { appName: 'demo', namespace: 'ml', sourcePath: 'vllm-app' });
    expect(r.stderr).not.toMatch(/vram-preflight-cmp:/);
    expect(r.status).toBe(0);
    const plain = box.helmTemplate(helm, 'vllm-app', ['--name-template=demo', '--namespace=ml', '--include-crds']);
    expect(expectHelmPlusPreflight(r.stdout, plain)).toBe(1);
    // Release name and namespace come from the Application; CRDs are included, as Argo CD's Helm does.
    expect(byName(r.stdout, 'ConfigMap', 'demo-settings').data).toMatchObject({ release: 'demo', namespace: 'ml' });
    expect(r.stdout).toContain('kind: CustomResourceDefinition');
  });

  it('applies values files, inline values, release name and namespace from the parameters', () => {
    const req = {
      sourcePath: 'vllm-app',
      parameters: [
        { name: 'values-files', array: ['values-prod.yaml'] },
        { name: 'values', string: 'greeting: hello from inline values\n' },
        { name: 'release-name', string: 'qwen' },
        { name: 'namespace', string: 'serving' },
      ],
    };
    const r = box.run('generate', helm, tool, req);
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    const inline = path.join(box.dir, 'inline.yaml');
    writeFileSync(inline, 'greeting: hello from inline values\n');
    const plain = box.helmTemplate(helm, 'vllm-app', [
      '--name-template=qwen',
      '--namespace=serving',
      '--values=values-prod.yaml',
      `--values=${inline}`,
      '--include-crds',
    ]);
    expectHelmPlusPreflight(r.stdout, plain);
    expect(byName(r.stdout, 'ConfigMap', 'qwen-settings').data).toMatchObject({
      greeting: 'hello from inline values', // inline values win over values files
      release: 'qwen',
      namespace: 'serving',
    });
    expect(r.stdout).toMatch(/name: qwen-web\n {2}namespace: serving\nspec:\n {2}replicas: 3\n/); // from values-prod.yaml
    // The threshold follows the rendered --gpu-memory-utilization (0.7 in values-prod.yaml).
    expect(preflightScript(r.stdout, 'qwen-vllm')).toContain('0.7');
  });

  it('passes KUBE_VERSION and every KUBE_API_VERSIONS entry to helm', () => {
    const req = {
      sourcePath: 'vllm-app',
      kubeVersion: '1.31.2',
      apiVersions: ['apps/v1', 'monitoring.coreos.com/v1', 'monitoring.coreos.com/v1/ServiceMonitor', 'example.com/v1'],
    };
    const r = box.run('generate', helm, tool, req);
    expect(r.status).toBe(0);
    expect(byName(r.stdout, 'ConfigMap', 'demo-capabilities').data).toEqual({
      kubeVersion: 'v1.31.2',
      hasServiceMonitor: 'true',
      hasWidgetGroup: 'true',
    });
    const plain = box.helmTemplate(helm, 'vllm-app', [
      '--name-template=demo',
      '--namespace=ml',
      '--kube-version=1.31.2',
      ...req.apiVersions.map((v) => `--api-versions=${v}`),
      '--include-crds',
    ]);
    expectHelmPlusPreflight(r.stdout, plain);

    const none = box.run('generate', helm, tool, { sourcePath: 'vllm-app' });
    expect(byName(none.stdout, 'ConfigMap', 'demo-capabilities').data).toMatchObject({
      hasServiceMonitor: 'false',
      hasWidgetGroup: 'false',
    });
  });

  it('hands tool options from plugin env and the preflight-options parameter to vram-preflight', () => {
    const base = preflightScript(box.run('generate', helm, tool, { sourcePath: 'vllm-app' }).stdout, 'demo-vllm');
    expect(base).not.toContain('1234');

    const fromEnv = box.run('generate', helm, tool, {
      sourcePath: 'vllm-app',
      pluginEnv: { VRAM_PREFLIGHT_TIMEOUT_SECONDS: '1234' },
    });
    expect(fromEnv.status).toBe(0);
    expect(preflightScript(fromEnv.stdout, 'demo-vllm')).toContain('1234');

    // The parameter wins over plugin env, which wins over the sidecar's own environment.
    const fromParam = box.run(
      'generate',
      helm,
      tool,
      {
        sourcePath: 'vllm-app',
        pluginEnv: { VRAM_PREFLIGHT_TIMEOUT_SECONDS: '1234' },
        parameters: [{ name: 'preflight-options', map: { 'timeout-seconds': '4321' } }],
      },
      { VRAM_PREFLIGHT_TIMEOUT_SECONDS: '999' },
    );
    expect(fromParam.status).toBe(0);
    const script = preflightScript(fromParam.stdout, 'demo-vllm');
    expect(script).toContain('4321');
    expect(script).not.toContain('1234');

    const sidecarDefault = box.run('generate', helm, tool, { sourcePath: 'vllm-app' }, { VRAM_PREFLIGHT_TIMEOUT_SECONDS: '2345' });
    expect(preflightScript(sidecarDefault.stdout, 'demo-vllm')).toContain('2345');
  });

  it('skip-crds leaves the chart CRDs out', () => {
    const r = box.run('generate', helm, tool, {
      sourcePath: 'vllm-app',
      parameters: [{ name: 'skip-crds', string: 'true' }],
    });
    expect(r.status).toBe(0);
    expect(r.stdout).not.toContain('CustomResourceDefinition');
    expectHelmPlusPreflight(r.stdout, box.helmTemplate(helm, 'vllm-app', ['--name-template=demo', '--namespace=ml']));
  });

  it('init builds a file:// dependency, then generate renders the umbrella chart', () => {
    expect(existsSync(box.source('umbrella/charts'))).toBe(false);
    const init = box.run('init', helm, tool, { sourcePath: 'umbrella' });
    expect(init.status, init.stderr).toBe(0);
    expect(init.stdout).toBe('');
    expect(existsSync(box.source('umbrella/charts/vllm-app-0.1.0.tgz'))).toBe(true);

    const r = box.run('generate', helm, tool, { sourcePath: 'umbrella' });
    expect(r.status, r.stderr).toBe(0);
    expect(expectHelmPlusPreflight(r.stdout, box.helmTemplate(helm, 'umbrella', ['--name-template=demo', '--namespace=ml', '--include-crds']))).toBe(1);
    expect(byName(r.stdout, 'ConfigMap', 'demo-umbrella').data).toEqual({ subchartGreeting: 'hello from the umbrella' });

    // charts/ present: init leaves it alone (vendored dependencies).
    const again = box.run('init', helm, '/bin/false', { sourcePath: 'umbrella' }, { HELM_BIN: '/bin/false' });
    expect(again.status).toBe(0);
  });

  it('init does nothing for a chart without dependencies', () => {
    const r = box.run('init', helm, tool, { sourcePath: 'vllm-app' }, { HELM_BIN: '/bin/false' });
    expect(r.status).toBe(0);
  });

  describe('failures exit non-zero with nothing on stdout', () => {
    const fails = (r: { status: number | null; stdout: string; stderr: string }, message: RegExp) => {
      expect(r.stdout).toBe('');
      expect(r.status).not.toBe(0);
      expect(r.stderr).toMatch(message);
    };

    it('a values file that does not exist', () => {
      fails(
        box.run('generate', helm, tool, { sourcePath: 'vllm-app', parameters: [{ name: 'values-files', array: ['values-missing.yaml'] }] }),
        /values file "values-missing.yaml": no such file/,
      );
    });

    it('a values file that is not YAML', () => {
      writeFileSync(box.source('vllm-app/values-bad.yaml'), 'greeting: [unclosed\n');
      fails(
        box.run('generate', helm, tool, { sourcePath: 'vllm-app', parameters: [{ name: 'values-files', array: ['values-bad.yaml'] }] }),
        /helm template failed/,
      );
    });

    it('values files outside the source path: .., absolute, symbolic link, URL', () => {
      for (const f of ['../umbrella/values.yaml', 'templates/../../umbrella/values.yaml', '/etc/passwd', 'https://example.com/v.yaml']) {
        fails(
          box.run('generate', helm, tool, { sourcePath: 'vllm-app', parameters: [{ name: 'values-files', array: [f] }] }),
          /leaves the source path|absolute paths are not allowed|remote files are not supported/,
        );
      }
      symlinkSync('../umbrella/values.yaml', box.source('vllm-app/values-link.yaml'));
      fails(
        box.run('generate', helm, tool, { sourcePath: 'vllm-app', parameters: [{ name: 'values-files', array: ['values-link.yaml'] }] }),
        /outside the source path/,
      );
      fails(
        box.run('generate', helm, tool, { sourcePath: 'vllm-app', pluginEnv: { VRAM_PREFLIGHT_CONFIG: '../umbrella/values.yaml' } }),
        /leaves the source path/,
      );
    });

    it('a broken chart', () => {
      mkdirSync(box.source('broken/templates'), { recursive: true });
      writeFileSync(box.source('broken/Chart.yaml'), 'apiVersion: v2\nname: broken\nversion: 0.1.0\n');
      writeFileSync(box.source('broken/templates/cm.yaml'), 'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name | nosuchfunction }}\n');
      fails(box.run('generate', helm, tool, { sourcePath: 'broken' }), /nosuchfunction[\s\S]*helm template failed/);
    });

    it('a source path that is not a chart', () => {
      mkdirSync(box.source('plain'), { recursive: true });
      writeFileSync(box.source('plain/cm.yaml'), 'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n');
      fails(box.run('generate', helm, tool, { sourcePath: 'plain' }), /no Chart.yaml/);
    });

    it('a bad tool option (refused by vram-preflight)', () => {
      fails(
        box.run('generate', helm, tool, { sourcePath: 'vllm-app', parameters: [{ name: 'preflight-options', map: { 'timeout-seconds': 'soon' } }] }),
        /vram-preflight failed/,
      );
    });

    it('an unknown tool option, plugin env or parameter (refused by the plugin)', () => {
      fails(
        box.run('generate', helm, tool, { sourcePath: 'vllm-app', parameters: [{ name: 'preflight-options', map: { 'diagnostics-file': '/tmp/x' } }] }),
        /unknown key "diagnostics-file"/,
      );
      fails(
        box.run('generate', helm, tool, { sourcePath: 'vllm-app', pluginEnv: { VRAM_PREFLIGHT_TIMEOUT: '5' } }),
        /VRAM_PREFLIGHT_TIMEOUT is not an option/,
      );
      fails(
        box.run('generate', helm, tool, { sourcePath: 'vllm-app', parameters: [{ name: 'valueFiles', array: ['values.yaml'] }] }),
        /unknown parameter "valueFiles"/,
      );
      fails(
        box.run('generate', helm, tool, { sourcePath: 'vllm-app', parameters: [{ name: 'values-files', string: 'values.yaml' }] }),
        /takes an array/,
      );
    });

    it('an invalid release name', () => {
      fails(box.run('generate', helm, tool, { sourcePath: 'vllm-app', appName: 'Not_A_Release' }), /not a valid Helm release name/);
      fails(
        box.run('generate', helm, tool, { sourcePath: 'vllm-app', parameters: [{ name: 'release-name', string: '--dry-run=server' }] }),
        /not a valid Helm release name/,
      );
    });

    it('an empty render', () => {
      fails(
        box.run('generate', helm, tool, {
          sourcePath: 'vllm-app',
          parameters: [
            { name: 'values', string: 'enabled: false\n' },
            { name: 'skip-crds', string: 'true' },
          ],
        }),
        /rendered no manifests/,
      );
    });

    it('a post-renderer that fails after printing part of its output', () => {
      const partial = path.join(box.dir, 'partial-tool');
      writeFileSync(partial, '#!/bin/sh\nhead -c 200\necho "boom" >&2\nexit 3\n');
      chmodSync(partial, 0o755);
      fails(box.run('generate', helm, partial, { sourcePath: 'vllm-app' }), /boom[\s\S]*vram-preflight failed/);
    });

    it('a helm that fails after printing part of its output', () => {
      const partial = path.join(box.dir, 'partial-helm');
      writeFileSync(partial, `#!/bin/sh\n"${HELMS[helm]}" "$@" | head -c 300\necho "helm exploded" >&2\nexit 1\n`);
      chmodSync(partial, 0o755);
      fails(box.run('generate', helm, tool, { sourcePath: 'vllm-app' }, { HELM_BIN: partial }), /helm exploded[\s\S]*helm template failed/);
    });

    it('init with a dependency that cannot be fetched', () => {
      mkdirSync(box.source('lonely/templates'), { recursive: true });
      writeFileSync(
        box.source('lonely/Chart.yaml'),
        'apiVersion: v2\nname: lonely\nversion: 0.1.0\ndependencies:\n  - name: missing\n    version: 0.1.0\n    repository: file://../does-not-exist\n',
      );
      fails(box.run('init', helm, tool, { sourcePath: 'lonely' }), /helm dependency build failed/);
    });
  });
});
