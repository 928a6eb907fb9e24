/**
 * KServe's multi-node huggingfaceserver head (fixtures/pods), wrapped as the
 * webhook patches it, run by real shells: the wait comes first, then bash runs
 * KServe's script as written — `ray start --head`, the health check, and
 * huggingfaceserver in the foreground with the container's args passed on by
 * `$0 $@`, the utilization among them. `ray` and `python` are fakes that log
 * their argv; nvidia-smi is the harness's fake.
 */
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { DEFAULT_OPTIONS, applyPatch, patchObject } from '../../src/core/index.js';
import { WRAPPER_COMMAND } from '../../src/core/decide/start.js';
import { SHELLS, cleanupTempDirs, gpuLine, run } from './harness.js';

const POD = path.resolve(import.meta.dirname, '../../fixtures/pods/kserve-raw-huggingfaceserver-multinode-head.json');

interface Container {
  name: string;
  command: string[];
  args: string[];
  env: { name: string; value?: string }[];
}

const fakes = mkdtempSync(path.join(tmpdir(), 'vram-preflight-kserve-'));
afterAll(() => {
  cleanupTempDirs();
  rmSync(fakes, { recursive: true, force: true });
});

function fake(name: string): void {
  const file = path.join(fakes, name);
  // One NUL-separated record per call: the program's name, then its argv.
  writeFileSync(file, `#!/bin/sh\nprintf '%s\\0' ${name} "$@" >>'${path.join(fakes, 'calls')}'\nprintf '\\n' >>'${path.join(fakes, 'calls')}'\n`);
  chmodSync(file, 0o755);
}
fake('ray');
fake('python');

describe('the wrapped KServe multi-node head runs KServe\'s script after the wait', () => {
  const pod = JSON.parse(readFileSync(POD, 'utf8')) as { spec: { containers: Container[] } };
  const result = patchObject(pod, { ...DEFAULT_OPTIONS });
  const patched = applyPatch(pod, result.patch) as typeof pod;
  const original = pod.spec.containers[0]!;
  const wrapped = patched.spec.containers[0]!;

  it('is wrapped: the preflight, then the original bash -c start and its args, item for item', () => {
    expect(result.containers[0]?.action).toBe('wrap');
    expect(result.containers[0]?.utilization?.value).toBe(0.92);
    expect(wrapped.command).toEqual(WRAPPER_COMMAND);
    expect(wrapped.args.slice(1)).toEqual(['--', ...original.command, ...original.args]);
  });

  it.each(SHELLS.filter((s) => !s.busyboxOnly))('under $name: ray, the health check, then huggingfaceserver with the args', async (shell) => {
    rmSync(path.join(fakes, 'calls'), { force: true });
    const env = Object.fromEntries(original.env.filter((e) => typeof e.value === 'string').map((e) => [e.name, e.value!]));
    const r = await run(shell, {
      script: wrapped.args[0]!,
      start: wrapped.args.slice(2),
      env: { ...env, POD_IP: '10.0.0.7' },
      readings: [{ out: gpuLine(0, 140000) }],
      pathTail: `${fakes}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin`,
    });
    expect(r.code, r.stderr).toBe(0);
    expect(r.queries).toHaveLength(1);
    expect(r.lines.at(-1)).toMatch(/^vram-preflight: 1 GPU\(s\) checked, .*; starting$/);
    const calls = readFileSync(path.join(fakes, 'calls'), 'utf8').split('\n').filter(Boolean).map((line) => line.split('\0').slice(0, -1));
    expect(calls).toEqual([
      ['ray', 'start', '--head', '--disable-usage-stats', '--include-dashboard', 'false'],
      ['python', './huggingfaceserver/health_check.py', 'registered_nodes', '--retries', '200', '--probe_name', 'runtime_start'],
      ['python', '-m', 'huggingfaceserver', '--model_dir=/mnt/models', '--tensor-parallel-size=8', '--pipeline-parallel-size=2', '--model_name=llama405b', '--gpu-memory-utilization=0.92', '--max-model-len=16384'],
    ]);
  });
});
