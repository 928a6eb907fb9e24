/**
 * The preflight under the faults a GPU node produces (docs/restart-race.md §8), under dash, busybox sh and
 * bash, mostly as PID 1 of a new PID namespace (unshare --pid --fork --kill-child), with fake
 * nvidia-smi variants: hung, hung and deaf to SIGTERM, slow, failing after K calls, fewer GPUs
 * after K calls, a partial row. After every fault: nothing of the run is left running
 * (leftovers() finds every process by an environment marker the whole run inherits).
 *
 * Timing bounds are for a loaded machine: lower bounds are exact (the limit is never cut
 * short), upper bounds allow several seconds of scheduling delay, except where the issue
 * asks for a hard bound (a signal ends the wait within 1 s).
 */
import { afterAll, describe, expect, it } from 'vitest';
import {
  EXIT_BAD_UTILIZATION,
  EXIT_NVIDIA_SMI_UNAVAILABLE,
  EXIT_SIGINT,
  EXIT_SIGTERM,
  EXIT_START_NOT_EXECUTABLE,
  EXIT_START_NOT_FOUND,
  EXIT_TIMEOUT,
} from '../../src/core/preflight/script.js';
import {
  CUDA_TOTAL,
  IS_ROOT,
  SHELLS,
  cleanupTempDirs,
  delay,
  gpuLine,
  leftovers,
  nsPid,
  run,
  settle,
  start,
  waitFor,
  type Result,
  type RunOptions,
  type ShellKind,
} from './harness.js';

afterAll(cleanupTempDirs);

/** Mount namespaces with read-only remounts, and uid 65534, need root. */
const rootOnly = IS_ROOT ? describe.concurrent : describe.skip;

const SHORT = gpuLine(0, 13000);
const FREE = gpuLine(0, 143156);
const WARN = /^vram-preflight: WARNING: cannot check GPU memory, starting vLLM WITHOUT waiting: /;
const FAIL = /^vram-preflight: cannot check GPU memory, not starting vLLM \(on-nvidia-smi-unavailable: fail\): /;
const HUNG = (s: number) => new RegExp(`nvidia-smi did not answer within ${s} s and was killed \\(it hangs like this when the driver is wedged`);

function execed(r: Result, args: string[] = []): void {
  expect(r.code, r.stderr).toBe(0);
  expect(r.engineArgv).toEqual(args);
}

function notExeced(r: Result): void {
  expect(r.engineArgv).toBeUndefined();
}

/** Only our own lines on stderr: no shell noise ("Killed", "Terminated", redirection errors). */
function onlyOurLines(r: Result): void {
  expect(r.stderr.split('\n').filter((l) => l !== '' && !l.startsWith('vram-preflight:'))).toEqual([]);
}

async function nothingLeft(r: Result, ms = 3000): Promise<void> {
  expect(await settle(r.dir, ms)).toEqual([]);
}

/** Runs as PID 1 with a 1 s per-query limit unless told otherwise. */
function fault(shell: ShellKind, opts: RunOptions): Promise<Result> {
  return run(shell, { pid1: true, ...opts, settings: { nvidiaSmiTimeoutSeconds: 1, ...opts.settings } });
}

