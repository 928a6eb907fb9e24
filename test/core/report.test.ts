/**
 * The JSON report (`explain --output json`, `--report-file`) against its
 * published schema, on the real renders and on every fixture case, ok or not.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Ajv } from 'ajv';
import { describe, expect, it } from 'vitest';
import schema from '../../src/report.schema.json' with { type: 'json' };
import { runCli } from './run-cli.js';

const validate = new Ajv({ allErrors: true, strict: true }).compile(schema);
const casesDir = join(import.meta.dirname, '../../fixtures/cases');
const realDir = join(import.meta.dirname, '../../fixtures/real');

function args(dir: string): string[] {
  const file = join(dir, 'args.txt');
  return existsSync(file) ? readFileSync(file, 'utf8').split('\n').filter(Boolean) : [];
}

describe('JSON report', () => {
  it('real renders: valid, and the vLLM container is wrapped with its evidence', async () => {
    const run = await runCli(['explain', '--output', 'json'], readFileSync(join(realDir, 'vllm.input.yaml'), 'utf8'));
    expect(run.code).toBe(0);
    const report = JSON.parse(run.stdout);
    expect(validate(report), JSON.stringify(validate.errors)).toBe(true);
    const model = report.containers.find((c: { container: string }) => c.container === 'model');
    expect(model).toMatchObject({ action: 'wrap', utilization: { value: 0.9, source: 'args' }, start: { source: 'table' } });
    expect(model.gpu.signals.map((s: { signal: string }) => s.signal)).toEqual(['resource', 'runtimeClass']);
    for (const engine of ['llamacpp', 'localai']) {
      const other = await runCli(['explain', '--output', 'json'], readFileSync(join(realDir, `${engine}.input.yaml`), 'utf8'));
      expect(validate(JSON.parse(other.stdout)), engine).toBe(true);
    }
  });

  for (const name of readdirSync(casesDir).sort()) {
    it(`${name}: valid; errors go to stderr, never stdout`, async () => {
      const dir = join(casesDir, name);
      const run = await runCli(['explain', '--output', 'json', ...args(dir)], readFileSync(join(dir, 'input.yaml'), 'utf8'), { cwd: dir });
      if (run.code !== 0) {
        expect(run.stdout).toBe('');
        if (!run.stderr.startsWith('{')) return; // a syntax or encoding error: no report to give
      }
      const report = JSON.parse(run.code === 0 ? run.stdout : run.stderr);
      expect(validate(report), JSON.stringify(validate.errors)).toBe(true);
      expect(report.result).toBe(run.code === 0 ? 'ok' : 'error');
    });
  }

  it('--report-file writes the same report on a failing run, next to an empty stdout', async () => {
    const dir = join(casesDir, 'error-custom-tag');
    const run = await runCli(['--report-file=report.json', ...args(dir)], readFileSync(join(dir, 'input.yaml'), 'utf8'), { cwd: dir });
    expect(run.code).toBe(1);
    expect(run.stdout).toBe('');
    const report = JSON.parse(run.files.get('report.json')!);
    expect(validate(report)).toBe(true);
    expect(report.errors[0].code).toBe('UNKNOWN_START');
  });
});
