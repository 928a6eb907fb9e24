/**
 * Static checks of what Argo CD reads: deploy/argocd/plugin.yaml against the
 * fields of argo-cd's PluginConfig (cmpserver/plugin/config.go) and
 * ParameterAnnouncement, the ConfigMap that carries it, the repo-server
 * sidecar patch, and the Dockerfile that lays out the files the commands name.
 *
 * Argo CD parses plugin.yaml non-strictly: a misspelt key is silently ignored
 * there, so this test is where a typo gets caught.
 */
import { spawnSync } from 'node:child_process';
import { accessSync, constants, existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { DEPLOY, IMAGE_CMP_DIR, localArgv, ROOT } from './harness.js';

const read = (f: string) => readFileSync(path.join(DEPLOY, f), 'utf8');
const pkg = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { version: string };

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => v !== null && typeof v === 'object' && !Array.isArray(v);
const isStrings = (v: unknown) => Array.isArray(v) && v.every((x) => typeof x === 'string');

/** Keys argo-cd's PluginConfig / PluginConfigSpec / Command / Discover / Find / Parameters / ParameterAnnouncement know. */
const KNOWN = {
  top: ['apiVersion', 'kind', 'metadata', 'spec'],
  metadata: ['name', 'namespace', 'labels', 'annotations'],
  spec: ['version', 'init', 'generate', 'discover', 'parameters', 'preserveFileMode', 'provideGitCreds'],
  command: ['command', 'args'],
  discover: ['find', 'fileName'],
  find: ['command', 'args', 'glob'],
  parameters: ['static', 'dynamic'],
  announcement: ['name', 'title', 'tooltip', 'required', 'itemType', 'collectionType', 'string', 'array', 'map'],
};
const expectKnownKeys = (o: Obj, known: string[], where: string) => {
  const unknown = Object.keys(o).filter((k) => !known.includes(k));
  expect(unknown, `unknown keys in ${where}`).toEqual([]);
};
const expectCommand = (c: unknown, where: string, required: boolean) => {
  expect(isObj(c), where).toBe(true);
  expectKnownKeys(c as Obj, KNOWN.command, where);
  const { command, args } = c as Obj;
  expect(isStrings(command ?? []), `${where}.command`).toBe(true);
  expect(isStrings(args ?? []), `${where}.args`).toBe(true);
  if (required) expect((command as string[]).length, `${where}.command`).toBeGreaterThan(0);
};

describe('deploy/argocd/plugin.yaml', () => {
  const cfg = parseYaml(read('plugin.yaml')) as Obj;
  const spec = cfg.spec as Obj;

  it('has the fields argocd-cmp-server requires, of the right types, and no unknown keys', () => {
    expectKnownKeys(cfg, KNOWN.top, 'plugin.yaml');
    expect(cfg.apiVersion).toBe('argoproj.io/v1alpha1');
    expect(cfg.kind).toBe('ConfigManagementPlugin');
    expect(isObj(cfg.metadata)).toBe(true);
    expectKnownKeys(cfg.metadata as Obj, KNOWN.metadata, 'metadata');
    expect((cfg.metadata as Obj).name).toBe('vram-preflight');
    expect(isObj(spec)).toBe(true);
    expectKnownKeys(spec, KNOWN.spec, 'spec');
    expectCommand(spec.generate, 'spec.generate', true);
    expectCommand(spec.init, 'spec.init', true);
    for (const b of ['preserveFileMode', 'provideGitCreds']) {
      if (b in spec) expect(typeof spec[b], `spec.${b}`).toBe('boolean');
    }
    // Least privilege: neither repository file modes nor git credentials.
    expect(spec.preserveFileMode ?? false).toBe(false);
    expect(spec.provideGitCreds ?? false).toBe(false);
  });

  it('is selected by name only (no discovery rules that would capture every Helm Application)', () => {
    expect(spec.discover).toBeUndefined();
  });

  it('spec.version is the package version, so Applications name it vram-preflight-v<version>', () => {
    expect(typeof spec.version).toBe('string');
    expect(spec.version).toBe(`v${pkg.version}`);
    const pluginName = `${(cfg.metadata as Obj).name}-${spec.version}`;
    expect(pluginName).toBe(`vram-preflight-v${pkg.version}`);
    expect(readFileSync(path.join(ROOT, 'docs/argocd.md'), 'utf8')).toContain(`name: ${pluginName}`);
  });

  it('announces well-formed static parameters', () => {
    const params = spec.parameters as Obj;
    expect(isObj(params)).toBe(true);
    expectKnownKeys(params, KNOWN.parameters, 'spec.parameters');
    const list = params.static as unknown[];
    expect(Array.isArray(list)).toBe(true);
    const names = new Set<string>();
    for (const a of list) {
      expect(isObj(a)).toBe(true);
      const p = a as Obj;
      expectKnownKeys(p, KNOWN.announcement, `parameter ${String(p.name)}`);
      expect(typeof p.name).toBe('string');
      expect(names.has(p.name as string), `duplicate ${String(p.name)}`).toBe(false);
      names.add(p.name as string);
      for (const s of ['title', 'tooltip', 'itemType', 'string'] as const) {
        if (s in p) expect(typeof p[s], `${String(p.name)}.${s}`).toBe('string');
      }
      if ('required' in p) expect(typeof p.required).toBe('boolean');
      const type = (p.collectionType as string | undefined) ?? 'string';
      expect(['string', 'array', 'map']).toContain(type);
      if ('array' in p) expect(type === 'array' && isStrings(p.array)).toBe(true);
      if ('map' in p) expect(type === 'map' && isObj(p.map)).toBe(true);
      if ('string' in p) expect(type).toBe('string');
    }
    expect([...names].sort()).toEqual(
      ['namespace', 'preflight-options', 'release-name', 'skip-crds', 'skip-schema-validation', 'skip-tests', 'values', 'values-files'],
    );
  });

  it('every announced parameter is accepted by the generate step, with its announced default', () => {
    const list = (spec.parameters as Obj).static as Obj[];
    const sample: Record<string, unknown> = {
      'values-files': { array: ['values.yaml'] },
      values: { string: 'a: 1\n' },
      'release-name': { string: 'r' },
      namespace: { string: 'n' },
      'preflight-options': { map: { 'timeout-seconds': '60', 'container-names': 'vllm*', config: 'values.yaml' } },
    };
    const parameters = list.map((p) => ({
      name: p.name,
      ...((sample[p.name as string] as Obj) ?? { string: p.string }),
    }));
    const work = mkdtempSync(path.join(tmpdir(), 'vram-preflight-params-'));
    const r = spawnSync(process.execPath, [path.join(DEPLOY, 'params.cjs'), work], {
      cwd: path.join(ROOT, 'test/argocd/charts/vllm-app'),
      env: { PATH: process.env.PATH, ARGOCD_APP_PARAMETERS: JSON.stringify(parameters) },
      encoding: 'utf8',
    });
    rmSync(work, { recursive: true, force: true });
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    expect(r.stdout.split('\0')).toContain('values-file');
  });

  it('takes no parameters as Argo CD sends them (absent, null, empty list)', () => {
    for (const raw of [undefined, 'null', '[]', '']) {
      const work = mkdtempSync(path.join(tmpdir(), 'vram-preflight-params-'));
      const env: Record<string, string> = { PATH: process.env.PATH ?? '' };
      if (raw !== undefined) env.ARGOCD_APP_PARAMETERS = raw;
      const r = spawnSync(process.execPath, [path.join(DEPLOY, 'params.cjs'), work], { env, encoding: 'utf8' });
      rmSync(work, { recursive: true, force: true });
      expect(r.stderr).toBe('');
      expect(r.status).toBe(0);
      expect(r.stdout).toBe('');
    }
  });

  it('the tool options it passes on are options vram-preflight reads from its environment', () => {
    const configTs = readFileSync(path.join(ROOT, 'src/config/sources.ts'), 'utf8');
    const toolEnv = new Set([...configTs.matchAll(/\benv: '(VRAM_PREFLIGHT_[A-Z_]+)'/g)].map((m) => m[1]));
    const configEnv = /CONFIG_ENV = '(VRAM_PREFLIGHT_[A-Z_]+)'/.exec(configTs)?.[1];
    if (configEnv) toolEnv.add(configEnv);
    const params = read('params.cjs');
    const list = /const TOOL_OPTIONS = \[([\s\S]*?)\];/.exec(params)![1]!;
    const keys = [...list.matchAll(/'([a-z-]+)'/g)].map((m) => m[1]!);
    expect(keys.length).toBeGreaterThan(5);
    for (const k of keys) {
      expect(toolEnv, `option ${k}`).toContain(`VRAM_PREFLIGHT_${k.toUpperCase().replace(/-/g, '_')}`);
    }
    // Everything the tool reads from its environment is offered, except paths of the sidecar itself
    // and the webhook's registry allow-list (a render is not a server anyone can aim).
    const offered = new Set(keys.map((k) => `VRAM_PREFLIGHT_${k.toUpperCase().replace(/-/g, '_')}`));
    expect([...toolEnv].filter((e) => !offered.has(e!)).sort()).toEqual(['VRAM_PREFLIGHT_CACHE_DIR', 'VRAM_PREFLIGHT_DIAGNOSTICS_FILE', 'VRAM_PREFLIGHT_REGISTRY_ALLOW', 'VRAM_PREFLIGHT_REGISTRY_CA_FILE', 'VRAM_PREFLIGHT_REPORT_FILE']);
  });

  it('its commands are the scripts in deploy/argocd, executable, and the Dockerfile puts them where the commands say', () => {
    const dockerfile = read('Dockerfile');
    for (const step of ['init', 'generate'] as const) {
      const cmd = spec[step] as { command: string[] };
      expect(cmd.command[0]!.startsWith(IMAGE_CMP_DIR)).toBe(true);
      const local = localArgv(cmd)[0]!;
      expect(existsSync(local), local).toBe(true);
      accessSync(local, constants.X_OK);
      expect(dockerfile).toContain(`deploy/argocd/${path.basename(local)}`);
    }
    expect(dockerfile).toMatch(new RegExp(`deploy/argocd/params\\.cjs ${IMAGE_CMP_DIR.replace(/\//g, '\\/')}`));
  });
});

describe('deploy/argocd/cmp-plugin-configmap.yaml', () => {
  it('is a ConfigMap whose plugin.yaml is deploy/argocd/plugin.yaml, byte for byte', () => {
    const cm = parseYaml(read('cmp-plugin-configmap.yaml')) as Obj;
    expect(cm.apiVersion).toBe('v1');
    expect(cm.kind).toBe('ConfigMap');
    expect((cm.metadata as Obj).name).toBe('vram-preflight-cmp-plugin');
    expect(Object.keys(cm.data as Obj)).toEqual(['plugin.yaml']);
    expect((cm.data as Obj)['plugin.yaml']).toBe(read('plugin.yaml'));
  });
});

describe('deploy/argocd/repo-server-patch.yaml', () => {
  const patch = parseYaml(read('repo-server-patch.yaml')) as Obj;
  const pod = ((patch.spec as Obj).template as Obj).spec as Obj;
  const containers = pod.containers as Obj[];
  const volumes = pod.volumes as Obj[];
  const sidecar = containers[0]!;
  const mounts = sidecar.volumeMounts as Obj[];
  const mountAt = (p: string) => mounts.find((m) => m.mountPath === p);

  it('patches the argocd-repo-server Deployment with exactly one sidecar', () => {
    expect(patch.apiVersion).toBe('apps/v1');
    expect(patch.kind).toBe('Deployment');
    expect((patch.metadata as Obj).name).toBe('argocd-repo-server');
    expect(containers).toHaveLength(1);
    expect(typeof sidecar.name).toBe('string');
    expect(sidecar.name).not.toBe('argocd-repo-server'); // a merge into the main container would break it
    expect(typeof sidecar.image).toBe('string');
  });

  it('runs argocd-cmp-server as user 999, non-root', () => {
    expect(sidecar.command).toEqual(['/var/run/argocd/argocd-cmp-server']);
    const sc = sidecar.securityContext as Obj;
    expect(sc.runAsNonRoot).toBe(true);
    expect(sc.runAsUser).toBe(999);
    expect(sc.allowPrivilegeEscalation).toBe(false);
  });

  it('mounts var-files, plugins, the plugin config (subPath) and its own /tmp', () => {
    expect(mountAt('/var/run/argocd')?.name).toBe('var-files');
    expect(mountAt('/home/argocd/cmp-server/plugins')?.name).toBe('plugins');
    const cfg = mountAt('/home/argocd/cmp-server/config/plugin.yaml')!;
    expect(cfg.subPath).toBe('plugin.yaml');
    const cfgVolume = volumes.find((v) => v.name === cfg.name)!;
    const cm = parseYaml(read('cmp-plugin-configmap.yaml')) as Obj;
    expect((cfgVolume.configMap as Obj).name).toBe((cm.metadata as Obj).name);
    expect(Object.keys(cm.data as Obj)).toContain(cfg.subPath);
    const tmp = mountAt('/tmp')!;
    expect(tmp.name).not.toBe('tmp'); // not the repo-server's own tmp volume
    expect(volumes.find((v) => v.name === tmp.name)?.emptyDir).toEqual({});
    // Volumes the stock repo-server already has are not redefined here.
    expect(volumes.map((v) => v.name)).not.toContain('var-files');
    expect(volumes.map((v) => v.name)).not.toContain('plugins');
  });

  it('only uses known container fields and env names the tool reads', () => {
    const known = ['name', 'image', 'imagePullPolicy', 'command', 'args', 'env', 'securityContext', 'resources', 'volumeMounts'];
    expectKnownKeys(sidecar, known, 'sidecar');
    for (const e of (sidecar.env as Obj[]) ?? []) expect(String(e.name)).toMatch(/^(VRAM_PREFLIGHT_|ARGOCD_EXEC_)/);
  });
});

describe('deploy/argocd/Dockerfile', () => {
  const dockerfile = read('Dockerfile');

  it('pins node 20 slim and a checksum-verified helm', () => {
    const from = /^ARG NODE_IMAGE=(\S+)$/m.exec(dockerfile)?.[1];
    expect(from).toMatch(/^node:20\.\d+\.\d+-[a-z]+-slim(@sha256:[0-9a-f]{64})?$/);
    expect(dockerfile).toMatch(/^ARG HELM_VERSION=v\d+\.\d+\.\d+$/m);
    expect(dockerfile).toMatch(/^ARG HELM_SHA256=[0-9a-f]{64}$/m);
    expect(dockerfile).not.toMatch(/:latest\b/);
  });

  it('runs as user 999 and installs the bundle as vram-preflight on PATH', () => {
    expect(dockerfile).toMatch(/^USER 999$/m);
    expect(dockerfile).toContain('ln -s /opt/vram-preflight/vram-preflight.cjs /usr/local/bin/vram-preflight');
    expect(dockerfile).toContain('COPY --from=bundle /src/dist/vram-preflight.cjs /opt/vram-preflight/vram-preflight.cjs');
    expect(dockerfile).toContain('COPY --from=bundle /src/dist/vram-preflight.app.js /opt/vram-preflight/vram-preflight.app.js');
  });
});
