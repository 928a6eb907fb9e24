/**
 * verify's two forms: text for the operator at the terminal, JSON for CI
 * (src/verify.schema.json). Both are functions of the result alone.
 */
import { escapeControl, redactUserinfo, VERSION } from '../core/index.js';
import { describeColdStart } from './before.js';
import { flagDuration as minutes, seconds } from './duration.js';
import { KUBELET_BACKOFF_RESET_MS } from './backoff.js';
import { outcomeOf, type Check, type Round, type VerifyResult } from './model.js';
import type { MemoryHolder } from '../core/index.js';

export interface VerifyTarget {
  server: string;
  credentials: string;
  context?: string;
}

/** One line of the report: control characters escaped, and a password in a URL (a log line, an event's message) not shown. */
const line = (text: string): string => escapeControl(redactUserinfo(text));
const mark = (c: Check): string => (c.ok === true ? 'ok    ' : c.ok === false ? 'FAILED' : 'n/a   ');

function checkLines(checks: readonly Check[], indent: string): string[] {
  const width = Math.max(...checks.map((c) => c.name.length)) + 1;
  return checks.flatMap((c) => [`${indent}${mark(c)} ${`${c.name}:`.padEnd(width)} ${line(c.detail)}`, ...(c.fix && c.ok === false ? [`${indent}       ${''.padEnd(width)} fix: ${line(c.fix)}`] : [])]);
}

/** What the plan does, in one paragraph (the plan and the error of a refused run both say it). */
export function describePlan(result: VerifyResult): string {
  const p = result.plan;
  const t = result.target;
  const margin = t.coldStart ? `within ${seconds(p.marginMs)} of the cold start` : 'compared with the cold start, when it is known';
  const first = p.firstSignalAt !== undefined ? `wait until ${new Date(p.firstSignalAt).toISOString()} (the container last restarted at ${t.runningSince}, less than --round-gap ${minutes(p.roundGapMs)} ago); ` : '';
  return `${first}kill -TERM 1 in container "${t.container}" (${p.command.map((w) => (w.includes(' ') ? `'${w}'` : w)).join(' ')}, through the exec API), ${p.repeat === 1 ? 'once' : `${p.repeat} times, one after the other, ${gapPlan(p)}`}; after each, watch the pod until the container is Ready again (at most ${seconds(p.timeoutMs)}), then check: restartCount +1 exactly, no BackOff event, the preflight's lines in the new container's log, no "Free memory on device" error from vLLM, SIGTERM -> Ready ${margin}`;
}


/**
 * The timing of the rounds after the first (./backoff.ts): the kubelet backs off any exit of a container
 * within 10 minutes of its last restart, so each waits --round-gap after the previous restart, or the plan
 * says what a shorter gap means.
 */
function gapPlan(p: VerifyResult['plan']): string {
  const why = `the kubelet backs off any exit of a container within ${minutes(KUBELET_BACKOFF_RESET_MS)} of its last restart, wrapped or not (kubelet: crashLoopBackOff, forgotten after 600 s)`;
  if (p.roundGapMs >= KUBELET_BACKOFF_RESET_MS) {
    return `each after the first --round-gap ${minutes(p.roundGapMs)} after the previous restart, as ${why}: at least ${minutes((p.repeat - 1) * p.roundGapMs)} in all`;
  }
  return `each after the first only --round-gap ${minutes(p.roundGapMs)} after the previous restart, within the kubelet's window (${why}): their BackOff is the kubelet's, reported as such and not as the race, and their new container starts at least 10 s late, when the old engine has had that long to give its memory back: they hardly test the race`;
}

const heldBy = (holders: readonly MemoryHolder[]): string => (holders.length === 0 ? 'no process nvidia-smi could see from the container (nvidia-smi on the node shows it)' : holders.map((h) => `pid ${h.pid} (${h.mib} MiB)`).join(', '));

function roundLines(r: Round, of: number): string[] {
  const out = [`Round ${r.round} of ${of}: the signal ${r.signal.outcome}, over ${r.signal.protocol}`, ...checkLines(r.checks, '  ')];
  const p = r.preflight;
  if (p.lines.length > 0) {
    out.push("  the preflight's lines in the new container's log:");
    const shown = p.lines.length <= 8 ? p.lines : [...p.lines.slice(0, 4), `... ${p.lines.length - 6} more ...`, ...p.lines.slice(-2)];
    for (const l of shown) out.push(`    ${line(l)}`);
  }
  if (r.kubeletBackOff) out.push(line(`  in the kubelet's back-off window: the signal came ${r.kubeletBackOff.secondsBefore} s after the container's previous restart (${r.kubeletBackOff.previousRestart}), less than 10 minutes: a BackOff is the kubelet's, not the race`));
  if (p.firstShort) {
    const held = p.heldBy ? `; held by ${heldBy(p.heldBy)}` : p.gaveUp ? '' : " (this preflight's lines do not name what held it, before 0.5.0; nvidia-smi on the node shows it)";
    out.push(line(`  waited for: GPU ${p.firstShort.gpu} had ${p.firstShort.freeMiB} MiB free at the first check and needed ${p.firstShort.needMiB} MiB${held}`));
  }
  if (p.gaveUp?.holders) out.push(line(`  holding GPU memory when it gave up: ${heldBy(p.gaveUp.holders)}`));
  for (const f of r.failedStarts) {
    out.push(line(`  a start that failed: exit ${f.exitCode ?? '?'}${f.reason ? ` (${f.reason})` : ''}${f.message ? `: ${f.message}` : ''}`));
    for (const e of f.freeMemory) out.push(`    ${line(e)}`);
  }
  if (r.previousFreeMemory.length > 0) {
    out.push('  logs --previous:');
    for (const e of r.previousFreeMemory) out.push(`    ${line(e)}`);
  }
  return out;
}

