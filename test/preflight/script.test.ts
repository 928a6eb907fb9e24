/**
 * The preflight script's behaviour, run the way Kubernetes runs it
 * (`<shell> -ec SCRIPT -- argv...`) under dash, busybox sh and bash.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import {
  EXIT_NO_COMMAND,
  EXIT_NVIDIA_SMI_UNAVAILABLE,
  EXIT_SIGINT,
  EXIT_SIGTERM,
  EXIT_TIMEOUT,
} from '../../src/core/preflight.js';
import {
  NEED_09,
  SHELLS,
  TOTAL,
  cleanupTempDirs,
  delay,
  gpuLine,
  isAlive,
  nsPid,
  run,
  start,
  waitFor,
  type Result,
} from './harness.js';

afterAll(cleanupTempDirs);

const QUERY = '--query-gpu=index,uuid,memory.total,memory.free --format=csv,noheader,nounits';
const SHORT = gpuLine(0, 13000);
const FREE = gpuLine(0, 143156);
const UUID0 = 'GPU-0aaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee';
const UUID1 = 'GPU-1aaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee';

function expectExeced(r: Result, args: string[] = []): void {
  expect(r.code, r.stderr).toBe(0);
  expect(r.engineArgv).toEqual(args);
}

function expectNotExeced(r: Result): void {
  expect(r.engineArgv).toBeUndefined();
}

function waitingLines(r: Result): string[] {
  return r.lines.filter((l) => l.startsWith('vram-preflight: waiting for GPU memory'));
}

describe.each(SHELLS)('preflight under $name', (shell) => {
  describe.concurrent('cold start', () => {
    it('queries nvidia-smi once, never sleeps, and execs the start with its argv and env', async () => {
      const r = await run(shell, {
        settings: { pollIntervalSeconds: 30, nvidiaSmiTimeoutSeconds: 60, timeoutSeconds: 120 },
        readings: [{ out: FREE }],
        args: ['serve', '/models/x', '--gpu-memory-utilization', '0.9'],
      });
      expectExeced(r, ['serve', '/models/x', '--gpu-memory-utilization', '0.9']);
      expect(r.queries).toEqual([QUERY]);
      expect(r.sleeps).toEqual([]); // no pause between polls
      expect(r.deadlineSleeps.length).toBeLessThanOrEqual(1); // the query's deadline, ended when nvidia-smi answered
      // a 30 s pause or the 60 s query deadline would show here (the bound allows a loaded machine)
      expect(r.ms).toBeLessThan(25000);
      expect(r.lines).toEqual([
        `vram-preflight: 1 GPU(s) checked, tightest: GPU 0 has 143156 MiB free, needs ${NEED_09} MiB (0.9 x ${TOTAL} MiB total + 0 MiB headroom); starting`,
      ]);
      expect(r.stdout).toBe('');
      // environment arrives untouched; the script's own variables are not exported
      expect(r.engineEnv?.ENGINE_MARKER).toBe('kept');
      expect(r.engineEnv).not.toHaveProperty('util');
      expect(r.engineEnv).not.toHaveProperty('judge');
      expect(r.engineEnv).not.toHaveProperty('CUDA_VISIBLE_DEVICES');
    });

    it('execs in place: the engine gets the shell\'s pid', async () => {
      const h = start(shell, {});
      const pid = h.child.pid;
      const r = await h.done;
      expectExeced(r);
      expect(r.enginePid).toBe(pid);
    });

    it('passes every argv item through verbatim', async () => {
      const nasty = [
        'with space',
        "it's",
        '"double"',
        'line1\nline2',
        '$(reboot)',
        '`reboot`',
        "'; rm -rf /'",
        ';',
        '$$',
        '$HOME',
        '${PATH}',
        'back\\slash\\n',
        '',
        '*',
        '--',
        '-e',
        '&& exit 1 |',
      ];
      const r = await run(shell, { args: nasty });
      expectExeced(r, nasty);
    });

    it('exits 64 when there is nothing after --', async () => {
      const r = await run(shell, { noCommand: true });
      expect(r.code).toBe(EXIT_NO_COMMAND);
      expect(r.queries).toEqual([]);
    });
  });

  describe.concurrent('waiting', () => {
    it('polls until memory is freed, then execs; logs the wait and the arrival', async () => {
      const r = await run(shell, {
        readings: [{ out: SHORT }, { out: SHORT }, { out: SHORT }, { out: FREE }],
        args: ['a'],
      });
      expectExeced(r, ['a']);
      expect(r.queries).toHaveLength(4);
      expect(r.sleeps).toEqual(['0.05', '0.05', '0.05']);
      expect(r.ms).toBeGreaterThanOrEqual(150);
      expect(r.lines).toHaveLength(2);
      expect(r.lines[0]).toBe(
        `vram-preflight: waiting for GPU memory before starting vLLM: GPU 0 has 13000 MiB free, needs ${NEED_09} MiB (0.9 x ${TOTAL} MiB total + 0 MiB headroom); waited 0.0 s (timeout 30 s)`,
      );
      expect(r.lines[1]).toMatch(
        /^vram-preflight: GPU memory arrived after (\d+\.\d) s of waiting; 1 GPU\(s\) checked, tightest: GPU 0 has 143156 MiB free, needs 129394 MiB .*; starting$/,
      );
      const waited = Number(/after (\d+\.\d) s/.exec(r.lines[1]!)![1]);
      expect(waited).toBeGreaterThanOrEqual(0.1);
      expect(waited).toBeLessThan(r.ms / 1000 + 0.1);
    });

    it('is exact at the threshold: free = need - 1 waits, free = need starts', async () => {
      const headroom = 100;
      const need = NEED_09 + headroom;
      const r = await run(shell, {
        settings: { headroomMiB: headroom },
        readings: [{ out: gpuLine(0, need - 1) }, { out: gpuLine(0, need) }],
      });
      expectExeced(r);
      expect(r.queries).toHaveLength(2);
      expect(r.lines[0]).toContain(`GPU 0 has ${need - 1} MiB free, needs ${need} MiB`);
      const cold = await run(shell, { settings: { headroomMiB: headroom }, readings: [{ out: gpuLine(0, need) }] });
      expectExeced(cold);
      expect(cold.queries).toHaveLength(1);
    });

    it('checks every GPU: waits while only one of two is short and names that one', async () => {
      const r = await run(shell, {
        readings: [
          { out: gpuLine(0, 143156) + gpuLine(1, 5000) },
          { out: gpuLine(0, 143156) + gpuLine(1, 5000) },
          { out: gpuLine(0, 143156) + gpuLine(1, 143000) },
        ],
      });
      expectExeced(r);
      expect(r.queries).toHaveLength(3);
      expect(waitingLines(r)).toHaveLength(1);
      expect(r.lines[0]).toContain('GPU 1 has 5000 MiB free');
      expect(r.lines[1]).toContain('2 GPU(s) checked');
    });

    it('counts the other short GPUs in the log line', async () => {
      const r = await run(shell, {
        readings: [{ out: gpuLine(0, 9000) + gpuLine(1, 5000) + gpuLine(2, 140000) }, { out: gpuLine(0, 140000) + gpuLine(1, 140000) + gpuLine(2, 140000) }],
      });
      expectExeced(r);
      expect(r.lines[0]).toContain('GPU 1 has 5000 MiB free');
      expect(r.lines[0]).toContain('1 more GPU(s) short');
    });

    it('falls back to 1 s sleeps when sleep refuses fractions', async () => {
      const r = await run(shell, {
        sleepIntegerOnly: true,
        readings: [{ out: SHORT }, { out: FREE }],
      });
      expectExeced(r);
      expect(r.queries).toHaveLength(2);
      expect(r.sleeps).toEqual(['0.05', '1']);
      expect(r.ms).toBeGreaterThanOrEqual(1000);
    });
  });

  describe.concurrent('CUDA_VISIBLE_DEVICES', () => {
    const twoGpus = { out: gpuLine(0, 143156) + gpuLine(1, 5000) };
    const bothFree = { out: gpuLine(0, 143156) + gpuLine(1, 143156) };

    it.each([
      ['0', 1],
      [UUID0, 1],
      ['GPU-0aaaaaaa', 1],
      ['1', 2],
      [UUID1, 2],
      ['0,1', 2],
      [` ${UUID0} , 1 `, 2],
      ['1aaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee', 2],
    ])('CUDA_VISIBLE_DEVICES=%j checks only those GPUs (%i queries)', async (cvd, queries) => {
      const r = await run(shell, { env: { CUDA_VISIBLE_DEVICES: cvd }, readings: [twoGpus, bothFree] });
      expectExeced(r);
      expect(r.queries).toHaveLength(queries);
      expect(r.engineEnv?.CUDA_VISIBLE_DEVICES).toBe(cvd);
      if (queries === 2) expect(r.lines[0]).toContain('GPU 1 has 5000 MiB free');
    });

    it.each([['7'], ['MIG-1234abcd'], ['']])(
      'CUDA_VISIBLE_DEVICES=%j that matches no listed GPU counts as "cannot check"',
      async (cvd) => {
        const warn = await run(shell, { env: { CUDA_VISIBLE_DEVICES: cvd }, readings: [twoGpus] });
        expectExeced(warn);
        expect(warn.queries).toHaveLength(1);
        expect(warn.lines[0]).toMatch(/^vram-preflight: WARNING: cannot check GPU memory.*CUDA_VISIBLE_DEVICES/);
        const failed = await run(shell, {
          env: { CUDA_VISIBLE_DEVICES: cvd },
          readings: [twoGpus],
          settings: { onNvidiaSmiUnavailable: 'fail' },
        });
        expect(failed.code).toBe(EXIT_NVIDIA_SMI_UNAVAILABLE);
        expectNotExeced(failed);
      },
    );
  });

  describe.concurrent('nvidia-smi unavailable', () => {
    const cases: Array<[string, { out: string; rc?: number } | 'absent', RegExp]> = [
      ['prints [N/A]', { out: '0, GPU-0aaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee, [N/A], [N/A]\n' }, /GPU 0 memory reads total=\[N\/A\] free=\[N\/A\]/],
      [
        'prints [Insufficient Permissions]',
        { out: '0, GPU-0aaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee, 143771, [Insufficient Permissions]\n' },
        /free=\[Insufficient Permissions\]/,
      ],
      ['prints garbage', { out: 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.\n' }, /unreadable line: NVIDIA-SMI has failed/],
      ['prints nothing', { out: '' }, /listed no GPU/],
      ['prints a negative number', { out: '0, GPU-x, 143771, -5\n' }, /free=-5/],
      // reproducer v0.2/preflight-implausible-readings: readings that cannot be true are not "enough"
      ['reads 0 MiB total', { out: '0, GPU-x, 0, 0\n' }, /GPU 0 memory reads total=0 free=0/],
      ['reads more free than total', { out: '0, GPU-x, 100, 81000\n' }, /GPU 0 memory reads total=100 free=81000/],
      ['reads more free than total on one GPU of two', { out: gpuLine(0, 143156) + gpuLine(1, TOTAL + 1) }, /GPU 1 memory reads total=143771 free=143772/],
      ['exits non-zero', { out: gpuLine(0, 143156), rc: 9 }, /nvidia-smi failed \(exit status 9\)/],
      ['is not on PATH', 'absent', /nvidia-smi failed \(exit status 127\)/],
    ];

    it.each(cases)('%s: warn mode warns loudly and execs at once', async (_name, reading, reason) => {
      const r = await run(shell, {
        readings: reading === 'absent' ? undefined : [reading],
        noNvidiaSmi: reading === 'absent',
        settings: { onNvidiaSmiUnavailable: 'warn' },
        args: ['x'],
      });
      expectExeced(r, ['x']);
      expect(r.queries).toHaveLength(reading === 'absent' ? 0 : 1);
      expect(r.sleeps).toEqual([]);
      expect(r.lines).toHaveLength(1);
      expect(r.lines[0]).toMatch(/^vram-preflight: WARNING: cannot check GPU memory, starting vLLM WITHOUT waiting: /);
      expect(r.lines[0]).toMatch(reason);
    });

    it.each(cases)('%s: fail mode exits 69 with a message', async (_name, reading, reason) => {
      const r = await run(shell, {
        readings: reading === 'absent' ? undefined : [reading],
        noNvidiaSmi: reading === 'absent',
        settings: { onNvidiaSmiUnavailable: 'fail' },
      });
      expect(r.code).toBe(EXIT_NVIDIA_SMI_UNAVAILABLE);
      expectNotExeced(r);
      expect(r.sleeps).toEqual([]);
      expect(r.lines.at(-1)).toMatch(/^vram-preflight: cannot check GPU memory, not starting vLLM \(on-nvidia-smi-unavailable: fail\): /);
      expect(r.lines.at(-1)).toMatch(reason);
      expect(r.terminationMessage).toBe(`${r.lines.at(-1)}\n`);
    });

    it('awk missing from the image counts as "cannot check" too', async () => {
      const warn = await run(shell, { noAwk: true, args: ['x'] });
      expectExeced(warn, ['x']);
      expect(warn.lines.at(-1)).toMatch(/WARNING: cannot check GPU memory, starting vLLM WITHOUT waiting: awk is missing or failed \(exit status 127\)/);
      const failed = await run(shell, { noAwk: true, settings: { onNvidiaSmiUnavailable: 'fail' } });
      expect(failed.code).toBe(EXIT_NVIDIA_SMI_UNAVAILABLE);
      expectNotExeced(failed);
    });

    it('a reading that turns unreadable during a wait is treated the same way', async () => {
      const r = await run(shell, { readings: [{ out: SHORT }, { out: 'garbage\n' }] });
      expectExeced(r);
      expect(r.queries).toHaveLength(2);
      expect(r.lines[1]).toMatch(/WARNING/);
    });
  });

  describe.concurrent('timeout', () => {
    it('gives up loudly, names the wait and what holds the GPU, writes the termination message; logs at most every logIntervalSeconds', async () => {
      // Bounds hold on a loaded machine: a round costs a few forks, which can take a
      // large part of a second on a busy 2-core box, so count behaviour, not rounds per second.
      const r = await run(shell, {
        settings: { timeoutSeconds: 2, logIntervalSeconds: 1 },
        readings: [{ out: SHORT }],
        apps: '4242, 129000\n977, 1200\n',
      });
      expect(r.code).toBe(EXIT_TIMEOUT);
      expectNotExeced(r);
      expect(r.ms).toBeGreaterThanOrEqual(2000); // never before the timeout
      expect(r.ms).toBeLessThan(2000 + 8000); // gives up, not long after (one round, however slow)
      expect(r.appsQueries).toBe(1);
      // polling went on: at least one pause and a second query, one pause between two queries
      expect(r.queries.length).toBeGreaterThanOrEqual(2);
      expect(r.sleeps).toEqual(Array(r.queries.length - 1).fill('0.05'));
      // progress: when the wait starts, then no more often than every second, in order
      const waits = waitingLines(r).map((l) => Number(/waited (\d+\.\d) s/.exec(l)![1]));
      expect(waits[0]).toBe(0);
      expect(waits.length).toBeGreaterThanOrEqual(1);
      expect(waits.length).toBeLessThanOrEqual(3); // at 0, >= 1 and >= 2 s at most
      for (let i = 1; i < waits.length; i++) expect(waits[i]! - waits[i - 1]!).toBeGreaterThanOrEqual(1);
      expect(r.lines).toHaveLength(waits.length + 1);
      const msg = r.lines.at(-1)!;
      expect(msg).toMatch(
        /^vram-preflight: gave up after \d+\.\d s \(timeout 2 s\) waiting for GPU memory before starting vLLM: GPU 0 has 13000 MiB free, needs 129394 MiB \(0\.9 x 143771 MiB total \+ 0 MiB headroom\)\. Still holding GPU memory: pid 4242 \(129000 MiB\), pid 977 \(1200 MiB\)\. This is the preflight's wait, not vLLM's check/,
      );
      const gaveUp = Number(/gave up after (\d+\.\d) s/.exec(msg)![1]);
      expect(gaveUp).toBeGreaterThanOrEqual(2);
      expect(gaveUp).toBeLessThanOrEqual(r.ms / 1000 + 0.1);
      expect(msg).not.toMatch(/gpu[-_ ]memory[-_ ]utilization/i);
      expect(r.terminationMessage).toBe(`${msg}\n`);
    });

    it('says when nvidia-smi lists no process, and exits 75 cleanly when the termination path is not writable', async () => {
      const r = await run(shell, {
        settings: { timeoutSeconds: 1, terminationMessagePath: '/nonexistent-dir/termination-log' },
        readings: [{ out: SHORT }],
        apps: '',
      });
      expect(r.code).toBe(EXIT_TIMEOUT);
      expect(r.ms).toBeGreaterThanOrEqual(1000);
      expect(r.lines.at(-1)).toContain('Still holding GPU memory: none that nvidia-smi can see from this container');
      expect(existsSync('/nonexistent-dir/termination-log')).toBe(false);
      // nothing on stderr but our own lines
      expect(r.stderr.split('\n').filter((l) => l !== '' && !l.startsWith('vram-preflight:'))).toEqual([]);
    });
  });

  describe('as PID 1 (unshare --pid --fork --kill-child)', () => {
    it('the cold start execs the engine as PID 1', async () => {
      const r = await run(shell, { pid1: true, args: ['a b'] });
      expectExeced(r, ['a b']);
      expect(r.enginePid).toBe(1);
    });

    it.each([
      ['SIGTERM', EXIT_SIGTERM, 'while nvidia-smi runs, before the first sleep', 1, 0],
      ['SIGTERM', EXIT_SIGTERM, 'during the sleep between polls', 2, 150],
      ['SIGINT', EXIT_SIGINT, 'during the sleep between polls', 2, 150],
    ] as const)('%s %s stops the wait within a second (exit %i)', async (sig, code, _when, afterQueries, extraMs) => {
      const h = start(shell, {
        pid1: true,
        settings: { pollIntervalSeconds: 0.5, timeoutSeconds: 30 },
        readings: [{ out: SHORT, delay: afterQueries === 1 ? 0.3 : 0 }, { out: SHORT }],
      });
      await waitFor(() => h.queries().length >= afterQueries);
      const pid = await h.shellPid();
      expect(nsPid(pid)).toBe(1);
      await delay(extraMs);
      const t = performance.now();
      process.kill(pid, sig);
      const r = await h.done;
      const ms = performance.now() - t;
      expect(ms).toBeLessThan(1000);
      expect(r.code, r.stderr).toBe(code);
      expectNotExeced(r);
      expect(r.lines.at(-1)).toBe(`vram-preflight: ${sig} while waiting for GPU memory, exiting`);
      expect(r.queries).toHaveLength(afterQueries);
    });

    it('control: PID-1 semantics are real (an untrapped PID-1 shell ignores SIGTERM, the same shell as a normal process dies)', async () => {
      const loop = 'while :; do sleep 0.05; done';
      const asInit = start(shell, { pid1: true, script: loop });
      await waitFor(() => existsSync(join(asInit.dir, 'sleeps')));
      const initPid = await asInit.shellPid();
      expect(nsPid(initPid)).toBe(1);
      process.kill(initPid, 'SIGTERM');
      await delay(700);
      expect(isAlive(initPid)).toBe(true);
      process.kill(initPid, 'SIGKILL');
      await asInit.done;

      const plain = start(shell, { script: loop });
      await waitFor(() => existsSync(join(plain.dir, 'sleeps')));
      const t = performance.now();
      process.kill(plain.child.pid!, 'SIGTERM');
      const r = await plain.done;
      expect(r.signal).toBe('SIGTERM');
      expect(performance.now() - t).toBeLessThan(1000);
    });
  });
});
