/**
 * Writes a preflight script for the GPU proof (test/gpu/run-gpu-proof.sh).
 *   npx tsx test/gpu/render-script.ts [OUT_FILE] [--utilization 0.9] [--poll 0.25] [--timeout 120] [--headroom 0] [--log 5]
 * OUT_FILE defaults to test/gpu/out/preflight.sh (git-ignored via .git/info/exclude).
 * Any script works as the proof's input, e.g. args[0] of a container rewritten by the CLI
 * (see test/gpu/extract-script.py).
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { renderPreflightScript } from '../../src/preflight.js';

const argv = process.argv.slice(2);
const opts: Record<string, string> = {};
let out = 'test/gpu/out/preflight.sh';
for (let i = 0; i < argv.length; i++) {
  const a = argv[i]!;
  if (a.startsWith('--')) opts[a.slice(2)] = argv[++i] ?? '';
  else out = a;
}
const num = (k: string, d: number): number => (opts[k] === undefined ? d : Number(opts[k]));

const script = renderPreflightScript({
  version: '0.1.0',
  utilization: num('utilization', 0.9),
  headroomMiB: num('headroom', 0),
  timeoutSeconds: num('timeout', 120),
  pollIntervalSeconds: num('poll', 0.25),
  logIntervalSeconds: num('log', 5),
  onNvidiaSmiUnavailable: 'fail',
  terminationMessagePath: '/dev/termination-log',
});
mkdirSync(dirname(out), { recursive: true });
writeFileSync(out, script);
process.stderr.write(`wrote ${out} (${script.length} bytes)\n`);
