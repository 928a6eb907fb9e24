/**
 * verify's decisions from evidence, without a cluster: the preflight's lines
 * of a log read into what it waited for, each check of a round judged from
 * its evidence, the outcome and exit code of a run, and the duration flags.
 */
import { describe, expect, it } from 'vitest';
import { parseDuration } from '../../src/verify/duration.js';
import { outcomeOf, type Round, type VerifyResult } from '../../src/verify/model.js';
import { preflightEvidence, roundChecks, SIGNAL_COMMAND } from '../../src/verify/restart.js';
import type { Target } from '../../src/verify/model.js';

const target: Target = { namespace: 'ml', pod: 'p', uid: 'u', container: 'model', podChosenBy: '--pod', containerChosenBy: '--container', restartCount: 0, coldStart: { ms: 60_000, source: 'pod' } };
const HOW = '71424 for vLLM: 0.9 x 79360 MiB CUDA total = 79686 - 326 reserved; 768 for its CUDA context; 0 headroom';
const LOG = [
  `vram-preflight: waiting for GPU memory before starting vLLM: GPU 0 has 1200 MiB free, needs 72192 MiB (${HOW}); waited 0.0 s (timeout 300 s)`,
  `vram-preflight: waiting for GPU memory before starting vLLM: GPU 0 has 1200 MiB free, needs 72192 MiB (${HOW}); waited 1.0 s (timeout 300 s)`,
  `vram-preflight: GPU memory arrived after 4.2 s of waiting; 1 GPU(s) checked, tightest: GPU 0 has 79000 MiB free, needs 72192 MiB (${HOW}); starting`,
  'INFO 12-05 12:00:00 [vllm-standin] Starting vLLM API server on http://0.0.0.0:8000',
].join('\n');

const round = (over: Partial<Omit<Round, 'checks'>> = {}): Omit<Round, 'checks'> => ({
  round: 1,
  restartCount: { before: 0, after: 1 },
  signal: { command: SIGNAL_COMMAND, protocol: 'v5.channel.k8s.io', outcome: 'sent' },
  readyAfterMs: 70_000,
  backOff: [],
  preflight: preflightEvidence(LOG),
  failedStarts: [],
  previousFreeMemory: [],
  ...over,
});
const judged = (r: Omit<Round, 'checks'>, wrapped = true, t: Target = target) => Object.fromEntries(roundChecks(r, { target: t, timeoutMs: 600_000, marginMs: 30_000 }, wrapped).map((c) => [c.name, c.ok]));

describe('the evidence of a round', () => {
  it('reads the preflight\'s lines of a log: how long it waited, for how much, on which GPU; other lines left alone', () => {
    expect(preflightEvidence(LOG)).toEqual({
      lines: LOG.split('\n').slice(0, 3),
      waitingLines: 2,
      waitedSeconds: 4.2,
      firstShort: { gpu: '0', freeMiB: 1200, needMiB: 72192, how: HOW },
      start: { gpu: '0', freeMiB: 79000, needMiB: 72192, how: HOW, gpus: 1 },
    });
  });

  it('judges each check of the ticket from it', () => {
    expect(judged(round())).toEqual({ 'ready-again': true, 'one-restart': true, 'no-backoff': true, 'preflight-ran': true, 'no-vllm-error': true, 'restart-time': true });
    // 60 s cold start + 30 s margin: 91 s is too slow.
    expect(judged(round({ readyAfterMs: 91_000 }))['restart-time']).toBe(false);
    expect(judged(round(), true, { ...target, coldStart: undefined, coldStartUnknown: 'x' })['restart-time']).toBeNull();
    const incident = round({
      restartCount: { before: 0, after: 2 },
      backOff: [{ message: 'Back-off restarting failed container model in pod p', count: 1 }],
      preflight: preflightEvidence('INFO starting\n'),
      failedStarts: [{ exitCode: 1, freeMemory: ['ValueError: Free memory on device cuda:0 (7.35/79.33 GiB) on startup is less than desired GPU memory utilization (0.9, 71.4 GiB).'] }],
    });
    expect(judged(incident, false)).toEqual({ 'ready-again': true, 'one-restart': false, 'no-backoff': false, 'preflight-ran': false, 'no-vllm-error': false, 'restart-time': true });
    const timedOut = round({ readyAfterMs: undefined, stateAtEnd: 'running since T, not ready', preflight: preflightEvidence(LOG.split('\n')[0]!) });
    expect(judged(timedOut)).toMatchObject({ 'ready-again': false, 'preflight-ran': false, 'restart-time': null });
    const gaveUp = preflightEvidence(`vram-preflight: gave up after 300.2 s (timeout 300 s) waiting for GPU memory before starting vLLM: GPU 0 has 1200 MiB free, needs 72192 MiB (${HOW}). Still holding GPU memory: pid 4242 (70000 MiB). This is the preflight's wait, not vLLM's check: find what keeps the memory (often an orphaned vLLM EngineCore or worker, or a sidecar) or raise the preflight timeout.`);
    expect(gaveUp.gaveUp).toMatchObject({ waitedSeconds: 300.2, holders: [{ pid: 4242, mib: 70000 }] });
    expect(judged(round({ preflight: gaveUp }))['preflight-ran']).toBe(false);
  });

  it('the outcome: a plan, not wrapped, passed only when every round of --repeat held', () => {
    const base: VerifyResult = { target, before: [{ name: 'wrapped', ok: true, detail: '' }], plan: { yes: false, repeat: 2, timeoutMs: 1, marginMs: 1, allowUnwrapped: false, command: SIGNAL_COMMAND }, rounds: [], unread: [] };
    const passedRound: Round = { ...round(), checks: [{ name: 'one-restart', ok: true, detail: '' }] };
    const failedRound: Round = { ...round(), checks: [{ name: 'one-restart', ok: false, detail: '' }] };
    expect(outcomeOf(base)).toBe('plan');
    expect(outcomeOf({ ...base, before: [{ name: 'wrapped', ok: false, detail: '' }] })).toBe('not-wrapped');
    const yes = { ...base, plan: { ...base.plan, yes: true } };
    expect(outcomeOf({ ...yes, rounds: [passedRound, passedRound] })).toBe('passed');
    expect(outcomeOf({ ...yes, rounds: [passedRound] })).toBe('failed');
    expect(outcomeOf({ ...yes, rounds: [passedRound, failedRound] })).toBe('failed');
  });
});

describe('durations, as kubectl takes them', () => {
  it('reads units and sums, refuses a bare number', () => {
    expect([parseDuration('90s', '--timeout'), parseDuration('10m', '--timeout'), parseDuration('1h30m', '--timeout'), parseDuration('1.5m', '--timeout'), parseDuration('500ms', '--timeout')]).toEqual([90_000, 600_000, 5_400_000, 90_000, 500]);
    expect(() => parseDuration('10', '--timeout')).toThrow('--timeout is "10", not a duration');
    expect(() => parseDuration('0s', '--timeout', { min: 1000 })).toThrow('less than 1.0 s');
  });
});
