/**
 * The webhook as a Deployment runs it, for the tests that measure the
 * process (its RSS, its threads, its signals): the built bundle started as a
 * child on port 0, with the heap cap the chart derives from its memory limit.
 *
 * VRAM_PREFLIGHT_WEBHOOK_BUNDLE=path/to/vram-preflight.cjs runs them against
 * another build (an earlier release, to measure a row's figure before a
 * fix); flags that build does not know are then left out (BEFORE_FLAGS).
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { parse as parseYaml } from 'yaml';
import * as h from './harness.js';

const ROOT = path.resolve(import.meta.dirname, '../..');

/**
 * The chart's memory limit, read from deploy/webhook/values.yaml (a limit
 * changed there is the one the RSS figures are held to), and the heap cap the
 * chart derives from it (deploy/webhook/templates/_helpers.tpl; the chart
 * test checks that rule).
 */
export const CHART_MEMORY_LIMIT_MIB = chartMemoryLimitMiB();
export const CHART_HEAP_MIB = Math.floor((CHART_MEMORY_LIMIT_MIB * 3) / 8);

/** Flags added with the hardening: an earlier build is run without them. */
const NEW_FLAGS = ['--shutdown-delay-ms', '--max-connections', '--max-concurrent-streams', '--max-body-bytes-in-flight', '--registry-lookups-in-flight', '--kubernetes-reads-in-flight', '--tls-min-version', '--tls-cipher-suites', '--client-ca-file', '--client-common-name'];

export const OTHER_BUILD = process.env.VRAM_PREFLIGHT_WEBHOOK_BUNDLE;

function chartMemoryLimitMiB(): number {
  const values = parseYaml(readFileSync(path.join(ROOT, 'deploy/webhook/values.yaml'), 'utf8')) as { resources?: { limits?: { memory?: unknown } } };
  const limit = String(values.resources?.limits?.memory ?? '');
  const m = /^(\d+)(Mi|Gi)$/.exec(limit);
  if (!m) throw new Error(`deploy/webhook/values.yaml: resources.limits.memory ${JSON.stringify(limit)} is not written in Mi or Gi`);
  return Number(m[1]) * (m[2] === 'Gi' ? 1024 : 1);
}

let built: string | undefined;

/** The bundle under test: built once per test file into `dir`, or the one named by VRAM_PREFLIGHT_WEBHOOK_BUNDLE. */
export function bundle(dir: string): string {
  if (OTHER_BUILD) return OTHER_BUILD;
  if (built) return built;
  const file = path.join(dir, 'dist/vram-preflight.cjs');
  const result = spawnSync(process.execPath, [path.join(ROOT, 'scripts/build.mjs'), '--outfile', file], { encoding: 'utf8' });
  if (result.status !== 0) throw new Error(result.stderr);
  built = file;
  return file;
}

export interface Child {
  child: ChildProcess;
  port: number;
  url: string;
  /** JSON log lines so far. */
  logs(): Record<string, unknown>[];
  /** VmRSS / VmHWM (peak) of the process, MiB. */
  rss(): number;
  peak(): number;
  exit: Promise<number | null>;
  stop(): Promise<void>;
}

function withoutNewFlags(args: string[]): string[] {
  if (!OTHER_BUILD) return args;
  const kept: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const flag = args[i]!.split('=')[0]!;
    if (NEW_FLAGS.includes(flag)) {
      if (!args[i]!.includes('=')) i++;
      continue;
    }
    kept.push(args[i]!);
  }
  return kept;
}

export function memory(pid: number, field: 'VmRSS' | 'VmHWM'): number {
  const m = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : Number.NaN;
}

/** Starts the webhook bundle; resolves once it prints `listening PORT`. */
export function startChild(file: string, leaf: { cert: string; key: string }, args: string[], options: { heapMiB?: number; env?: Record<string, string> } = {}): Promise<Child> {
  const env: Record<string, string | undefined> = { PATH: process.env.PATH, HOME: path.dirname(leaf.cert), ...options.env };
  if (options.heapMiB) env.NODE_OPTIONS = `--max-old-space-size=${options.heapMiB}`;
  const child = spawn(process.execPath, [file, 'webhook', '--tls-cert-file', leaf.cert, '--tls-key-file', leaf.key, '--port', '0', '--address', '127.0.0.1', ...withoutNewFlags(args)], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  const exit = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  return new Promise((resolve, reject) => {
    let stdout = '';
    child.stdout!.on('data', (d: Buffer) => {
      stdout += d.toString();
      const m = stdout.match(/^listening (\d+)\n/);
      if (m) {
        const port = Number(m[1]);
        resolve({
          child,
          port,
          url: `https://127.0.0.1:${port}`,
          logs: () =>
            stderr
              .split('\n')
              .filter((l) => l.startsWith('{'))
              .map((l) => JSON.parse(l) as Record<string, unknown>),
          rss: () => memory(child.pid!, 'VmRSS'),
          peak: () => memory(child.pid!, 'VmHWM'),
          exit,
          stop: async () => {
            if (child.exitCode === null) child.kill('SIGKILL');
            await exit;
          },
        });
      }
    });
    child.on('exit', (code) => reject(new Error(`exited ${code} before listening: ${stderr}`)));
  });
}

/** One admission over a fresh HTTP/1.1 connection; its latency in ms. */
export async function timedAdmission(url: string, ca: string, body: string): Promise<{ ms: number; answer: h.Answer }> {
  const t0 = performance.now();
  const answer = await h.h1(url, ca, { body });
  return { ms: performance.now() - t0, answer };
}

/** A figure for the report: the row, what was measured, and the build it was measured on. */
export function figure(row: number, text: string): void {
  console.log(`[row ${row}${OTHER_BUILD ? `, ${path.basename(path.dirname(OTHER_BUILD))}` : ''}] ${text}`);
}
