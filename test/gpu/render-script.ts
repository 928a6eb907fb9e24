/**
 * Writes the preflight scripts for the GPU proof (test/gpu/run-gpu-proof.sh).
 *   npx tsx test/gpu/render-script.ts                 # the proof's set, into test/gpu/out/
 *   npx tsx test/gpu/render-script.ts OUT_FILE [--utilization 0.9] [--poll 0.25] [--timeout 120]
 *       [--headroom 0] [--log 5] [--on-unavailable fail] [--smi-timeout 10]     # one script
 * The set: preflight.sh (the race, cold start, timeout: on-unavailable fail, 10 s per query)
 * and, next to it, preflight-faults-warn.sh and preflight-faults-fail.sh (4 s per query,
 * for the slow-query and SIGTERM-during-a-query proofs) and preflight-threshold-U.sh for
 * U in THRESHOLD_UTILIZATIONS (the threshold proof: vLLM's own rule at each U). test/gpu/out/ is git-ignored:
 * carry it to the GPU machine (it has no node). Any script works as the proof's input,
 * e.g. args[0] of a container rewritten by the CLI (see test/gpu/extract-script.py).
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { PreflightSettings } from '../../src/core/preflight/settings.js';
import { renderPreflightScript } from '../../src/core/preflight/script.js';

const argv = process.argv.slice(2);
const opts: Record<string, string> = {};
let out: string | undefined;
for (let i = 0; i < argv.length; i++) {
  const a = argv[i]!;
  if (a.startsWith('--')) opts[a.slice(2)] = argv[++i] ?? '';
  else out = a;
}
const num = (k: string, d: number): number => (opts[k] === undefined ? d : Number(opts[k]));
/** The utilizations at which the threshold is proven on a GPU (docs/gpu-results.md, Run of 2026-12-04 18:13 UTC). */
const THRESHOLD_UTILIZATIONS = ['0.5', '0.7', '0.8', '0.85', '0.9', '0.95'];

function settings(over: Partial<PreflightSettings> = {}): PreflightSettings {
  return {
    version: '0.1.0',
    utilization: opts['utilization'] ?? '0.9',
    headroomMiB: num('headroom', 0),
    contextMiB: opts['context'] === undefined || opts['context'] === 'auto' ? 'auto' : Number(opts['context']),
    timeoutSeconds: num('timeout', 120),
    pollIntervalSeconds: num('poll', 0.25),
    logIntervalSeconds: num('log', 5),
    onNvidiaSmiUnavailable: (opts['on-unavailable'] ?? 'fail') as 'warn' | 'fail',
    nvidiaSmiTimeoutSeconds: num('smi-timeout', 10),
    terminationMessagePath: '/dev/termination-log',
    ...over,
  };
}

function write(file: string, s: PreflightSettings): void {
  const script = renderPreflightScript(s);
  mkdirSync(dirname(file), { recursive: true });
  writeFileSync(file, script);
  process.stderr.write(`wrote ${file} (${script.length} bytes)\n`);
}

if (out !== undefined) {
  write(out, settings());
} else {
  const dir = 'test/gpu/out';
  write(join(dir, 'preflight.sh'), settings());
  write(join(dir, 'preflight-faults-warn.sh'), settings({ onNvidiaSmiUnavailable: 'warn', nvidiaSmiTimeoutSeconds: 4 }));
  write(join(dir, 'preflight-faults-fail.sh'), settings({ onNvidiaSmiUnavailable: 'fail', nvidiaSmiTimeoutSeconds: 4 }));
  for (const u of THRESHOLD_UTILIZATIONS) write(join(dir, `preflight-threshold-${u}.sh`), settings({ utilization: u }));
}
