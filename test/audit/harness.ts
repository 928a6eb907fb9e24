/**
 * The audit's tests run against the real control plane of scripts/cluster.sh
 * (etcd, kube-apiserver, kube-controller-manager; no kubelet, so pods stay
 * Pending, which is all an audit reads), with the real kubectl of the same
 * release, and the bundle built by scripts/build.mjs into a temp dir (never
 * dist/, which other tests and people build into).
 *
 * The cluster may be shared with other test files running at once: every
 * object made here has the run's id in its name, and every audit is told
 * which MutatingWebhookConfiguration to judge by (--webhook-configuration),
 * so that another test's webhook changes nothing here and ours nothing there.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

export const ROOT = path.resolve(import.meta.dirname, '../..');
export const HELM = path.join(ROOT, '.cache/helm/v3/helm');

export interface Cluster {
  kubeconfig: string;
  /** Holds pki/ca.crt, pki/admin.crt|key, audit.log. */
  dir: string;
  bin: string;
  /** https://127.0.0.1:PORT */
  api: string;
  port: string;
}

/** Brings the control plane up (idempotent: a running one is kept) and reads where it is. */
export function cluster(): Cluster {
  const up = spawnSync('bash', [path.join(ROOT, 'scripts/cluster.sh'), 'up'], { encoding: 'utf8', cwd: ROOT });
  if (up.status !== 0) throw new Error(`scripts/cluster.sh up failed:\n${up.stderr}`);
  const env = spawnSync('bash', [path.join(ROOT, 'scripts/cluster.sh'), 'env'], { encoding: 'utf8', cwd: ROOT });
  if (env.status !== 0) throw new Error(`scripts/cluster.sh env failed:\n${env.stderr}`);
  const vars = Object.fromEntries(env.stdout.trim().split('\n').map((line) => [line.slice(0, line.indexOf('=')), line.slice(line.indexOf('=') + 1)]));
  const api = vars.VRAM_PREFLIGHT_CLUSTER_API!;
  return { kubeconfig: vars.KUBECONFIG!, dir: vars.VRAM_PREFLIGHT_CLUSTER_DIR!, bin: vars.VRAM_PREFLIGHT_CLUSTER_BIN!, api, port: new URL(api).port };
}

export interface Run {
  status: number | null;
  stdout: string;
  stderr: string;
}

let kubectlHome: string | undefined;

/** kubectl as the cluster's admin (its discovery cache in a home of the test's); throws with its stderr unless `allowFail`. */
export function kubectl(c: Cluster, args: readonly string[], input?: string, allowFail = false): Run {
  kubectlHome ??= tempDir('kubectl-home');
  const r = spawnSync(path.join(c.bin, 'kubectl'), ['--kubeconfig', c.kubeconfig, ...args], { encoding: 'utf8', input, env: { PATH: process.env.PATH, HOME: kubectlHome } });
  if (r.status !== 0 && !allowFail) throw new Error(`kubectl ${args.join(' ')} exited ${r.status}:\n${r.stderr}`);
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

const dirs: string[] = [];
export function tempDir(prefix: string): string {
  const dir = mkdtempSync(path.join(tmpdir(), `vram-preflight-audit-${prefix}-`));
  dirs.push(dir);
  return dir;
}
export function removeTempDirs(): void {
  kubectlHome = undefined;
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
}

/** The bundle (launcher, application, webhook and audit files), built into a temp dir. */
export function bundle(): string {
  const outfile = path.join(tempDir('bundle'), 'vram-preflight.cjs');
  const built = spawnSync(process.execPath, [path.join(ROOT, 'scripts/build.mjs'), '--outfile', outfile], { encoding: 'utf8' });
  if (built.status !== 0) throw new Error(`scripts/build.mjs failed:\n${built.stderr}`);
  return outfile;
}

/**
 * Runs the bundle with exactly this environment (no VRAM_PREFLIGHT_* of the
 * test's, which the CLI would refuse as unknown, no KUBECONFIG unless given).
 */
export function runBundle(file: string, args: readonly string[], env: Record<string, string | undefined>, input?: string): Run {
  const r = spawnSync(process.execPath, [file, ...args], { encoding: 'utf8', input, env: { PATH: process.env.PATH, ...env } as NodeJS.ProcessEnv, maxBuffer: 64 << 20 });
  if (r.error) throw r.error;
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** Lines of the API server's audit log (JSON events). */
export function apiAuditEvents(c: Cluster): Record<string, any>[] {
  return readFileSync(path.join(c.dir, 'audit.log'), 'utf8')
    .split('\n')
    .filter((line) => line.startsWith('{'))
    .map((line) => JSON.parse(line) as Record<string, any>);
}

export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** Waits until `check` holds, up to `ms`. */
export async function waitFor(what: string, check: () => boolean, ms = 30_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(200);
  }
}
