/**
 * Input/expected pairs under fixtures/. Each case directory holds input.yaml,
 * about.txt and either expected.yaml (the exact stdout) or a file named
 * `identical` (stdout must equal the input byte for byte) or neither (the run
 * must fail with empty stdout); expected-stderr.txt holds the exact stderr;
 * args.txt the CLI arguments, one per line. Expected files were reviewed by
 * hand once; `UPDATE_FIXTURES=1` rewrites them after a deliberate change.
 */
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { runCli } from './run-cli.js';

const casesDir = join(import.meta.dirname, '../../fixtures/cases');
const realDir = join(import.meta.dirname, '../../fixtures/real');
const update = process.env.UPDATE_FIXTURES === '1';

function read(path: string): string | undefined {
  return existsSync(path) ? readFileSync(path, 'utf8') : undefined;
}

function check(actual: string, path: string): void {
  if (update) {
    if (actual === '') {
      if (existsSync(path)) writeFileSync(path, '');
      return;
    }
    writeFileSync(path, actual);
    return;
  }
  expect(actual).toBe(read(path) ?? '');
}

const cases = readdirSync(casesDir).sort();

describe('fixture cases', () => {
  it('exist in number', () => {
    expect(cases.length).toBeGreaterThanOrEqual(40);
  });

  for (const name of cases) {
    const dir = join(casesDir, name);
    it(`${name}: ${readFileSync(join(dir, 'about.txt'), 'utf8').trim()}`, async () => {
      const input = readFileSync(join(dir, 'input.yaml'), 'utf8');
      const args = (read(join(dir, 'args.txt')) ?? '').split('\n').filter(Boolean);
      const run = await runCli(args, input, { cwd: dir });
      const identical = existsSync(join(dir, 'identical'));
      const expectedPath = join(dir, 'expected.yaml');
      if (identical) {
        expect(run.code).toBe(0);
        expect(run.stdout).toBe(input);
      } else if (existsSync(expectedPath) || (update && run.code === 0)) {
        expect(run.code).toBe(0);
        expect(run.stdout).not.toBe(input);
        check(run.stdout, expectedPath);
      } else {
        expect(run.code).not.toBe(0);
        expect(run.stdout).toBe('');
      }
      check(run.stderr, join(dir, 'expected-stderr.txt'));
      if (run.code === 0) {
        // Idempotent: the output fed back comes out the same, byte for byte.
        const again = await runCli(args, run.stdout, { cwd: dir });
        expect(again.code).toBe(0);
        expect(again.stdout).toBe(run.stdout);
      }
    });
  }
});

describe('real renders of the chart the bug was found in', () => {
  it('vllm: the model container is rewritten as reviewed', async () => {
    const input = readFileSync(join(realDir, 'vllm.input.yaml'), 'utf8');
    const run = await runCli([], input);
    expect(run.code).toBe(0);
    expect(run.stderr).toBe('');
    check(run.stdout, join(realDir, 'vllm.expected.yaml'));
    const again = await runCli([], run.stdout);
    expect(again.stdout).toBe(run.stdout);
  });

  for (const engine of ['llamacpp', 'localai']) {
    it(`${engine}: byte-identical`, async () => {
      const input = readFileSync(join(realDir, `${engine}.input.yaml`), 'utf8');
      const run = await runCli([], input);
      expect(run.code).toBe(0);
      expect(run.stdout).toBe(input);
      expect(run.stderr).toBe('');
    });
  }
});

describe('docs/errors.md', () => {
  it('quotes the error fixtures exactly as the tool prints them', () => {
    const doc = readFileSync(join(import.meta.dirname, '../../docs/errors.md'), 'utf8');
    const quoted = cases.filter((name) => name.startsWith('error-'));
    expect(quoted.length).toBeGreaterThanOrEqual(10);
    for (const name of quoted) {
      expect(doc, name).toContain(`### ${name}`);
      expect(doc, name).toContain(readFileSync(join(casesDir, name, 'expected-stderr.txt'), 'utf8').trimEnd());
    }
  });
});