export function renderText(result: VerifyResult, target: VerifyTarget): string {
  const t = result.target;
  const out: string[] = [];
  out.push(line(`vram-preflight ${VERSION} verify: pod ${t.namespace}/${t.pod}, container "${t.container}"${t.image ? ` (image ${t.image})` : ''}${t.node ? ` on node ${t.node}` : ''}`));
  out.push(line(`  ${target.server} (${target.credentials}); the pod by ${t.podChosenBy}, the container by ${t.containerChosenBy}`));
  out.push('', 'Before anything happens:', ...checkLines(result.before, '  '), line(`  cold start: ${describeColdStart(t)}`));
  out.push('', line(`${result.plan.yes ? 'Done' : 'Plan'}: ${describePlan(result)}.`));
  out.push('While the container restarts it serves nothing: with one replica, that is an outage of the model for as long.');
  for (const r of result.rounds) out.push('', ...roundLines(r, result.plan.repeat));
  if (result.stopped) out.push('', line(`stopped: ${result.stopped}`));
  out.push('');
  const outcome = outcomeOf(result);
  const passed = result.rounds.filter((r) => r.checks.every((c) => c.ok !== false)).length;
  if (outcome === 'plan') out.push('result: plan only, nothing was done; run the same with --yes to do it (exit code 0)');
  else if (outcome === 'not-wrapped') out.push(result.plan.yes ? 'result: not wrapped, nothing was done: its restart would race as in the incident; --allow-unwrapped restarts it anyway, to show that (exit code 3)' : 'result: not wrapped: its restart would race as in the incident; nothing was done (exit code 3)');
  else if (outcome === 'passed') out.push(`result: passed: ${passed} of ${result.plan.repeat} restart(s) recovered on the first attempt (exit code 0)`);
  else out.push(`result: FAILED: ${passed} of ${result.plan.repeat} restart(s) recovered on the first attempt${result.rounds.length < result.plan.repeat ? `, ${result.rounds.length} done` : ''}; the checks marked FAILED say what and the evidence is above (exit code 3)`);
  return `${out.join('\n')}\n`;
}

const check = (c: Check) => ({ name: c.name, ok: c.ok, detail: c.detail, fix: c.fix ?? null });

export function renderJson(result: VerifyResult, target: VerifyTarget): string {
  const t = result.target;
  const report = {
    apiVersion: 'vram-preflight.io/v1',
    kind: 'VerifyReport',
    toolVersion: VERSION,
    result: outcomeOf(result),
    cluster: { server: target.server, credentials: target.credentials, context: target.context ?? null },
    target: {
      namespace: t.namespace,
      pod: t.pod,
      uid: t.uid,
      container: t.container,
      image: t.image ?? null,
      node: t.node ?? null,
      podChosenBy: t.podChosenBy,
      containerChosenBy: t.containerChosenBy,
      coldStart: t.coldStart ? { seconds: t.coldStart.ms / 1000, source: t.coldStart.source, from: t.coldStart.from ?? null, to: t.coldStart.to ?? null } : null,
      coldStartUnknown: t.coldStartUnknown ?? null,
    },
    before: result.before.map(check),
    plan: {
      yes: result.plan.yes,
      repeat: result.plan.repeat,
      timeoutSeconds: result.plan.timeoutMs / 1000,
      marginSeconds: result.plan.marginMs / 1000,
      allowUnwrapped: result.plan.allowUnwrapped,
      command: result.plan.command,
      roundGapSeconds: result.plan.roundGapMs / 1000,
      firstSignalAt: result.plan.firstSignalAt === undefined ? null : new Date(result.plan.firstSignalAt).toISOString(),
    },
    rounds: result.rounds.map((r) => ({
      round: r.round,
      passed: r.checks.every((c) => c.ok !== false),
      restartCount: r.restartCount,
      signal: r.signal,
      readySeconds: r.readyAfterMs === undefined ? null : r.readyAfterMs / 1000,
      stateAtEnd: r.stateAtEnd ?? null,
      backOff: r.backOff.map((e) => ({ message: e.message, count: e.count, lastTimestamp: e.lastTimestamp ?? null })),
      kubeletBackOff: r.kubeletBackOff ?? null,
      preflight: {
        lines: r.preflight.lines,
        waitingLines: r.preflight.waitingLines,
        waitedSeconds: r.preflight.waitedSeconds ?? null,
        firstShort: r.preflight.firstShort ?? null,
        heldBy: r.preflight.heldBy ?? null,
        start: r.preflight.start ?? null,
        gaveUp: r.preflight.gaveUp ? { waitedSeconds: r.preflight.gaveUp.waitedSeconds, timeoutSeconds: r.preflight.gaveUp.timeoutSeconds, tightest: r.preflight.gaveUp.tightest ?? null, holders: r.preflight.gaveUp.holders ?? null } : null,
        unchecked: r.preflight.unchecked ?? null,
        unread: r.preflight.unread ?? null,
      },
      failedStarts: r.failedStarts.map((f) => ({ exitCode: f.exitCode ?? null, reason: f.reason ?? null, message: f.message ?? null, freeMemory: f.freeMemory })),
      previousFreeMemory: r.previousFreeMemory,
      checks: r.checks.map(check),
    })),
    stopped: result.stopped ?? null,
    unread: result.unread,
  };
  // Every string as the text shows it, but control characters (JSON escapes them): a password in a URL is not shown.
  return `${JSON.stringify(report, (_key, value: unknown) => (typeof value === 'string' ? redactUserinfo(value) : value), 2)}\n`;
}
