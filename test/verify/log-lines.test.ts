/**
 * The reader of the preflight's log lines (src/core/preflight/lines.ts, which
 * `vram-preflight verify` uses on the new container's log) against what the
 * generated script really prints: the script run as Kubernetes runs it,
 * under dash, busybox sh and bash, with the fake nvidia-smi of
 * test/preflight/harness.ts replaying readings. Every line it prints in
 * these runs is read as what it is (none falls through to `other`), with the
 * numbers the script computed.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { EXIT_SIGTERM, EXIT_TIMEOUT } from '../../src/core/preflight/script.js';
import { awkLine, LINE_FORMATS, readPreflightLine, shellText, type PreflightLine } from '../../src/core/preflight/lines.js';
import { cleanupTempDirs, gpuLine, HOW_09, NEED_09, run, SHELLS, start, waitFor } from '../preflight/harness.js';

afterAll(cleanupTempDirs);

const SHORT = gpuLine(0, 13000);
const FREE = gpuLine(0, 143156);
const tightest = (free: number, gpu = '0') => ({ gpu, freeMiB: free, needMiB: NEED_09, how: HOW_09 });

function readAll(lines: readonly string[]): PreflightLine[] {
  const read = lines.map((line) => readPreflightLine(line));
  expect(read.every((r) => r !== undefined)).toBe(true);
  // Every line of these runs is one of the formats the reader knows.
  expect(read.filter((r) => r!.kind === 'other')).toEqual([]);
  return read as PreflightLine[];
}

describe.each(SHELLS)('the preflight\'s lines under $name, read back', (shell) => {
  it.concurrent('cold start: one start line, no wait', async () => {
    const r = await run(shell, { readings: [{ out: FREE }] });
    expect(r.code, r.stderr).toBe(0);
    expect(readAll(r.lines)).toEqual([{ kind: 'start', gpus: 1, tightest: tightest(143156) }]);
  });

  it.concurrent('a wait that ends: the waiting lines, each with what holds the memory, then the start with the time waited', async () => {
    const r = await run(shell, { settings: { logIntervalSeconds: 1 }, readings: [{ out: SHORT }, { out: SHORT }, { out: gpuLine(0, 130000) }], apps: '4242, 129000\n977, 1200\n' });
    expect(r.code, r.stderr).toBe(0);
    const lines = readAll(r.lines);
    expect(lines[0]).toEqual({ kind: 'waiting', tightest: tightest(13000), moreShort: 0, waitedSeconds: 0, timeoutSeconds: 30, holders: [{ pid: 4242, mib: 129000 }, { pid: 977, mib: 1200 }] });
    const last = lines.at(-1)!;
    expect(last).toMatchObject({ kind: 'start', gpus: 1, tightest: tightest(130000) });
    expect(last.kind === 'start' && last.waitedSeconds).toBeGreaterThan(0);
    expect(lines.slice(0, -1).every((l) => l.kind === 'waiting')).toBe(true);
  });

  it.concurrent('several GPUs short: the tightest and how many more', async () => {
    const r = await run(shell, { readings: [{ out: `${gpuLine(0, 13000)}${gpuLine(1, 20000)}${gpuLine(2, 1000)}` }, { out: `${FREE}${gpuLine(1, 143156)}${gpuLine(2, 143156)}` }] });
    expect(r.code, r.stderr).toBe(0);
    const [first] = readAll(r.lines);
    expect(first).toMatchObject({ kind: 'waiting', moreShort: 2, tightest: { gpu: '2', freeMiB: 1000 } });
  });

  it.concurrent('a timeout: the give-up line with the processes nvidia-smi lists, as in the termination message', async () => {
    const r = await run(shell, { settings: { timeoutSeconds: 1 }, readings: [{ out: SHORT }], apps: '4242, 129000\n977, 1200\n' });
    expect(r.code).toBe(EXIT_TIMEOUT);
    const last = readAll(r.lines).at(-1)!;
    expect(last).toMatchObject({ kind: 'gave-up', timeoutSeconds: 1, tightest: tightest(13000), moreShort: 0, holders: [{ pid: 4242, mib: 129000 }, { pid: 977, mib: 1200 }] });
    expect(last.kind === 'gave-up' && last.waitedSeconds).toBeGreaterThanOrEqual(1);
    expect(readPreflightLine(r.terminationMessage!.trimEnd())).toEqual(last);
  });

  it.concurrent('a timeout where nvidia-smi sees no process from the container', async () => {
    const r = await run(shell, { settings: { timeoutSeconds: 1 }, readings: [{ out: SHORT }], apps: '' });
    expect(r.code).toBe(EXIT_TIMEOUT);
    expect(readAll(r.lines).at(-1)).toMatchObject({ kind: 'gave-up', holders: [] });
  });

  it.concurrent('SIGTERM during the wait', async () => {
    const h = start(shell, { settings: { pollIntervalSeconds: 0.2 }, readings: [{ out: SHORT }] });
    await waitFor(() => h.queries().length >= 1);
    process.kill(await h.shellPid(), 'SIGTERM');
    const r = await h.done;
    expect(r.code).toBe(EXIT_SIGTERM);
    expect(readAll(r.lines).at(-1)).toEqual({ kind: 'signal', signal: 'SIGTERM' });
  });

  it.concurrent('nvidia-smi missing (mode warn): vLLM starts unchecked, and the line says why', async () => {
    const r = await run(shell, { noNvidiaSmi: true });
    expect(r.code, r.stderr).toBe(0);
    const [line] = readAll(r.lines);
    expect(line).toMatchObject({ kind: 'unchecked' });
    expect(line!.kind === 'unchecked' && line!.why).toMatch(/^WARNING: cannot check GPU memory, starting vLLM WITHOUT waiting: /);
  });
});

describe('the one table of formats', () => {
  it('writes each line as awk and shell text from its format, and reads what they print', () => {
    expect(awkLine('tightest', { gpu: 'id[j]', free: 'fr[j]', need: 'need', how: 'how' })).toBe('"GPU " id[j] " has " fr[j] " MiB free, needs " need " MiB (" how ")"');
    // holding '': the shell adds it after awk's text (it asks nvidia-smi only for a line it logs).
    expect(awkLine('waiting', { tightest: 'g', moreShort: 'more', waited: 'e1', timeout: 'ts', holding: '' }, 'wait 33 ')).toBe('"wait 33 waiting for GPU memory before starting vLLM: " g more "; waited " e1 " s (timeout " ts " s)"');
    expect(shellText('holding', { holders: '$apps' })).toBe('; holding GPU memory: $apps');
    expect(shellText('signal', { signal: '$1' })).toBe('$1 while waiting for GPU memory, exiting');
  });

  it('reads lines with kubectl logs --timestamps in front, and leaves other lines alone', () => {
    expect(readPreflightLine('2026-12-05T12:00:00.123456789Z vram-preflight: SIGINT while waiting for GPU memory, exiting')).toEqual({ kind: 'signal', signal: 'SIGINT' });
    expect(readPreflightLine('INFO 12-05 12:00:00 [api_server.py] vram-preflight: is mentioned here')).toBeUndefined();
    expect(readPreflightLine('ValueError: Free memory on device cuda:0 (7.35/79.33 GiB) on startup is less than desired GPU memory utilization')).toBeUndefined();
    expect(readPreflightLine('vram-preflight: cannot start vLLM: the start "vllm" (the program after --) is not found in PATH=/bin')).toEqual({ kind: 'other', text: 'cannot start vLLM: the start "vllm" (the program after --) is not found in PATH=/bin' });
  });

  it('a late give-up (the last query hung) has no reading, and says so', () => {
    const line = `vram-preflight: gave up after 300.1 s (timeout 300 s) waiting for GPU memory before starting vLLM: ${LINE_FORMATS.lateWhy.replace('{left}', '2')}. This is the preflight's wait, not vLLM's check: nvidia-smi hangs when the driver is wedged; look at the node.`;
    expect(readPreflightLine(line)).toEqual({ kind: 'gave-up', waitedSeconds: 300.1, timeoutSeconds: 300, moreShort: 0 });
  });
});
