/**
 * Errors of every cause reach the user the same way: stderr, the diagnostics
 * file and, under Helm 4, stdout as comments; never a raw stack trace.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { main, type CliIO } from '../../src/cli/main.js';
import { escapeControl, PreflightError } from '../../src/core/errors.js';
import { runCli } from './run-cli.js';

const realVllm = readFileSync(join(import.meta.dirname, '../../fixtures/real/vllm.input.yaml'), 'utf8');
const HELM4 = { HELM_PLUGIN_NAME: 'vram-preflight' };

interface Run {
  code: number;
  stdout: string;
  stderr: string;
  files: Map<string, string>;
}

/** main() with its parts replaceable: a stdin or a file system that fails as nothing else can make them fail. */
async function runWith(argv: string[], parts: Partial<CliIO> & { env?: Record<string, string> }): Promise<Run> {
  const run: Run = { code: -1, stdout: '', stderr: '', files: new Map() };
  run.code = await main(argv, {
    stdin: (async function* () {
      yield realVllm;
    })(),
    readFile: (path) => readFileSync(path, 'utf8'),
    writeFile: (path, text) => void run.files.set(path, text),
    ...parts,
    stdout: { write: (text: string) => (run.stdout += text) },
    stderr: { write: (text: string) => (run.stderr += text) },
    env: parts.env ?? {},
  });
  return run;
}

/** A stdin whose reading throws what no input can cause: a bug's stand-in. */
const brokenStdin = {
  [Symbol.asyncIterator]: () => ({
    next: (): Promise<IteratorResult<string>> => {
      const missing = null as unknown as { length: number };
      return Promise.resolve({ done: false, value: String(missing.length) });
    },
  }),
};

