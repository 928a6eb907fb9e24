/**
 * The preflight script's behaviour, run the way Kubernetes runs it
 * (`<shell> -ec SCRIPT -- argv...`) under dash, busybox sh and bash.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { CONTEXT_MIB_AUTO } from '../../src/core/preflight/settings.js';
import {
  EXIT_BAD_UTILIZATION,
  EXIT_NO_COMMAND,
  EXIT_NVIDIA_SMI_UNAVAILABLE,
  EXIT_SIGINT,
  EXIT_SIGTERM,
  EXIT_TIMEOUT,
} from '../../src/core/preflight/script.js';
import {
  CUDA_TOTAL,
  HOW_09,
  NEED_09,
  REQUEST_09,
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

const QUERY = '--query-gpu=index,uuid,memory.total,memory.free,mig.mode.current,memory.reserved --format=csv,noheader,nounits';
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

const MIG_FIXTURES = join(import.meta.dirname, '../../fixtures/nvidia-smi/mig');
const migReading = (name: string) => readFileSync(join(MIG_FIXTURES, name), 'utf8');

describe.each(SHELLS)('preflight under $name', (shell) => {
  // The need is vLLM's own rule (docs/restart-race.md, The threshold: vLLM's own rule), request_memory() in vllm/v1/worker/utils.py
  describe.concurrent("vLLM's own rule", () => {
    it('asks ceil((total - reserved) x u) for vLLM plus its CUDA context: free = need - 1 waits, free = need starts', async () => {
      expect(NEED_09).toBe(Math.ceil(CUDA_TOTAL * 0.9) + CONTEXT_MIB_AUTO.oneGpu);
      const r = await run(shell, { readings: [{ out: gpuLine(0, NEED_09 - 1) }, { out: gpuLine(0, NEED_09) }] });
      expectExeced(r);
      expect(r.queries).toHaveLength(2);
      expect(r.lines[0]).toContain(`GPU 0 has ${NEED_09 - 1} MiB free, needs ${NEED_09} MiB (${HOW_09})`);
    });

    // 0.3.0 waited for ceil(143771 x u): at u = 0.5 that is 71886 MiB free, which vLLM's check
    // then failed by 217 MiB on the H200 (field notes); the need is now ceil(143155 x u) + 768.
    it.each([
      ['0.5', 71578 + 768],
      ['0.7', 100209 + 768],
      ['0.85', 121682 + 768],
      ['0.95', 135998 + 768],
    ])('u = %s: waits for %i MiB, not less', async (u, need) => {
      const r = await run(shell, { settings: { utilization: u }, readings: [{ out: gpuLine(0, Math.ceil(TOTAL * Number(u))) }, { out: gpuLine(0, need) }] });
      expectExeced(r);
      expect(r.queries).toHaveLength(2);
      expect(r.lines[0]).toContain(`needs ${need} MiB (${need - 768} for vLLM: ${u} x ${CUDA_TOTAL} MiB CUDA total`);
    });

    it('several GPUs: each pays NCCL on top of the context (the multi-GPU estimate)', async () => {
      const need = REQUEST_09 + CONTEXT_MIB_AUTO.severalGpus;
      const r = await run(shell, { readings: [{ out: gpuLine(0, need - 1) + gpuLine(1, need) }, { out: gpuLine(0, need) + gpuLine(1, need) }] });
      expectExeced(r);
      expect(r.queries).toHaveLength(2);
      expect(r.lines[0]).toContain(`GPU 0 has ${need - 1} MiB free, needs ${need} MiB (${REQUEST_09} for vLLM: 0.9 x ${CUDA_TOTAL} MiB CUDA total = ${TOTAL} - 616 reserved; ${CONTEXT_MIB_AUTO.severalGpus} for its CUDA context; 0 headroom)`);
    });

    it('contextMiB set: the same estimate on one GPU and on several', async () => {
      for (const out of [gpuLine(0, REQUEST_09 + 99), gpuLine(0, REQUEST_09 + 99) + gpuLine(1, REQUEST_09 + 99)]) {
        const r = await run(shell, { settings: { contextMiB: 100 }, readings: [{ out }, { out: gpuLine(0, 143000) + (out.includes('\n1,') ? gpuLine(1, 143000) : '') }] });
        expectExeced(r);
        expect(r.lines[0]).toContain(`needs ${REQUEST_09 + 100} MiB (${REQUEST_09} for vLLM: 0.9 x ${CUDA_TOTAL} MiB CUDA total = ${TOTAL} - 616 reserved; 100 for its CUDA context; 0 headroom)`);
      }
    });

    // An older driver: nvidia-smi answers exit status 2 for a field it does not know.
    it.each([
      [5, 'memory.reserved (before R510)'],
      [4, 'memory.reserved and mig.mode.current (before R450)'],
    ])('a driver that knows %i of the fields (no %s): asked again without them, no reserve assumed (a stricter need)', async (knowsFields) => {
      const need = Math.ceil(TOTAL * 0.9) + CONTEXT_MIB_AUTO.oneGpu;
      const r = await run(shell, { readings: [{ out: gpuLine(0, need - 1), knowsFields }, { out: gpuLine(0, need), knowsFields }] });
      expectExeced(r);
      expect(r.queries).toHaveLength(2);
      expect(r.queries[0]).toMatch(knowsFields === 5 ? /^--query-gpu=index,uuid,memory\.total,memory\.free,mig\.mode\.current --format/ : /^--query-gpu=index,uuid,memory\.total,memory\.free --format/);
      expect(r.lines[0]).toContain(`GPU 0 has ${need - 1} MiB free, needs ${need} MiB (${need - 768} for vLLM: 0.9 x ${TOTAL} MiB CUDA total = ${TOTAL}, no reserve reported; 768 for its CUDA context; 0 headroom)`);
      const cold = await run(shell, { readings: [{ out: gpuLine(0, need), knowsFields }] });
      expectExeced(cold);
      expect(readFileSync(join(cold.dir, 'all-queries'), 'utf8').trim().split('\n')).toHaveLength(7 - knowsFields);
    });

    it('a reserve nvidia-smi cannot tell ([N/A]) counts as none: the stricter need', async () => {
      const need = Math.ceil(TOTAL * 0.9) + CONTEXT_MIB_AUTO.oneGpu;
      const row = (free: number) => gpuLine(0, free, TOTAL, undefined, { reserved: '[N/A]' });
      const r = await run(shell, { readings: [{ out: row(need - 1) }, { out: row(need) }] });
      expectExeced(r);
      expect(r.lines[0]).toContain(`needs ${need} MiB (${need - 768} for vLLM: 0.9 x ${TOTAL} MiB CUDA total = ${TOTAL}, no reserve reported;`);
    });

    it.each(['warn', 'fail'] as const)('u = 1 (%s mode): exits 78 at once, saying vLLM\'s check can never pass, and how far to lower it', async (mode) => {
      const r = await run(shell, { settings: { utilization: '1', onNvidiaSmiUnavailable: mode, timeoutSeconds: 300 }, readings: [{ out: gpuLine(0, 143156) }] });
      expect(r.code).toBe(EXIT_BAD_UTILIZATION);
      expectNotExeced(r);
      expect(r.queries).toHaveLength(1);
      expect(r.sleeps).toEqual([]);
      expect(r.ms).toBeLessThan(5000);
      expect(r.lines).toEqual([
        `vram-preflight: cannot wait for GPU memory: --gpu-memory-utilization 1 asks vLLM for all ${CUDA_TOTAL} MiB of GPU 0 (what CUDA can use of it), but vLLM takes memory for its own CUDA context before it checks, so its check can never pass; lower --gpu-memory-utilization (at most 0.99 leaves room for a 768 MiB context here); not starting vLLM`,
      ]);
      expect(r.terminationMessage).toBe(`${r.lines[0]}\n`);
    });

    it('a need over what the GPU can ever have free is cut to what an idle GPU is sure to show (reserve reported: the CUDA total less 64 MiB)', async () => {
      // a 24 GB card (L4: 23034 MiB) at 0.99: 0.99 x (23034 - 400) + 768 is more than 22634
      const total = 23034;
      const ct = total - 400;
      const row = (free: number) => gpuLine(0, free, total, undefined, { reserved: '400' });
      const r = await run(shell, { settings: { utilization: '0.99' }, readings: [{ out: row(ct - 65) }, { out: row(ct - 64) }] });
      expectExeced(r);
      expect(r.queries).toHaveLength(2);
      expect(r.lines[0]).toContain(`GPU 0 has ${ct - 65} MiB free, needs ${ct - 64} MiB (the CUDA total less 64 MiB an idle GPU may use, as ${Math.ceil(ct * 0.99)} for vLLM: 0.99 x ${ct} MiB CUDA total`);
      expect(r.lines[0]).toContain('would be more: vLLM itself decides)');
    });

    it('without a reported reserve the cut is to the request of vLLM alone: an idle GPU, whose free memory lacks the unreported reserve, ends the wait at once', async () => {
      // The same card on a driver that does not report memory.reserved: 400 MiB read as used when idle. At 0.97
      // vLLM asks 0.97 x 22634 (its CUDA total) = 21955 and has 22634 - ~526 after its context: it starts.
      // The need, 0.97 x 23034 + 768 = 23111, is over 23033; cut to ct - 1 it could never be met on this idle GPU.
      const total = 23034;
      const idleFree = total - 400;
      const r = await run(shell, { settings: { utilization: '0.97' }, readings: [{ out: gpuLine(0, idleFree, total, undefined, { reserved: '[N/A]' }) }] });
      expectExeced(r);
      expect(r.queries.filter((q) => q.includes('memory.free'))).toHaveLength(1);
    });
  });

  // MIG (docs/restart-race.md, MIG): nvidia-smi --query-gpu reads the whole GPU (or nothing), never the instance.
  describe.concurrent('MIG', () => {
    it.each([
      ['insufficient-permissions.csv', 6],
      ['not-available.csv', 6],
      ['privileged-aggregate.csv', 6],
      ['insufficient-permissions.csv', 5],
    ])('recorded %s (a driver knowing %i fields): starts vLLM at once in both modes, saying why it cannot wait', async (file, knowsFields) => {
      for (const mode of ['warn', 'fail'] as const) {
        const r = await run(shell, { settings: { onNvidiaSmiUnavailable: mode }, readings: [{ out: migReading(file), knowsFields }] });
        expectExeced(r);
        expect(r.queries).toHaveLength(1);
        expect(r.sleeps).toEqual([]);
        expect(r.lines).toEqual([
          "vram-preflight: NOTE: GPU 0 is in MIG mode: nvidia-smi reads the whole GPU, not the MIG instance of this container; starting vLLM without waiting",
        ]);
      }
    });

    it.each(['warn', 'fail'] as const)('CUDA_VISIBLE_DEVICES naming a MIG instance (%s mode): starts at once, saying why', async (mode) => {
      const r = await run(shell, {
        settings: { onNvidiaSmiUnavailable: mode },
        env: { CUDA_VISIBLE_DEVICES: 'MIG-1234abcd-5678-90ef-1234-567890abcdef' },
        readings: [{ out: gpuLine(0, 143156) }],
      });
      expectExeced(r);
      expect(r.queries).toHaveLength(1);
      expect(r.lines).toEqual([
        'vram-preflight: NOTE: CUDA_VISIBLE_DEVICES names the MIG instance MIG-1234abcd-5678-90ef-1234-567890abcdef: nvidia-smi reads the whole GPU, not the MIG instance of this container; starting vLLM without waiting',
      ]);
    });
  });

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
        `vram-preflight: 1 GPU(s) checked, tightest: GPU 0 has 143156 MiB free, needs ${NEED_09} MiB (${HOW_09}); starting`,
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
        `vram-preflight: waiting for GPU memory before starting vLLM: GPU 0 has 13000 MiB free, needs ${NEED_09} MiB (${HOW_09}); waited 0.0 s (timeout 30 s); holding GPU memory: none that nvidia-smi can see from this container (look on the node)`,
      );
      // what holds the memory is asked only for a line that is logged: once here
      expect(r.appsQueries).toBe(1);
      expect(r.lines[1]).toMatch(
        /^vram-preflight: GPU memory arrived after (\d+\.\d) s of waiting; 1 GPU\(s\) checked, tightest: GPU 0 has 143156 MiB free, needs 129608 MiB .*; starting$/,
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

    it.each([['7'], ['']])(
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
      ['prints [N/A]', { out: '0, GPU-0aaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee, [N/A], [N/A], [N/A], [N/A]\n' }, /GPU 0 memory reads total=\[N\/A\] free=\[N\/A\]/],
      [
        'prints [Insufficient Permissions]',
        { out: '0, GPU-0aaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee, 143771, [Insufficient Permissions], Disabled, 616\n' },
        /free=\[Insufficient Permissions\]/,
      ],
      ['prints garbage', { out: 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.\n' }, /unreadable line: NVIDIA-SMI has failed/],
      ['prints nothing', { out: '' }, /listed no GPU/],
      ['prints a negative number', { out: '0, GPU-x, 143771, -5, Disabled, 616\n' }, /free=-5/],
      // reproducer v0.2/preflight-implausible-readings: readings that cannot be true are not "enough"
      ['reads 0 MiB total', { out: '0, GPU-x, 0, 0, Disabled, 0\n' }, /GPU 0 memory reads total=0 free=0/],
      ['reads more free than total', { out: '0, GPU-x, 100, 81000, Disabled, 10\n' }, /GPU 0 memory reads total=100 free=81000/],
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
      // each waiting line names what holds the memory (asked for that line only), and the give-up once more
      for (const l of waitingLines(r)) expect(l).toMatch(/; holding GPU memory: pid 4242 \(129000 MiB\), pid 977 \(1200 MiB\)$/);
      expect(r.appsQueries).toBe(waits.length + 1);
      const msg = r.lines.at(-1)!;
      expect(msg).toMatch(
        /^vram-preflight: gave up after \d+\.\d s \(timeout 2 s\) waiting for GPU memory before starting vLLM: GPU 0 has 13000 MiB free, needs 129608 MiB \(128840 for vLLM: 0\.9 x 143155 MiB CUDA total = 143771 - 616 reserved; 768 for its CUDA context; 0 headroom\)\. Still holding GPU memory: pid 4242 \(129000 MiB\), pid 977 \(1200 MiB\)\. This is the preflight's wait, not vLLM's check/,
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
      ['SIGTERM', 'while nvidia-smi runs, before the first sleep', EXIT_SIGTERM, 1, 0],
      ['SIGTERM', 'during the sleep between polls', EXIT_SIGTERM, 2, 150],
      ['SIGINT', 'during the sleep between polls', EXIT_SIGINT, 2, 150],
    ] as const)('%s %s: stops the wait within a second (exit %i)', async (sig, _when, code, afterQueries, extraMs) => {
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
