/**
 * Runs the vram-preflight CMP scripts the way argocd-cmp-server does: the
 * command from deploy/argocd/plugin.yaml, cwd = the Application's source path
 * (in a throwaway copy of a "repository"), env = the sidecar's environment plus
 * what Argo CD adds for the request (build env, ARGOCD_ENV_*, parameters).
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse as parseYaml } from 'yaml';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const DEPLOY = path.join(ROOT, 'deploy/argocd');
export const CHARTS = path.join(ROOT, 'test/argocd/charts');
export const HELMS = {
  v3: path.join(ROOT, '.cache/helm/v3/helm'),
  v4: path.join(ROOT, '.cache/helm/v4/helm'),
} as const;
export type HelmMajor = keyof typeof HELMS;

/** Where the Dockerfile puts the CMP scripts; plugin.yaml's commands point there. */
export const IMAGE_CMP_DIR = '/opt/vram-preflight/cmp/';

/** Puts the real helm binaries in .cache/helm (downloads them when missing). */
export function ensureHelm(): void {
  if (Object.values(HELMS).every((p) => existsSync(p))) return;
  execFileSync('bash', [path.join(ROOT, 'scripts/fetch-helm.sh')], { stdio: ['ignore', 'inherit', 'inherit'] });
  for (const p of Object.values(HELMS)) {
    if (!existsSync(p)) throw new Error(`fetch-helm did not produce ${p}`);
  }
}

/**
 * The bundled CLI (dist/vram-preflight.cjs), built from source when missing or
 * older than src/. Fails loudly if the CLI entry point does not exist.
 */
export function ensureTool(): string {
  const bundle = path.join(ROOT, 'dist/vram-preflight.cjs');
  const entry = path.join(ROOT, 'src/cli/bin.ts');
  if (!existsSync(entry)) {
    if (existsSync(bundle)) return bundle;
    throw new Error('neither src/cli/bin.ts nor dist/vram-preflight.cjs exists: the CLI is needed for the Argo CD plugin tests');
  }
  const newestSource = Math.max(
    ...readdirSync(path.join(ROOT, 'src')).map((f) => statSync(path.join(ROOT, 'src', f)).mtimeMs),
  );
  const app = path.join(ROOT, 'dist/vram-preflight.app.js');
  if (!existsSync(bundle) || !existsSync(app) || statSync(bundle).mtimeMs < newestSource) {
    execFileSync(process.execPath, [path.join(ROOT, 'scripts/build.mjs')], { cwd: ROOT, stdio: ['ignore', 'ignore', 'inherit'] });
  }
  return bundle;
}

export interface PluginCommand {
  command: string[];
  args?: string[];
}

export function pluginConfig(): { spec: { init: PluginCommand; generate: PluginCommand } } {
  return parseYaml(readFileSync(path.join(DEPLOY, 'plugin.yaml'), 'utf8'));
}

/** plugin.yaml's command with the image's script directory mapped to deploy/argocd. */
export function localArgv(cmd: PluginCommand): string[] {
  return [...cmd.command, ...(cmd.args ?? [])].map((a) =>
    a.startsWith(IMAGE_CMP_DIR) ? path.join(DEPLOY, a.slice(IMAGE_CMP_DIR.length)) : a,
  );
}

export type Parameter =
  | { name: string; string: string }
  | { name: string; array: string[] }
  | { name: string; map: Record<string, string> };

export interface AppRequest {
  appName?: string;
  namespace?: string;
  sourcePath: string;
  kubeVersion?: string;
  apiVersions?: string[];
  parameters?: Parameter[];
  /** spec.source.plugin.env (Argo CD prefixes the names with ARGOCD_ENV_). */
  pluginEnv?: Record<string, string>;
}

/** Argo CD's escaping of parameter names for PARAM_* variables. */
const escaped = (name: string) => name.toUpperCase().replace(/[^A-Z0-9_]/g, '_');

export class Sandbox {
  readonly dir = mkdtempSync(path.join(tmpdir(), 'vram-preflight-argocd-'));
  readonly repo = path.join(this.dir, 'repo');
  readonly home = path.join(this.dir, 'home');

