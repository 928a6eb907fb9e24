/**
 * The audit's tests run against the real control plane of scripts/cluster.sh
 * through the harness of test/apiserver (the cluster, the real kubectl, the
 * chart's webhook configuration with this file's suite label, the API
 * server's audit log); what is the audit's own is here: the bundle run with
 * exactly the environment given, and temp dirs removed after the file.
 *
 * The cluster is shared with the other cluster test files: every object made
 * here has the run's id in its name, its namespaces carry the suite label
 * that only its own webhook configuration requires, and every audit is told
 * which configuration to judge by (--webhook-configuration).
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { buildBundle, sleep } from '../apiserver/harness.js';

export { auditEvents, chartWebhookConfiguration, cluster, kubectl, kubectlOk, namespace, renderChart, ROOT, sleep, type Cluster, type Plain, type Run } from '../apiserver/harness.js';

const dirs: string[] = [];
export function tempDir(prefix: string): string {
  const dir = mkdtempSync(path.join(tmpdir(), `vram-preflight-audit-${prefix}-`));
  dirs.push(dir);
  return dir;
}
export function removeTempDirs(): void {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
}

/** The bundle (launcher, application, webhook and audit files), built into a temp dir. */
export function bundle(): string {
  return buildBundle(tempDir('bundle'));
}

/**
 * Runs the bundle with exactly this environment: no VRAM_PREFLIGHT_* of the
 * test's (the CLI refuses unknown ones), no KUBECONFIG unless given.
 */
export function runBundle(file: string, args: readonly string[], env: Record<string, string | undefined>, input?: string): { status: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [file, ...args], { encoding: 'utf8', input, env: { PATH: process.env.PATH, ...env } as NodeJS.ProcessEnv, maxBuffer: 64 << 20 });
  if (r.error) throw r.error;
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** Waits until `check` holds, up to `ms`. */
export async function waitFor(what: string, check: () => boolean, ms = 30_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(200);
  }
}
