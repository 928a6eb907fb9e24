#!/usr/bin/env node
// `npm run example`: what vram-preflight does to a real chart render, on one
// screen. Builds the bundle, runs `explain --output json` and the rewrite on
// fixtures/real/vllm.input.yaml (a `helm template` of the chart the restart
// race was found in), and prints a summary of each container's decision, then
// the lines that changed (diff -U0), with the long runs shortened: the
// preflight script to its first line, the original start to its first items.
// Each container's reason is shown in full, folded between words.
// The full output: node dist/vram-preflight.cjs < fixtures/real/vllm.input.yaml
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildBundle } from './build.mjs';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const input = path.join(root, 'fixtures/real/vllm.input.yaml');
const WIDTH = 100;
/** Lines of a run of added or removed lines shown before the rest is counted. */
const RUN = 4;

const cut = (line) => (line.length > WIDTH ? `${line.slice(0, WIDTH - 1)}…` : line);

/** Prose folded at spaces into lines of at most WIDTH characters, each after `indent`: every word kept whole. */
function fold(text, indent) {
  const lines = [];
  let line = '';
  for (const word of text.split(/\s+/).filter((w) => w !== '')) {
    if (line !== '' && indent.length + line.length + 1 + word.length > WIDTH) {
      lines.push(indent + line);
      line = word;
    } else line = line === '' ? word : `${line} ${word}`;
  }
  if (line !== '') lines.push(indent + line);
  // (A word longer than a whole line would stay whole on a line of its own.)
  return lines;
}

function cli(args) {
  const r = spawnSync(process.execPath, [path.join(root, 'dist/vram-preflight.cjs'), ...args], { input: readFileSync(input), encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
  if (r.status !== 0) throw new Error(`vram-preflight ${args.join(' ')} exited ${r.status}:\n${r.stderr}`);
  return r.stdout;
}

/** The lines of each diff hunk, each run of one sign shortened; the preflight script (a `- |` block) to its first line. */
function shorten(hunk) {
  const out = [];
  let i = 0;
  while (i < hunk.length) {
    const sign = hunk[i][0];
    const run = [];
    while (i < hunk.length && hunk[i][0] === sign) run.push(hunk[i++]);
    for (let j = 0; j < run.length; ) {
      const block = /^[+-](\s*)- \|$/.exec(run[j]);
      if (block) {
        // A block scalar: the lines indented deeper than its `- |` are its text.
        let end = j + 1;
        while (end < run.length && run[end].slice(1).startsWith(`${block[1]}  `)) end++;
        out.push(run[j], run[j + 1], `${sign}${block[1]}  … ${end - j - 2} more lines: the preflight script (docs/restart-race.md)`);
        j = end;
        continue;
      }
      // Up to the next block scalar, or the end of the run.
      let end = j;
      while (end < run.length && !/^[+-]\s*- \|$/.test(run[end])) end++;
      const part = run.slice(j, end);
      const indent = /^[+-](\s*)/.exec(part.at(-1) ?? '')?.[1] ?? '';
      out.push(...(part.length > RUN + 2 ? [...part.slice(0, RUN), `${sign}${indent}… ${part.length - RUN} more lines`] : part));
      j = end;
    }
  }
  return out;
}

export async function example() {
  await buildBundle({ quiet: true });
  const report = JSON.parse(cli(['explain', '--output', 'json']));
  const rewritten = cli([]);
  const work = mkdtempSync(path.join(tmpdir(), 'vram-preflight-example-'));
  let diff;
  try {
    writeFileSync(path.join(work, 'rewritten.yaml'), rewritten);
    diff = spawnSync('diff', ['-U0', input, path.join(work, 'rewritten.yaml')], { encoding: 'utf8' }).stdout;
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
  const lines = [];
  const documents = readFileSync(input, 'utf8').split(/^---$/m).filter((d) => d.trim() !== '').length;
  const wrapped = report.containers.filter((c) => c.action === 'wrap');
  lines.push(`vram-preflight ${report.toolVersion} on fixtures/real/vllm.input.yaml (helm template of a real vLLM chart):`);
  lines.push(`${documents} documents, ${report.containers.length} containers that mention vLLM: ${wrapped.length} wrapped, ${report.containers.length - wrapped.length} left alone.`);
  lines.push('Every other byte of the render is unchanged.', '');
  for (const c of report.containers) {
    lines.push(cut(`  ${c.workload}, container ${c.container} (${c.image}): ${c.action === 'wrap' ? 'WRAPPED' : 'left alone'}`));
    lines.push(...fold(c.reason, '    '));
  }
  lines.push('', 'What changed (diff -U0 of the render and the rewrite, long runs shortened):');
  const hunks = diff.split('\n').filter((l) => !l.startsWith('---') && !l.startsWith('+++') && l !== '');
  let hunk = [];
  const flush = () => {
    lines.push(...shorten(hunk).map((l) => cut(`  ${l}`)));
    hunk = [];
  };
  for (const line of hunks) {
    if (line.startsWith('@@')) {
      if (hunk.length) flush();
      lines.push(`  ${line}`);
    } else hunk.push(line);
  }
  if (hunk.length) flush();
  lines.push('', 'All of it:  node dist/vram-preflight.cjs < fixtures/real/vllm.input.yaml', 'Why, fully: node dist/vram-preflight.cjs explain < fixtures/real/vllm.input.yaml');
  return `${lines.join('\n')}\n`;
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  example().then((text) => process.stdout.write(text), (error) => {
    process.stderr.write(`example: ${error.message}\n`);
    process.exit(1);
  });
}
