/**
 * verify's decisions from evidence, without a cluster: the preflight's lines
 * of a log read into what it waited for, each check of a round judged from
 * its evidence, the outcome and exit code of a run, and the duration flags.
 */
import { readFileSync } from 'node:fs';
import { Ajv } from 'ajv';
import { describe, expect, it } from 'vitest';
import { backOffWindow, DEFAULT_ROUND_GAP_MS, KUBELET_BACKOFF_RESET_MS, signalAt } from '../../src/verify/backoff.js';
import { flagDuration, parseDuration } from '../../src/verify/duration.js';
import { runVerify } from '../../src/verify/main.js';
import { renderJson, renderText } from '../../src/verify/render.js';
import { outcomeOf, type Round, type VerifyResult } from '../../src/verify/model.js';
import { preflightEvidence, roundChecks, SIGNAL_COMMAND } from '../../src/verify/restart.js';
import type { Target } from '../../src/verify/model.js';

const target: Target = { namespace: 'ml', pod: 'p', uid: 'u', container: 'model', podChosenBy: '--pod', containerChosenBy: '--container', restartCount: 0, coldStart: { ms: 60_000, source: 'pod' } };
const HOW = '71424 for vLLM: 0.9 x 79360 MiB CUDA total = 79686 - 326 reserved; 768 for its CUDA context; 0 headroom';
const LOG = [
  `vram-preflight: waiting for GPU memory before starting vLLM: GPU 0 has 1200 MiB free, needs 72192 MiB (${HOW}); waited 0.0 s (timeout 300 s); holding GPU memory: pid 7 (71424 MiB)`,
  `vram-preflight: waiting for GPU memory before starting vLLM: GPU 0 has 1200 MiB free, needs 72192 MiB (${HOW}); waited 1.0 s (timeout 300 s); holding GPU memory: none that nvidia-smi can see from this container (look on the node)`,
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
      heldBy: [{ pid: 7, mib: 71424 }],
      start: { gpu: '0', freeMiB: 79000, needMiB: 72192, how: HOW, gpus: 1 },
    });
  });

  it('reads a waiting line of a preflight before 0.5.0 (no holder named): what held the memory is then unknown, not none', () => {
    const old = preflightEvidence(`vram-preflight: waiting for GPU memory before starting vLLM: GPU 0 has 1200 MiB free, needs 72192 MiB (${HOW}); waited 0.0 s (timeout 300 s)\n${LOG.split('\n')[2]}`);
    expect(old).toMatchObject({ waitingLines: 1, firstShort: { gpu: '0', freeMiB: 1200, needMiB: 72192 } });
    expect(old.heldBy).toBeUndefined();
    const none = preflightEvidence(LOG.split('\n')[1]!);
    expect(none.heldBy).toEqual([]);
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
    const base: VerifyResult = { target, before: [{ name: 'wrapped', ok: true, detail: '' }], plan: { yes: false, repeat: 2, timeoutMs: 1, marginMs: 1, allowUnwrapped: false, command: SIGNAL_COMMAND, roundGapMs: DEFAULT_ROUND_GAP_MS }, rounds: [], unread: [] };
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

describe("the kubelet's back-off window (kubelet.go: a container's back-off is forgotten 600 s after its last restart)", () => {
  const T = Date.parse('2026-12-05T12:00:00Z');
  const restarted = { restartCount: 1, runningSince: '2026-12-05T12:00:00Z' };

  it('a container that never restarted: the signal goes at once, outside any window (the kubelet restarts a first exit at once)', () => {
    expect(signalAt({ restartCount: 0, runningSince: '2026-12-05T12:00:00Z' }, T + 5_000, DEFAULT_ROUND_GAP_MS)).toBe(T + 5_000);
    expect(backOffWindow({ restartCount: 0, runningSince: '2026-12-05T12:00:00Z' }, T + 5_000)).toBeUndefined();
    expect(backOffWindow({ restartCount: 3 }, T)).toBeUndefined();
  });

  it('after a restart, the default gap waits past 600 s and 15 s for the clocks; the signal then falls outside the window', () => {
    expect(DEFAULT_ROUND_GAP_MS).toBe(KUBELET_BACKOFF_RESET_MS + 15_000);
    const at = signalAt(restarted, T + 90_000, DEFAULT_ROUND_GAP_MS);
    expect(at).toBe(T + 615_000);
    expect(backOffWindow(restarted, at)).toBeUndefined();
    // Already long enough ago: at once.
    expect(signalAt(restarted, T + 700_000, DEFAULT_ROUND_GAP_MS)).toBe(T + 700_000);
  });

  it('a shorter gap signals inside the window, and says how long after the previous restart', () => {
    const at = signalAt(restarted, T + 20_000, 30_000);
    expect(at).toBe(T + 30_000);
    expect(backOffWindow(restarted, at)).toEqual({ previousRestart: '2026-12-05T12:00:00.000Z', secondsBefore: 30 });
    expect(backOffWindow(restarted, T + 605_000)).toEqual({ previousRestart: '2026-12-05T12:00:00.000Z', secondsBefore: 605 });
    expect(signalAt(restarted, T + 20_000, 0)).toBe(T + 20_000);
  });

  it("in the window, a BackOff is the kubelet's: no-backoff not judged, said so; the race still fails one-restart and no-vllm-error", () => {
    const kubeletBackOff = { previousRestart: '2026-12-05T12:00:00.000Z', secondsBefore: 40 };
    const backOff = [{ message: 'Back-off restarting failed container model in pod p', count: 1 }];
    const backedOff = round({ round: 2, restartCount: { before: 1, after: 2 }, backOff, kubeletBackOff, readyAfterMs: 100_000 });
    expect(judged(backedOff)).toEqual({ 'ready-again': true, 'one-restart': true, 'no-backoff': null, 'preflight-ran': true, 'no-vllm-error': true, 'restart-time': null });
    const checks = roundChecks(backedOff, { target, timeoutMs: 600_000, marginMs: 30_000 }, true);
    expect(checks.find((c) => c.name === 'no-backoff')!.detail).toMatch(/the kubelet's crash-loop back-off, expected, not the race: the signal came 40 s after the container's previous restart/);
    // The same BackOff outside the window fails; in the window without a BackOff, it holds.
    expect(judged({ ...backedOff, kubeletBackOff: undefined })['no-backoff']).toBe(false);
    expect(judged({ ...backedOff, backOff: [], readyAfterMs: 70_000 })).toMatchObject({ 'no-backoff': true, 'restart-time': true });
    // The race in the window: a failed start with vLLM's error still fails the round.
    const race = { ...backedOff, restartCount: { before: 1, after: 3 }, failedStarts: [{ exitCode: 1, freeMemory: ['ValueError: Free memory on device cuda:0 (7.35/79.33 GiB) on startup is less than desired'] }] };
    expect(judged(race)).toMatchObject({ 'one-restart': false, 'no-backoff': null, 'no-vllm-error': false });
  });

  it('the plan says what the gap costs or means, and the report marks the rounds in the window', () => {
    const plan = (roundGapMs: number, repeat = 3): VerifyResult => ({ target, before: [{ name: 'wrapped', ok: true, detail: '' }], plan: { yes: false, repeat, timeoutMs: 600_000, marginMs: 30_000, allowUnwrapped: false, command: SIGNAL_COMMAND, roundGapMs }, rounds: [], unread: [] });
    const where = { server: 'https://k', credentials: 'kubeconfig' };
    expect(renderText(plan(DEFAULT_ROUND_GAP_MS), where)).toMatch(/Plan: kill -TERM 1 in container "model" \(\/bin\/sh -c 'kill -TERM 1', through the exec API\), 3 times, one after the other, each after the first --round-gap 10m15s after the previous restart, as the kubelet backs off any exit of a container within 10m of its last restart, wrapped or not \(kubelet: crashLoopBackOff, forgotten after 600 s\): at least 20m30s in all; after each/);
    expect(renderText(plan(30_000), where)).toMatch(/their BackOff is the kubelet's, reported as such and not as the race, .* they hardly test the race/);
    expect(renderText(plan(DEFAULT_ROUND_GAP_MS, 1), where)).not.toMatch(/round-gap/);
    const later = { ...plan(DEFAULT_ROUND_GAP_MS, 1), target: { ...target, restartCount: 1, runningSince: '2026-12-05T12:00:00Z' } };
    later.plan.firstSignalAt = Date.parse('2026-12-05T12:10:15Z');
    expect(renderText(later, where)).toMatch(/Plan: wait until 2026-12-05T12:10:15\.000Z \(the container last restarted at 2026-12-05T12:00:00Z, less than --round-gap 10m15s ago\); kill -TERM 1/);
    const done: VerifyResult = { ...plan(30_000, 2), plan: { ...plan(30_000, 2).plan, yes: true } };
    done.rounds = [1, 2].map((n) => {
      const r = round({ round: n, restartCount: { before: n - 1, after: n }, ...(n === 2 && { kubeletBackOff: { previousRestart: '2026-12-05T12:00:00.000Z', secondsBefore: 31 }, backOff: [{ message: 'Back-off restarting failed container model in pod p', count: 1 }] }) });
      return { ...r, checks: roundChecks(r, { target, timeoutMs: 600_000, marginMs: 30_000 }, true) };
    });
    const text = renderText(done, where);
    expect(text).toMatch(/Round 2 of 2[^]*in the kubelet's back-off window: the signal came 31 s after the container's previous restart/);
    expect(text).toMatch(/waited for: GPU 0 had 1200 MiB free at the first check and needed 72192 MiB; held by pid 7 \(71424 MiB\)/);
    expect(text).toMatch(/result: passed: 2 of 2/);
    const json = JSON.parse(renderJson(done, where));
    expect(json.rounds.map((r: { kubeletBackOff: unknown }) => r.kubeletBackOff)).toEqual([null, { previousRestart: '2026-12-05T12:00:00.000Z', secondsBefore: 31 }]);
    expect(json.rounds[0].preflight.heldBy).toEqual([{ pid: 7, mib: 71424 }]);
    expect(json.plan).toMatchObject({ roundGapSeconds: 30, firstSignalAt: null });
    // A report with rounds, one in the window, as src/verify.schema.json says.
    const validate = new Ajv({ strict: true, allErrors: true }).compile(JSON.parse(readFileSync(new URL('../../src/verify.schema.json', import.meta.url), 'utf8')));
    expect(validate(json), JSON.stringify(validate.errors)).toBe(true);
    expect(validate(JSON.parse(renderJson(later, where))), JSON.stringify(validate.errors)).toBe(true);
  });
});

describe('--round-gap on the command line', () => {
  const run = async (...args: string[]) => {
    let stderr = '';
    let stdout = '';
    const io = { stdout: { write: (t: string) => (stdout += t) }, stderr: { write: (t: string) => (stderr += t) }, env: {}, readFile: () => '', exists: () => false };
    return { code: await runVerify(['--namespace', 'ml', '--pod', 'p', ...args], io), stdout, stderr };
  };

  it('is a duration from 0s to 1h; anything else is a usage error (exit 2) before any request', async () => {
    expect(await run('--round-gap', '10')).toMatchObject({ code: 2, stdout: '', stderr: expect.stringContaining('--round-gap is "10", not a duration') });
    expect(await run('--round-gap', '2h')).toMatchObject({ code: 2, stderr: expect.stringContaining('--round-gap is "2h", more than 1h') });
  });

  it('is in the help with its default and why', async () => {
    const help = (await run('--help')).stdout;
    expect(help).toMatch(/--round-gap DURATION +how long after the container's previous restart a round's signal waits: the kubelet backs off any exit within 10 minutes of a container's last restart, wrapped or not; shorter: those rounds report that BackOff as the kubelet's, not the race \(default 10m15s\)/);
  });
});

describe('durations, as kubectl takes them', () => {
  it('reads units and sums, refuses a bare number', () => {
    expect([parseDuration('90s', '--timeout'), parseDuration('10m', '--timeout'), parseDuration('1h30m', '--timeout'), parseDuration('1.5m', '--timeout'), parseDuration('500ms', '--timeout')]).toEqual([90_000, 600_000, 5_400_000, 90_000, 500]);
    expect(() => parseDuration('10', '--timeout')).toThrow('--timeout is "10", not a duration');
    expect([flagDuration(615_000), flagDuration(600_000), flagDuration(30_000), flagDuration(0), flagDuration(3_600_000), flagDuration(3_661_000)]).toEqual(['10m15s', '10m', '30s', '0ms', '1h', '1h1m1s']);
    expect(() => parseDuration('0s', '--timeout', { min: 1000 })).toThrow('less than 1.0 s');
  });
});
