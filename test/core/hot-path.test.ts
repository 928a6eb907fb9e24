/**
 * The render's hot path replaces regexes by plain string searches where that
 * cannot change an answer (docs/benchmarks.md). These tests hold each search
 * to the test it stands for, on generated text rich in the characters that
 * could make them differ (both cases, Unicode spaces and case-folding
 * oddities), and hold the launcher's pass-through to the application's
 * answer on every fixture. And the render of the incident's chart, a short
 * run, optimises nothing: a character loop over a whole document gets
 * compiled by TurboFan, which cost more than the loop saved.
 */
import { chmodSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import { DEFAULT_OPTIONS } from '../../src/config/sources.js';
import { argvStartsVllm, startsVllmInBackground } from '../../src/core/decide/detect.js';
import { mayHoldTarget, mentionsAny, TARGET_WORDS } from '../../src/core/decide/target-words.js';
import { transform } from '../../src/core/transform.js';
import { splitStream } from '../../src/core/yaml/stream.js';

const SEED = 20261204;

/** Text made of pieces of the words, in both cases, and characters that fold oddly (Kelvin sign, dotted I, long s). */
function wordText(words: readonly string[]): fc.Arbitrary<string> {
  const pieces = words.flatMap((w) => [w, w.toUpperCase(), w.slice(0, 2), w.slice(2), w.slice(1, -1)]);
  const odd = ['\u212a', '\u0130', '\u017f', '\u0131', 'K', 'k', 'I', 'i', 'S', 's', '\\', ' ', '\n', 'x', '-', '.', '/'];
  const letters = [...new Set(words.join('').split(''))].flatMap((c) => [c, c.toUpperCase()]);
  return fc.array(fc.constantFrom(...pieces, ...odd, ...letters), { maxLength: 14 }).map((a) => a.join(''));
}

const regexFor = (words: readonly string[]): RegExp => new RegExp(words.map((w) => w.replace(/[\\^$.|?*+()[\]{}]/g, '\\$&')).join('|'), 'i');

describe('mentions as a plain search of the lowered text', () => {
  it('is true wherever the case-insensitive regex is, and equal to it for the target words (seeded)', () => {
    const targets = regexFor(TARGET_WORDS);
    fc.assert(
      fc.property(wordText(TARGET_WORDS), (text) => {
        expect(mentionsAny(text, TARGET_WORDS)).toBe(targets.test(text));
      }),
      { numRuns: 5000, seed: SEED },
    );
  });

  it('never misses a configured word the regex finds, whatever its letters (seeded)', () => {
    const configured = ['kserve/vllm-runtime', 'registry.example/SIKI/img', 'quay.io/a.b+c'].map((w) => w.toLowerCase());
    const regex = regexFor(configured);
    fc.assert(
      fc.property(wordText(configured), (text) => {
        if (regex.test(text)) expect(mentionsAny(text, configured)).toBe(true);
      }),
      { numRuns: 5000, seed: SEED },
    );
    // The one way they differ: lowering folds the Kelvin sign to k, the regex does not; a looser candidate only costs a parse.
    expect(mentionsAny('\u212aserve/vllm-runtime', configured)).toBe(true);
  });

  it('mayHoldTarget: a backslash or a target word in any case', () => {
    expect(mayHoldTarget('image: VLLM/vllm-openai')).toBe(true);
    expect(mayHoldTarget('image: ghcr.io/LLM-D/x')).toBe(true);
    expect(mayHoldTarget('name: "\\x76llm"')).toBe(true);
    expect(mayHoldTarget('image: llama.cpp/server')).toBe(false);
  });
});

// A shell script is read by one reader (src/core/decide/shell-script.ts), whose
// answer is what the shell itself does: a real bash runs each generated script with a fake
// `vllm` and `python3` on PATH that record what they were run with. (`&&` is left out: the
// reader does not know which commands fail. A substitution as a
// command's program, `$(cmd) vllm serve`, is what the reader does not follow: no expansion
// but the positional parameters; the generator leaves it out.)
describe('vLLM in a shell script: the reader answers as bash runs it', () => {
  const tokens = ['vllm serve m', 'vllm serve ', 'vllm', 'serve', ' serve', 'python3 -m vllm.entrypoints.openai.api_server ', '&', ' & ', ';', '; ', '|', '\n', '\u00a0', '\u2003', '"', "'", '#', 'echo ', 'exec ', 'eval ', 'X=1 ', '-m ', 'python3 ', 'vllm.entrypoints.openai.api_server', 'x', ' ', '\\\n', '$0 ', 'if true; then ', '; fi', 'X=$(true) ', 'echo $(true) '];
  const shellText = fc.array(fc.constantFrom(...tokens), { maxLength: 10 }).map((a) => a.join(''));
  const dir = mkdtempSync(join(tmpdir(), 'vram-preflight-shell-'));
  const record = join(dir, 'ran');
  for (const [name, body] of [
    ['vllm', `[ "$1" = serve ] && echo vllm >>${record}; exit 0`],
    ['python3', `[ "$1" = -m ] && [ "$2" = vllm.entrypoints.openai.api_server ] && echo vllm >>${record}; exit 0`],
  ] as const) {
    writeFileSync(join(dir, name), `#!/bin/sh\n${body}\n`);
    chmodSync(join(dir, name), 0o755);
  }
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('argvStartsVllm says the script starts vLLM exactly when bash does (seeded)', () => {
    let compared = 0;
    let started = 0;
    fc.assert(
      fc.property(shellText, (text) => {
        const env = { PATH: `${dir}:/usr/bin:/bin`, LC_ALL: 'C.UTF-8' };
        // A script bash cannot parse runs nothing; the reader is not asked to judge those.
        if (spawnSync('bash', ['-n', '-c', text], { env }).status !== 0) return;
        rmSync(record, { force: true });
        spawnSync('bash', ['-c', `${text}\nwait`], { env, timeout: 5000, stdio: 'ignore' });
        compared++;
        if (existsSync(record)) started++;
        expect(argvStartsVllm(['bash', '-c', text]), JSON.stringify(text)).toBe(existsSync(record));
      }),
      { numRuns: 400, seed: SEED },
    );
    expect(compared).toBeGreaterThan(100);
    expect(started).toBeGreaterThan(20);
  }, 90_000); // hundreds of bash runs: 21 s on a busy 2-core machine, past the 20 s default

  it('a Unicode space does not separate words for the shell: "exec<NBSP>vllm<EM SPACE>serve" runs no vLLM', () => {
    expect(argvStartsVllm(['sh', '-c', 'exec\u00a0vllm\u2003serve m'])).toBe(false);
    expect(startsVllmInBackground(['bash', '-c', 'vllm serve m &\nwait'])).toBe(true);
    expect(startsVllmInBackground(['bash', '-c', 'vllm serve m && wait'])).toBe(false);
  });

  it('reads what eval runs: KServe LLMInferenceService ends its script in eval "exec vllm serve … $@"', () => {
    expect(argvStartsVllm(['/bin/bash', '-c', 'A="--x"\neval "exec vllm serve /mnt/models \\\n  ${A} \\\n  $@"', '--', '--port', '8001'])).toBe(true);
    expect(argvStartsVllm(['/bin/bash', '-c', 'eval "echo vllm serve"'])).toBe(false);
  });
});

describe('the launcher passes through only what the application would', () => {
  const root = join(import.meta.dirname, '../../fixtures');
  const inputs = [
    ...readdirSync(join(root, 'cases'))
      .map((c) => join(root, 'cases', c, 'input.yaml'))
      .filter(existsSync),
    ...readdirSync(join(root, 'real'))
      .filter((f) => f.endsWith('.input.yaml'))
      .map((f) => join(root, 'real', f)),
  ];

  it('finds the fixtures', () => expect(inputs.length).toBeGreaterThan(20));

  // Whole fixtures, and each of their documents alone (most fixtures mention vLLM somewhere, few documents do).
  it.each(inputs.map((f) => [f.slice(root.length + 1), f]))('%s', (_, file) => {
    const text = readFileSync(file, 'utf8');
    for (const piece of [text, ...splitStream(text).map((c) => c.text)]) {
      if (mayHoldTarget(piece)) continue;
      // Under either candidate rule: explain's (every mention) and the render's (a mention that could decide a container).
      for (const candidates of ['any-mention', 'deciding-mention'] as const) {
        const result = transform(piece, { ...DEFAULT_OPTIONS }, { candidates });
        expect(result.errors).toEqual([]);
        expect(result.warnings).toEqual([]);
        expect(result.containers).toEqual([]);
        expect(result.output).toBe(piece);
      }
    }
  });
});

describe('the real vLLM render optimises nothing (docs/benchmarks.md)', () => {
  it('run from the built bundle with its code cache, as helm runs it, no function is compiled by TurboFan', () => {
    const dir = mkdtempSync(join(tmpdir(), 'vram-preflight-tiering-'));
    try {
      const bundle = join(dir, 'vram-preflight.cjs');
      const build = spawnSync(process.execPath, [join(import.meta.dirname, '../../scripts/build.mjs'), '--outfile', bundle], { encoding: 'utf8' });
      expect(build.status, build.stderr).toBe(0);
      const input = readFileSync(join(import.meta.dirname, '../../fixtures/real/vllm.input.yaml'));
      const { NODE_OPTIONS: _, ...env } = process.env;
      // V8's tiering counts bytecodes run, not time: with its seeds fixed the same run marks the same functions.
      const render = () => spawnSync(process.execPath, ['--trace-opt', '--random-seed=1', '--hash-seed=1', bundle], { input, env, encoding: 'utf8', maxBuffer: 1 << 26 });
      expect(render().status).toBe(0); // writes the code cache for these flags
      const run = render();
      expect(run.status, run.stderr).toBe(0);
      expect(run.stdout).toContain('# vram-preflight ');
      expect(run.stdout.split('\n').filter((line) => /^\[marking .* for optimization to TURBOFAN/.test(line))).toEqual([]);
      // The control: the same trace does show TurboFan where a loop runs long enough.
      const loop = spawnSync(process.execPath, ['--trace-opt', '-e', 'let n = 0; for (let i = 0; i < 1e6; i++) n += i; console.log(n)'], { env, encoding: 'utf8' });
      expect(loop.stdout).toMatch(/^\[marking .* for optimization to TURBOFAN/m);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);
});