describe.each(SHELLS)('faults under $name', (shell) => {
  describe.concurrent('hung or slow nvidia-smi', () => {
    it.each([
      ['hangs', { out: '', hang: true }],
      ['hangs and ignores SIGTERM', { out: '', hang: true, ignoreTerm: true }],
    ])('%s on the first query: warn starts vLLM loudly after the per-query limit, nothing left running', async (_n, reading) => {
      const r = await fault(shell, { readings: [reading], args: ['x'] });
      execed(r, ['x']);
      expect(r.ms).toBeGreaterThanOrEqual(1000);
      expect(r.ms).toBeLessThan(1000 + 5000);
      expect(r.queries).toHaveLength(1);
      expect(r.lines).toHaveLength(1);
      expect(r.lines[0]).toMatch(WARN);
      expect(r.lines[0]).toMatch(HUNG(1));
      onlyOurLines(r);
      await nothingLeft(r);
    });

    it.each([
      ['hangs', { out: '', hang: true }],
      ['hangs and ignores SIGTERM', { out: '', hang: true, ignoreTerm: true }],
    ])('%s: fail exits 69 saying nvidia-smi hung, writes the termination message', async (_n, reading) => {
      const r = await fault(shell, { readings: [reading], settings: { onNvidiaSmiUnavailable: 'fail' } });
      expect(r.code).toBe(EXIT_NVIDIA_SMI_UNAVAILABLE);
      notExeced(r);
      expect(r.lines.at(-1)).toMatch(FAIL);
      expect(r.lines.at(-1)).toMatch(HUNG(1));
      expect(r.terminationMessage).toBe(`${r.lines.at(-1)}\n`);
      onlyOurLines(r);
      await nothingLeft(r);
    });

    it('not as PID 1 either: the hung query is killed, not left behind', async () => {
      const r = await run(shell, { readings: [{ out: '', hang: true, ignoreTerm: true }], settings: { nvidiaSmiTimeoutSeconds: 1 } });
      execed(r);
      expect(r.lines[0]).toMatch(HUNG(1));
      expect(r.smiPids).toHaveLength(1);
      await nothingLeft(r);
    });

    // reproducer v0.2/preflight-nvidia-smi-child-holds-pipe: a wrapper's child kept the capture open for ever
    it.each([
      ['warn', false],
      ['fail', false],
      ['warn', true],
      ['fail', true],
    ] as const)('a wrapper whose child hangs holding the output: %s mode (PID 1: %s) ends at the per-query limit, nothing left running', async (mode, pid1) => {
      const r = await run(shell, {
        pid1,
        readings: [{ out: '', hang: true, hangIn: 'child' }],
        settings: { timeoutSeconds: 4, nvidiaSmiTimeoutSeconds: 2, onNvidiaSmiUnavailable: mode },
      });
      if (mode === 'warn') {
        execed(r);
        expect(r.lines[0]).toMatch(WARN);
      } else {
        expect(r.code).toBe(EXIT_NVIDIA_SMI_UNAVAILABLE);
        notExeced(r);
        expect(r.lines.at(-1)).toMatch(FAIL);
      }
      expect(r.lines.at(-1)).toMatch(HUNG(2));
      expect(r.ms).toBeGreaterThanOrEqual(2000);
      expect(r.ms).toBeLessThan(2000 + 5000);
      onlyOurLines(r);
      await nothingLeft(r);
    });

    // The preflight's leftovers (docs/restart-race.md §8, the wrapper whose child hangs): what nvidia-smi starts and leaves behind is no longer its
    // descendant; it carries the run's mark, by which the script finds and ends it.
    it.each([
      ['a copy that escaped while nvidia-smi hangs', 'escaped', 'fail', false],
      ['a copy that escaped while nvidia-smi hangs', 'escaped', 'warn', true],
      ['an orphan of an nvidia-smi that answered', 'orphan', 'fail', false],
      ['an orphan of an nvidia-smi that answered', 'orphan', 'warn', false],
      ['an orphan of an nvidia-smi that answered', 'orphan', 'warn', true],
      ['an orphan of an nvidia-smi that answered', 'orphan', 'fail', true],
    ] as const)('%s, holding the output (%s, %s mode, PID 1: %s): ends at the limit, and nothing outlives the script nor passes to vLLM', async (_n, hangIn, mode, pid1) => {
      const r = await run(shell, {
        pid1,
        readings: [{ out: FREE, hang: true, hangIn }],
        settings: { timeoutSeconds: 30, nvidiaSmiTimeoutSeconds: 1, onNvidiaSmiUnavailable: mode },
      });
      expect(r.lines.at(-1)).toMatch(HUNG(1));
      expect(r.ms).toBeGreaterThanOrEqual(1000 - 100);
      expect(r.ms).toBeLessThan(1000 + 5000);
      if (mode === 'warn') {
        execed(r);
        expect(r.engineChildren).toEqual([]);
      } else {
        expect(r.code).toBe(EXIT_NVIDIA_SMI_UNAVAILABLE);
        notExeced(r);
      }
      onlyOurLines(r);
      await nothingLeft(r);
    });

    it.each([false, true])('a child nvidia-smi leaves running after a good answer is ended before vLLM starts (PID 1: %s)', async (pid1) => {
      const r = await run(shell, { pid1, readings: [{ out: FREE, leaveChild: true }] });
      execed(r);
      expect(r.queries).toHaveLength(1);
      expect(r.engineChildren).toEqual([]);
      onlyOurLines(r);
      await nothingLeft(r);
    });

    it('a process that holds the output and cannot be stopped does not hold the script: it goes on at the limit', async () => {
      const h = start(shell, {
        readings: [{ out: '', hang: true, hangIn: 'escaped-unmarked' }],
        settings: { timeoutSeconds: 30, nvidiaSmiTimeoutSeconds: 1, onNvidiaSmiUnavailable: 'fail' },
      });
      const t0 = performance.now();
      const ms = (await h.exited) - t0;
      // the escaped copy still holds the shell's stderr, so the run is only "done" once it is gone
      const left = leftovers(h.dir);
      for (const p of left) process.kill(p.pid, 'SIGKILL');
      const r = await h.done;
      expect(r.code).toBe(EXIT_NVIDIA_SMI_UNAVAILABLE);
      expect(r.lines.at(-1)).toMatch(HUNG(1));
      expect(ms).toBeGreaterThanOrEqual(1000 - 100);
      expect(ms).toBeLessThan(1000 + 5000);
      // only the copy without the mark (the stand-in for a process no signal ends) is left
      expect(left.map((p) => p.cmd)).toEqual([expect.stringMatching(/sleep 100000$/)]);
    });

    it('slow but under the limit: waits for the answer and goes on polling', async () => {
      const r = await fault(shell, {
        settings: { nvidiaSmiTimeoutSeconds: 3 },
        readings: [{ out: SHORT, delay: 0.4 }, { out: FREE, delay: 0.4 }],
      });
      execed(r);
      expect(r.ms).toBeGreaterThanOrEqual(800);
      expect(r.queries).toHaveLength(2);
      expect(r.lines[0]).toMatch(/^vram-preflight: waiting for GPU memory/);
      expect(r.lines[1]).toMatch(/^vram-preflight: GPU memory arrived after/);
      onlyOurLines(r);
    });

    it('hangs in the middle of a wait: logged, then warn starts vLLM loudly', async () => {
      const r = await fault(shell, { readings: [{ out: SHORT }, { out: '', hang: true }] });
      execed(r);
      expect(r.queries).toHaveLength(2);
      expect(r.lines[0]).toMatch(/^vram-preflight: waiting for GPU memory/);
      expect(r.lines[1]).toMatch(WARN);
      expect(r.lines[1]).toMatch(HUNG(1));
      await nothingLeft(r);
    });

    it('the overall timeout holds with slow queries: each round counts the query time', async () => {
      const r = await fault(shell, {
        settings: { timeoutSeconds: 2, nvidiaSmiTimeoutSeconds: 5 },
        readings: [{ out: SHORT, delay: 0.7 }],
      });
      expect(r.code).toBe(EXIT_TIMEOUT);
      expect(r.ms).toBeGreaterThanOrEqual(2000);
      expect(r.ms).toBeLessThan(2000 + 0.7 * 1000 * 2 + 5000); // at most one more round, and the apps query
      expect(r.queries.length).toBeLessThanOrEqual(4);
      expect(r.lines.at(-1)).toMatch(/^vram-preflight: gave up after \d+\.\d s \(timeout 2 s\)/);
    });

    it('the overall timeout cuts a hung last query short: exit 75, names the hang', async () => {
      const r = await fault(shell, {
        settings: { timeoutSeconds: 3, nvidiaSmiTimeoutSeconds: 30 },
        readings: [{ out: SHORT }, { out: '', hang: true }],
      });
      expect(r.code).toBe(EXIT_TIMEOUT);
      notExeced(r);
      expect(r.ms).toBeGreaterThanOrEqual(3000);
      expect(r.ms).toBeLessThan(3000 + 5000); // not the 30 s per-query limit
      expect(r.appsQueries).toBe(1); // the first waiting line's; nvidia-smi is hung: no question after it
      expect(r.lines.at(-1)).toMatch(
        /^vram-preflight: gave up after \d+\.\d s \(timeout 3 s\) waiting for GPU memory before starting vLLM: nvidia-smi did not answer within the [23] s that were left\. This is the preflight's wait/,
      );
      expect(r.terminationMessage).toBe(`${r.lines.at(-1)}\n`);
      await nothingLeft(r);
    });

    it('a hung --query-compute-apps at the timeout is cut short too, and on a waiting line', async () => {
      const r = await fault(shell, { settings: { timeoutSeconds: 1 }, readings: [{ out: SHORT }], appsHang: true });
      expect(r.code).toBe(EXIT_TIMEOUT);
      // two apps queries, each cut at the 2 s limit: the first waiting line's, and the timeout's
      expect(r.appsQueries).toBe(2);
      expect(r.ms).toBeLessThan(1000 + 2 * 2000 + 5000);
      expect(r.lines[0]).toMatch(/; holding GPU memory: none that nvidia-smi can see from this container \(look on the node\)$/);
      expect(r.lines.at(-1)).toContain('Still holding GPU memory: none that nvidia-smi can see');
      await nothingLeft(r);
    });
  });

  describe('signals during a query', () => {
    it.each([
      ['SIGTERM', EXIT_SIGTERM, true, false],
      ['SIGTERM', EXIT_SIGTERM, true, true],
      ['SIGINT', EXIT_SIGINT, true, false],
      ['SIGTERM', EXIT_SIGTERM, false, true],
    ] as const)('%s while nvidia-smi hangs ends the wait within 1 s (exit %i; PID 1: %s, nvidia-smi ignores TERM: %s)', async (sig, code, pid1, ignoreTerm) => {
      const h = start(shell, {
        pid1,
        settings: { nvidiaSmiTimeoutSeconds: 3, timeoutSeconds: 30 },
        readings: [{ out: '', hang: true, ignoreTerm }],
      });
      await waitFor(() => h.queries().length >= 1);
      await delay(100); // well inside the query
      const pid = await h.shellPid();
      if (pid1) expect(nsPid(pid)).toBe(1);
      const t = performance.now();
      process.kill(pid, sig);
      expect((await h.exited) - t).toBeLessThan(1000);
      const r = await h.done;
      expect(r.code, r.stderr).toBe(code);
      notExeced(r);
      expect(r.lines.at(-1)).toBe(`vram-preflight: ${sig} while waiting for GPU memory, exiting`);
      onlyOurLines(r);
      // As PID 1 its exit ends the namespace at once; otherwise it kills what it started
      // before it exits (not left to the query's own 3 s deadline): nothing is left either way.
      await nothingLeft(r, 1500);
    });

    // reproducer v0.2/preflight-sigterm-leaves-children: not PID 1 (tini, shareProcessNamespace)
    it.each<[string, RunOptions]>([
      ['a slow query', { readings: [{ out: FREE, delay: 8 }] }],
      ['a wrapper whose child hangs', { readings: [{ out: '', hang: true, hangIn: 'child' }] }],
      ['the pause between polls', { readings: [{ out: SHORT }], settings: { pollIntervalSeconds: 20 } }],
    ])('not PID 1, SIGTERM during %s: exit 143, and nothing it started outlives it', async (_n, opts) => {
      const h = start(shell, { ...opts, settings: { nvidiaSmiTimeoutSeconds: 10, timeoutSeconds: 60, ...opts.settings } });
      await waitFor(() => h.queries().length >= 1);
      await delay(300); // inside the query or the pause
      process.kill(await h.shellPid(), 'SIGTERM');
      const r = await h.done;
      expect(r.code, r.stderr).toBe(EXIT_SIGTERM);
      notExeced(r);
      expect(r.lines.at(-1)).toBe('vram-preflight: SIGTERM while waiting for GPU memory, exiting');
      onlyOurLines(r);
      await nothingLeft(r, 1000); // far less than the 8 s query, the 10 s limit or the 20 s pause
    });
  });

  describe.concurrent('the GPU changes under the wait', () => {
    const two = (free0: number, free1: number) => ({ out: gpuLine(0, free0) + gpuLine(1, free1) });
    const cases: Array<[string, RunOptions['readings'], RegExp]> = [
      ['nvidia-smi starts failing', [{ out: SHORT }, { out: '', rc: 15 }], /nvidia-smi failed \(exit status 15\)/],
      ['nvidia-smi lists fewer GPUs', [two(143000, 5000), { out: gpuLine(0, 143000) }], /nvidia-smi now lists 1 GPU\(s\), 2 when the wait began \(did a GPU fall off the bus\?\)/],
      ['nvidia-smi lists more GPUs', [{ out: SHORT }, two(143000, 143000)], /nvidia-smi now lists 2 GPU\(s\), 1 when the wait began/],
      ['nvidia-smi prints a partial row', [{ out: SHORT }, { out: '0, GPU-0aaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee, 1437\n' }], /unreadable line: 0, GPU-0aaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee, 1437/],
      ['nvidia-smi prints a garbled row', [{ out: SHORT }, { out: '0, GPU-0a\u0000\u0007##, 143771, 99x, Disabled, 616\n' }], /GPU 0 memory reads total=143771 free=99x/],
      ['nvidia-smi says the GPU is lost', [{ out: SHORT }, { out: 'Unable to determine the device handle for GPU0000:1B:00.0: GPU is lost.  Reboot the system to recover this GPU\n', rc: 15 }], /nvidia-smi failed \(exit status 15\)/],
    ];

    it.each(cases)('%s: warn logs why and starts vLLM at once', async (_n, readings, why) => {
      const r = await fault(shell, { readings });
      execed(r);
      expect(r.queries).toHaveLength(2);
      expect(r.lines[0]).toMatch(/^vram-preflight: waiting for GPU memory/);
      expect(r.lines[1]).toMatch(WARN);
      expect(r.lines[1]).toMatch(why);
      expect(r.lines).toHaveLength(2);
      await nothingLeft(r);
    });

    it.each(cases)('%s: fail exits 69 with why', async (_n, readings, why) => {
      const r = await fault(shell, { readings, settings: { onNvidiaSmiUnavailable: 'fail' } });
      expect(r.code).toBe(EXIT_NVIDIA_SMI_UNAVAILABLE);
      notExeced(r);
      expect(r.queries).toHaveLength(2);
      expect(r.lines.at(-1)).toMatch(FAIL);
      expect(r.lines.at(-1)).toMatch(why);
      expect(r.terminationMessage).toBe(`${r.lines.at(-1)}\n`);
    });
  });

  describe.concurrent('the start cannot run', () => {
    it.each([
      ['a path that does not exist', EXIT_START_NOT_FOUND, () => ['/nonexistent/bin/vllm', 'serve'], /the start "\/nonexistent\/bin\/vllm" \(the program after --\) does not exist/],
      ['a name not on PATH', EXIT_START_NOT_FOUND, () => ['vllm-not-installed', 'serve'], /the start "vllm-not-installed" \(the program after --\) is not found in PATH=/],
      ['a directory', EXIT_START_NOT_EXECUTABLE, () => ['/usr'], /the start "\/usr" \(the program after --\) is not an executable file/],
      ['a file without x', EXIT_START_NOT_EXECUTABLE, () => ['{dir}/not-executable'], /the start "\/.*\/not-executable" \(the program after --\) is not an executable file/],
    ] as const)('%s: exit %i naming the start, before any nvidia-smi query', async (_n, code, argv, msg) => {
      const r = await fault(shell, { start: [...argv()], readings: [{ out: SHORT }] });
      expect(r.code).toBe(code);
      expect(r.queries).toEqual([]);
      expect(r.lines).toHaveLength(1);
      expect(r.lines[0]).toMatch(/^vram-preflight: cannot start vLLM: /);
      expect(r.lines[0]).toMatch(msg);
      expect(r.terminationMessage).toBe(`${r.lines[0]}\n`);
      onlyOurLines(r);
    });

    it('a start found on PATH by name runs', async () => {
      const r = await fault(shell, { start: ['sh', '-c', 'exit 0'] });
      expect(r.code).toBe(0);
      expect(r.lines[0]).toMatch(/starting$/);
    });
  });

  rootOnly('locked-down container (read-only mounts, no /tmp, no HOME; needs root)', () => {
    it('cold start and a wait, as uid 65534: works, writes nothing', async () => {
      const r = await fault(shell, { lockdown: true, nonRoot: true, readings: [{ out: SHORT }, { out: FREE }], args: ['a'] });
      execed(r, ['a']);
      expect(r.lines).toHaveLength(2);
      onlyOurLines(r);
      // the run directory holds only what the fakes recorded: the script wrote nothing
      expect(r.files.filter((f) => !/^(bin|busybox-bin|engine.*|not-executable|reading\.\d+.*|apps|apps-calls|queries|all-queries|sleeps|deadline-sleeps|smi-pids)$/.test(f))).toEqual([]);
    });

    it('the only write is the termination message, and it works as uid 65534', async () => {
      const r = await fault(shell, { lockdown: true, nonRoot: true, readings: [{ out: '', hang: true }], settings: { onNvidiaSmiUnavailable: 'fail' } });
      expect(r.code).toBe(EXIT_NVIDIA_SMI_UNAVAILABLE);
      expect(r.terminationMessage).toBe(`${r.lines.at(-1)}\n`);
      expect(r.files.filter((f) => !/^(bin|busybox-bin|engine.*|not-executable|reading\.\d+.*|apps|queries|all-queries|sleeps|deadline-sleeps|smi-pids|termination-log)$/.test(f))).toEqual([]);
      await nothingLeft(r);
    });

    it('an unwritable termination-message path: same exit code, the message still on stderr', async () => {
      const r = await fault(shell, {
        lockdown: true,
        nonRoot: true,
        readings: [{ out: SHORT }],
        settings: { onNvidiaSmiUnavailable: 'fail', timeoutSeconds: 1, terminationMessagePath: '/dev/termination-log' },
      });
      expect(r.code).toBe(EXIT_TIMEOUT);
      expect(r.lines.at(-1)).toMatch(/^vram-preflight: gave up after/);
      onlyOurLines(r);
    });
  });

  rootOnly('clock and time (no /proc/uptime: /proc hidden; needs root)', () => {
    it('waits and starts without /proc/uptime (date +%s instead)', async () => {
      const r = await fault(shell, { lockdown: true, noProc: true, readings: [{ out: SHORT }, { out: SHORT }, { out: FREE }] });
      execed(r);
      expect(r.queries).toHaveLength(3);
      expect(r.lines.at(-1)).toMatch(/GPU memory arrived after \d+\.\d s of waiting/);
    });

    // docs/restart-race.md: without /proc/uptime the timeout fires no earlier than timeout_s and at most
    // 2 s + one round (a pause and a query) later; the upper bounds add scheduling slack.
    it('the timeout still fires without /proc/uptime, never early', async () => {
      const r = await fault(shell, { lockdown: true, noProc: true, settings: { timeoutSeconds: 2 }, readings: [{ out: SHORT }] });
      expect(r.code).toBe(EXIT_TIMEOUT);
      expect(r.ms).toBeGreaterThanOrEqual(2000);
      expect(r.ms).toBeLessThan(2000 + 2000 + 6000);
    });

    it('a first reading just before a whole second ends does not make the timeout early', async () => {
      const r = await fault(shell, {
        lockdown: true,
        noProc: true,
        settings: { timeoutSeconds: 2 },
        readings: [{ out: SHORT }],
        fakeDate: 'second-ends',
      });
      expect(r.code).toBe(EXIT_TIMEOUT);
      expect(r.ms).toBeGreaterThanOrEqual(2000);
      expect(r.ms).toBeLessThan(2000 + 2000 + 6000);
    });

    it('a first reading just as a whole second begins makes it late by at most 2 s and a round', async () => {
      const r = await fault(shell, {
        lockdown: true,
        noProc: true,
        settings: { timeoutSeconds: 2 },
        readings: [{ out: SHORT }],
        fakeDate: 'second-begins',
      });
      expect(r.code).toBe(EXIT_TIMEOUT);
      expect(r.ms).toBeGreaterThanOrEqual(2000);
      expect(r.ms).toBeLessThan(2000 + 2000 + 6000);
    });

    it('a wall clock that jumps a day forward does not end the wait early, nor one that goes back stop it', async () => {
      // a fake date: 1000, then +86400 (clock set forward), then 50 (set back), then steady
      const r = await fault(shell, {
        lockdown: true,
        noProc: true,
        settings: { timeoutSeconds: 30 },
        readings: [{ out: SHORT }, { out: SHORT }, { out: SHORT }, { out: SHORT }, { out: FREE }],
        fakeDate: 'jumps',
      });
      execed(r);
      expect(r.queries).toHaveLength(5);
      const waited = Number(/arrived after (\d+\.\d) s/.exec(r.lines.at(-1)!)![1]);
      expect(waited).toBeLessThan(30);
    });

    it('with neither /proc/uptime nor date, each round counts as one poll interval and the timeout fires', async () => {
      const r = await fault(shell, {
        lockdown: true,
        noProc: true,
        settings: { timeoutSeconds: 1, pollIntervalSeconds: 0.1 },
        readings: [{ out: SHORT }],
        fakeDate: 'broken',
      });
      expect(r.code).toBe(EXIT_TIMEOUT);
      expect(r.queries.length).toBeGreaterThanOrEqual(10); // 1 s / 0.1 s
    });
  });
});