  constructor() {
    cpSync(CHARTS, this.repo, { recursive: true });
    mkdirSync(this.home);
  }

  source(rel: string): string {
    return path.join(this.repo, rel);
  }

  /** The sidecar's environment: what the Dockerfile sets, plus the binaries under test. */
  sidecarEnv(helm: HelmMajor, tool: string): Record<string, string> {
    return {
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      HOME: this.home,
      TMPDIR: this.dir,
      HELM_CACHE_HOME: path.join(this.home, 'helm/cache'),
      HELM_CONFIG_HOME: path.join(this.home, 'helm/config'),
      HELM_DATA_HOME: path.join(this.home, 'helm/data'),
      HELM_BIN: HELMS[helm],
      VRAM_PREFLIGHT_BIN: tool,
    };
  }

  /** What argocd-cmp-server adds for one manifest request (empty values are dropped, as Argo CD does). */
  requestEnv(req: AppRequest): Record<string, string> {
    const env: Record<string, string> = {
      ARGOCD_APP_NAME: req.appName ?? 'demo',
      ARGOCD_APP_NAMESPACE: req.namespace ?? 'ml',
      ARGOCD_APP_PROJECT_NAME: 'default',
      ARGOCD_APP_REVISION: '0123456789abcdef0123456789abcdef01234567',
      ARGOCD_APP_REVISION_SHORT: '0123456',
      ARGOCD_APP_SOURCE_PATH: req.sourcePath,
      ARGOCD_APP_SOURCE_REPO_URL: 'https://git.example.com/ml/models.git',
      ARGOCD_APP_SOURCE_TARGET_REVISION: 'main',
      KUBE_VERSION: req.kubeVersion ?? '',
      KUBE_API_VERSIONS: (req.apiVersions ?? []).join(','),
    };
    for (const [k, v] of Object.entries(req.pluginEnv ?? {})) env[`ARGOCD_ENV_${k}`] = v;
    if (req.parameters) {
      env.ARGOCD_APP_PARAMETERS = JSON.stringify(req.parameters);
      for (const p of req.parameters) {
        const base = `PARAM_${escaped(p.name)}`;
        if ('string' in p) env[base] = p.string;
        if ('array' in p) p.array.forEach((v, i) => (env[`${base}_${i}`] = v));
        if ('map' in p) for (const [k, v] of Object.entries(p.map)) env[`${base}_${escaped(k)}`] = v;
      }
    }
    return Object.fromEntries(Object.entries(env).filter(([, v]) => v !== ''));
  }

  /** Runs plugin.yaml's init or generate for the request. */
  run(
    step: 'init' | 'generate',
    helm: HelmMajor,
    tool: string,
    req: AppRequest,
    override: Record<string, string> = {},
  ): { status: number | null; stdout: string; stderr: string } {
    const [cmd, ...args] = localArgv(pluginConfig().spec[step]);
    const r = spawnSync(cmd!, args, {
      cwd: this.source(req.sourcePath),
      env: { ...this.sidecarEnv(helm, tool), ...this.requestEnv(req), ...override },
      encoding: 'utf8',
      timeout: 30_000,
    });
    if (r.error) throw r.error;
    return { status: r.status, stdout: r.stdout, stderr: r.stderr };
  }

  /** Plain `helm template` with the given flags, run in the source path: the reference output. */
  helmTemplate(helm: HelmMajor, sourcePath: string, flags: string[]): string {
    return execFileSync(HELMS[helm], ['template', '.', ...flags], {
      cwd: this.source(sourcePath),
      env: this.sidecarEnv(helm, '/bin/false'),
      encoding: 'utf8',
    });
  }

  dispose(): void {
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** Splits a helm-style stream on its `---` lines; keeps each document's text exactly. */
export function splitDocuments(stream: string): string[] {
  return stream
    .split(/^---[ \t]*\r?\n/m)
    .filter((d) => d.trim() !== '');
}
