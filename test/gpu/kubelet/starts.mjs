// The container starts of the GPU kubelet proof (test/gpu/kubelet/render.sh): the
// post-renderer run on a pod manifest, with its defaults and with a short wait
// (step 5 of docs/restart-race.md §7: memory that never frees), and the start the
// container had before. Prints JSON: { plain, wrapped, wrappedShortWait }, each
// { command, args } of the first container.
//
//   node test/gpu/kubelet/starts.mjs POD.yaml dist/vram-preflight.cjs
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { parse } from 'yaml';

const [podFile, cli] = process.argv.slice(2);
if (!podFile || !cli) {
  process.stderr.write('usage: node test/gpu/kubelet/starts.mjs POD.yaml dist/vram-preflight.cjs\n');
  process.exit(2);
}
const text = readFileSync(podFile, 'utf8');
const startOf = (yaml) => {
  const container = parse(yaml).spec.containers[0];
  return { command: container.command ?? null, args: container.args ?? null };
};
const wrap = (flags) => startOf(execFileSync(process.execPath, [cli, ...flags], { input: text, encoding: 'utf8' }));
const starts = { plain: startOf(text), wrapped: wrap([]), wrappedShortWait: wrap(['--timeout-seconds=20']) };
if (!starts.wrapped.command || starts.wrapped.command[0] !== '/bin/sh') throw new Error(`the post-renderer did not wrap ${podFile}`);
process.stdout.write(`${JSON.stringify(starts, null, 2)}\n`);