describe.each(SHELLS)('utilization from the start\'s arguments under $name', (shell) => {
  const fromArgs = { utilization: 'from-args' as const };
  it.concurrent.each([
    [['--gpu-memory-utilization', '0.5'], '0.5'],
    [['--gpu-memory-utilization=0.95'], '0.95'],
    [['--gpu_memory_utilization', '0.8'], '0.8'],
    [['--gpu_memory_utilization=8e-1'], '0.8'],
    [['--gpu-memory_utilization', '+.75'], '0.75'],
    [['--gpu-memory-utilization', '0.5', '--model', 'm', '--gpu-memory-utilization=0.7'], '0.7'],
    [['--gpu-memory-utilization', '0.1234567'], '0.123457'],
    [['--gpu-memory-utilization', '5e-9'], '0.000001'],
    // reproducer v0.2/preflight-utilization-with-whitespace: float() strips ASCII whitespace
    [['--gpu-memory-utilization', '0.9\n'], '0.9'],
    [['--gpu-memory-utilization', ' 0.9'], '0.9'],
    [['--gpu-memory-utilization', '0.9\r'], '0.9'],
    [['--gpu-memory-utilization=\t0.8\r\n'], '0.8'],
    [['--gpu-memory-utilization', '0.9_5'], '0.95'],
  ])('%j: waits for %s of each GPU', async (args, shown) => {
    const r = await run(shell, { settings: fromArgs, readings: [{ out: gpuLine(0, 143156) }], args });
    execed(r, args);
    expect(r.lines[0]).toContain(` for vLLM: ${shown} x ${CUDA_TOTAL} MiB CUDA total`);
  });

  // A variable the start's shell script expands into vLLM's command line (KServe's
  // ${VLLM_ADDITIONAL_ARGS}), read at run time from the same variable (docs/detection.md §7).
  const fromVariables = { utilization: { words: [{ variable: 'VLLM_ADDITIONAL_ARGS' }], fallback: '0.9' } };
  it.concurrent.each([
    ['--gpu-memory-utilization 0.95', '0.95'],
    ['--max-model-len 8192 --gpu_memory_utilization=0.5 --enable-dbo', '0.5'],
    ['--gpu-memory-utilization 0.6 --gpu-memory-utilization 0.7', '0.7'],
    ['*  --gpu-memory-utilization\t0.8 /*', '0.8'],
    ['', '0.9'],
    ['--enable-dbo', '0.9'],
  ])('$VLLM_ADDITIONAL_ARGS=%j: waits for %s of each GPU', async (value, shown) => {
    const r = await run(shell, { settings: fromVariables, readings: [{ out: gpuLine(0, 143156) }], env: { VLLM_ADDITIONAL_ARGS: value } });
    execed(r);
    expect(r.lines[0]).toContain(` for vLLM: ${shown} x ${CUDA_TOTAL} MiB CUDA total`);
  });

  it.concurrent.each([
    [{ VLLM_ADDITIONAL_ARGS: '--gpu-memory-utilization' }, '"" in $VLLM_ADDITIONAL_ARGS'],
    [{ VLLM_ADDITIONAL_ARGS: '--gpu-memory-utilization=abc' }, '"abc" in $VLLM_ADDITIONAL_ARGS'],
  ])('%j: exits 78 naming the variable, before any nvidia-smi query', async (env, says) => {
    const r = await run(shell, { settings: fromVariables, env });
    expect(r.code).toBe(EXIT_BAD_UTILIZATION);
    notExeced(r);
    expect(r.queries).toEqual([]);
    expect(r.lines.at(-1)).toContain(says);
  });

  it('--gpu-memory-utilization $U: the value is the variable\'s at run time; unset, exit 78', async () => {
    const settings = { utilization: { words: [{ literal: '--gpu-memory-utilization' }, { variable: 'U' }], fallback: '0.9' } };
    const set = await run(shell, { settings, readings: [{ out: gpuLine(0, 143156) }], env: { U: '0.7' } });
    execed(set);
    expect(set.lines[0]).toContain(` for vLLM: 0.7 x ${CUDA_TOTAL} MiB CUDA total`);
    const unset = await run(shell, { settings });
    expect(unset.code).toBe(EXIT_BAD_UTILIZATION);
    expect(unset.lines.at(-1)).toContain('"" in $U');
  });

  // A value read as 1 asks for the whole GPU: vLLM's check can never pass (its context takes memory first).
  it.concurrent.each([
    [['--gpu-memory-utilization', '1']],
    [['--gpu-memory-utilization', '1.0E0']],
    [['--gpu-memory-utilization', '0.99999999']],
  ])('%j reads as 1: exits 78 at once, saying no GPU can pass vLLM\'s check', async (args) => {
    const r = await run(shell, { settings: fromArgs, readings: [{ out: gpuLine(0, 143156) }], args });
    expect(r.code).toBe(EXIT_BAD_UTILIZATION);
    notExeced(r);
    expect(r.queries).toHaveLength(1);
    expect(r.sleeps).toEqual([]);
    expect(r.lines.at(-1)).toContain(`--gpu-memory-utilization 1 asks vLLM for all ${CUDA_TOTAL} MiB of GPU 0`);
  });

  it.concurrent.each([
    [[], 'no --gpu-memory-utilization argument'],
    [['--gpu-memory-utilization'], '--gpu-memory-utilization "" in the start\'s arguments is not a number'],
    [['--gpu-memory-utilization='], '--gpu-memory-utilization "" in the start'],
    [['--gpu-memory-utilization', 'abc'], '"abc"'],
    [['--gpu-memory-utilization', '1.5'], '"1.5"'],
    [['--gpu-memory-utilization', '1.0000001'], '"1.0000001"'],
    [['--gpu-memory-utilization', '0'], '"0"'],
    [['--gpu-memory-utilization', '-0.5'], '"-0.5"'],
    [['--gpu-memory-utilization', '0x1'], '"0x1"'],
    [['--gpu-memory-utilization', 'nan'], '"nan"'],
    [['--gpu-memory-utilization', '0.9\\n'], '"0.9\\n"'],
    [['--gpu-memory-utilization', '0.9_'], '"0.9_"'],
    [['--gpu-memory-utilization', '0. 9'], '"0. 9"'],
    [['--gpu-memory-utilization', '1e-400'], '"1e-400"'],
    [['--gpu-memory-utilization', '$(GPU_UTIL)'], '"$(GPU_UTIL)"'],
    [['--gpu-memory-utilization', '0.9', '--gpu-memory-utilization', 'x'], '"x"'],
  ])('%j: exits 78 naming the wait and the value, before any nvidia-smi query', async (args, msg) => {
    const r = await run(shell, { settings: fromArgs, readings: [{ out: FREE }], args });
    expect(r.code).toBe(EXIT_BAD_UTILIZATION);
    notExeced(r);
    expect(r.queries).toEqual([]);
    expect(r.lines).toHaveLength(1);
    expect(r.lines[0]).toMatch(/^vram-preflight: cannot wait for GPU memory: /);
    expect(r.lines[0]).toContain(msg);
    expect(r.lines[0]).toMatch(/not starting vLLM$/);
    expect(r.terminationMessage).toBe(`${r.lines[0]}\n`);
  });
});