describe('an internal error (a bug) goes through the error channel', () => {
  it('plain: one error INTERNAL with a fix on stderr, no stack, nothing on stdout, exit 70; the stack only in the diagnostics file', async () => {
    const run = await runWith(['--diagnostics-file=diag.log'], { stdin: brokenStdin });
    expect(run.code).toBe(70);
    expect(run.stdout).toBe('');
    expect(run.stderr).toMatch(/^vram-preflight: error INTERNAL: internal error \(a bug in vram-preflight [^)]+, not in the input\): TypeError: Cannot read properties of null/);
    expect(run.stderr).toContain('\n  fix: please report it');
    expect(run.stderr).not.toMatch(/^\s+at /m);
    const diagnostics = run.files.get('diag.log')!;
    expect(diagnostics).toContain('error INTERNAL: ');
    expect(diagnostics).toMatch(/^\s+at /m);
  });

  it('Helm 4: the same message on stdout as comments, the first line saying the render was refused', async () => {
    const run = await runWith([], { stdin: brokenStdin, env: HELM4 });
    expect(run.code).toBe(0);
    const lines = run.stdout.trimEnd().split('\n');
    expect(lines[0]).toMatch(/^# vram-preflight refused the render, so nothing was rendered or installed: error INTERNAL: /);
    expect(lines).toContain(lines.find((l) => l.startsWith('# vram-preflight: error INTERNAL: internal error')));
    expect(lines.at(-1)).toBe('vram-preflight-refused-the-render');
    expect(run.stdout).not.toMatch(/^#\s+at /m);
  });

  it('a throwing registry client is an internal error too, reported the same way', async () => {
    const input = realVllm.replace('lmcache/vllm-openai:v0.5.2', 'lmcache/vllm-openai:custom-build');
    const run = await runWith([], {
      stdin: (async function* () {
        yield input;
      })(),
      lookupImageStarts: () => Promise.reject(new RangeError('the registry client broke')),
    });
    expect(run.code).toBe(70);
    expect(run.stdout).toBe('');
    expect(run.stderr).toContain('error INTERNAL: internal error (a bug in vram-preflight');
    expect(run.stderr).toContain('RangeError: the registry client broke');
  });
});

describe('the diagnostics file', () => {
  const unwritable = (path: string): void => {
    throw Object.assign(new Error(`EACCES: permission denied, open '${path}'`), { code: 'EACCES' });
  };

  it('that cannot be written fails an otherwise good run (exit 1, IO, nothing on stdout): under Helm 4 it may be the only place its messages go', async () => {
    const run = await runWith(['--diagnostics-file=/nowhere/diag.log'], { writeFile: unwritable });
    expect(run.code).toBe(1);
    expect(run.stdout).toBe('');
    expect(run.stderr).toContain('error IO: cannot write the diagnostics file /nowhere/diag.log: EACCES');
    expect(run.stderr).toContain('fix: give --diagnostics-file');
  });

  it('that cannot be written is not silent under Helm 4: the render is refused with the reason', async () => {
    const run = await runWith(['--diagnostics-file=/nowhere/diag.log'], { writeFile: unwritable, env: HELM4 });
    expect(run.code).toBe(0);
    expect(run.stdout.split('\n')[0]).toMatch(/^# vram-preflight refused the render.*: error IO: cannot write the diagnostics file/);
    expect(run.stdout.trimEnd().split('\n').at(-1)).toBe('vram-preflight-refused-the-render');
  });
});

describe('options', () => {
  it('an unknown option is named as such, before any value is asked for, with the close ones', async () => {
    for (const argv of [['--bogus'], ['--bogus', '5'], ['--bogus=5']]) {
      const run = await runCli(argv, realVllm);
      expect(run.code, argv.join(' ')).toBe(2);
      expect(run.stderr, argv.join(' ')).toContain('error USAGE: unknown option --bogus\n');
      expect(run.stderr).not.toContain('needs a value');
    }
    const typo = await runCli(['--timout-seconds=5'], realVllm);
    expect(typo.stderr).toContain('unknown option --timout-seconds\n  fix: did you mean --timeout-seconds?');
    const part = await runCli(['--registry', 'never'], realVllm);
    expect(part.stderr).toMatch(/unknown option --registry\n {2}fix: did you mean --registry-\S+ or --registry-\S+ or --registry-\S+\?/);
  });

  it("'--timeout-seconds 900' as one word says why it fails and how to write it", async () => {
    const run = await runCli(['--timeout-seconds 900'], realVllm);
    expect(run.code).toBe(2);
    expect(run.stdout).toBe('');
    expect(run.stderr).toContain('"--timeout-seconds 900" came as one argument');
    expect(run.stderr).toContain('fix: write it as --timeout-seconds=900 (one word, with =)');
    const right = await runCli(['--timeout-seconds=900'], realVllm);
    expect(right.code).toBe(0);
  });
});

describe('control characters from the input are escaped in every message', () => {
  it('escapeControl: C0 (ESC, BEL, BS, tab, CR, LF), DEL, C1, line separators; other text untouched', () => {
    expect(escapeControl('a\u001b[2Jb\u0007\u0008\t\r\n\u007f\u009b\u0085\u2028z')).toBe('a\\x1b[2Jb\\x07\\x08\\t\\r\\n\\x7f\\x9b\\x85\\u2028z');
    expect(escapeControl('vllm/vllm-openai:v0.8.0 — ü 模型')).toBe('vllm/vllm-openai:v0.8.0 — ü 模型');
  });

  it('PreflightError.format escapes what it quotes, and keeps the layout of the fix', () => {
    const error = new PreflightError('BAD_CONTAINER', 'bad\rline', { container: 'a\u001b[31mred', fix: 'one\ntwo\u0007' });
    expect(error.format()).toBe('error BAD_CONTAINER: container "a\\x1b[31mred": bad\\rline\n  fix: one\n       two\\x07');
  });

  it('a container name and an image with ESC, CR, DEL and C1 reach stderr escaped', async () => {
    const input = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: "m\\e]0;title\\a"
spec:
  template:
    spec:
      containers:
        - name: "vllm\\e[2J\\r\\x7f\\x9b"
          image: "vllm/vllm-openai:v0.8.0\\e[31m"
          resources:
            limits:
              nvidia.com/gpu: 1
`;
    const run = await runCli([], input);
    expect(run.code).toBe(1);
    expect(run.stdout).toBe('');
    expect(run.stderr).toContain('error BAD_CONTAINER: Deployment/m\\x1b]0;title\\x07 (document 1, line 1), container "vllm\\x1b[2J\\r\\x7f\\x9b", image "vllm/vllm-openai:v0.8.0\\x1b[31m"');
    // Nothing but the line breaks of the messages themselves.
    expect(run.stderr).not.toMatch(/[\u0000-\u0009\u000b-\u001f\u007f-\u009f]/);
  });
});
