/**
 * One restart, as the ticket's step 1: `kill -TERM 1` in the container
 * through the exec API (its shell's builtin kill: a vLLM image may have no
 * /bin/kill, and every wrapped container has /bin/sh), then the pod watched
 * until the container is Ready again or the round's deadline, then the
 * evidence: restartCount before and after, the pod's BackOff events since the
 * signal (events counted before it, so clocks do not matter), the
 * preflight's lines in the new container's log (read with the table they are
 * written from, src/core/preflight/lines.ts), every start that failed on the
 * way (its exit, its termination message, vLLM's "Free memory on device"
 * line in its log), `logs --previous`, and SIGTERM to Ready against the
 * pod's cold start.
 */
import { asObject, type Plain, PreflightError, readPreflightLine } from '../core/index.js';
import { execInContainer, KubernetesApiError, type ExecRequest, type ExecResult, type KubernetesClient } from '../kubernetes/index.js';
import { backOffWindow } from './backoff.js';
import { describeState, statusOf } from './before.js';
import { seconds } from './duration.js';
import type { Check, FailedStart, PreflightEvidence, Round, Target } from './model.js';

/** The signal: PID 1 of the container is vLLM (the preflight execs it); the shell's kill is a builtin. */
export const SIGNAL_COMMAND: readonly string[] = ['/bin/sh', '-c', 'kill -TERM 1'];

/** vLLM's start-up check failing (vllm/v1/worker/utils.py request_memory). */
const VLLM_SHORT = 'Free memory on device';

/** What is read of a log: its head (the preflight's lines come first), and of `--previous` its tail (vLLM's error comes last). */
const LOG_HEAD_BYTES = 1 << 20;
const LOG_TAIL_LINES = 2000;
/** The signal's exec: the command is a shell's builtin kill, over in moments; the connection is cut after this. */
const SIGNAL_LIMIT_MS = 30_000;

export interface RoundSettings {
  target: Target;
  round: number;
  /** Epoch ms by which the container must be Ready again. */
  readyBy: number;
  timeoutMs: number;
  marginMs: number;
  /** How the signal is sent; the exec API unless a test plays the kubelet's part (there is no other use). */
  signal?: (request: ExecRequest) => Promise<ExecResult>;
}

export const podPath = (t: Target): string => `/api/v1/namespaces/${encodeURIComponent(t.namespace)}/pods/${encodeURIComponent(t.pod)}`;
const logPath = (t: Target, query: Record<string, string>): string => `${podPath(t)}/log?${new URLSearchParams({ container: t.container, ...query })}`;

/** Lines of a log that hold vLLM's error, each cut to 500 characters, at most 5. */
function freeMemoryLines(text: string): string[] {
  return text
    .split('\n')
    .filter((line) => line.includes(VLLM_SHORT))
    .slice(0, 5)
    .map((line) => line.trimEnd().slice(0, 500));
}

/** Events of the pod by name, with their counts (series counted as the API server aggregates them). */
async function podEvents(client: KubernetesClient, t: Target): Promise<Map<string, Plain>> {
  const items = await client.list(`/api/v1/namespaces/${encodeURIComponent(t.namespace)}/events?fieldSelector=${encodeURIComponent(`involvedObject.uid=${t.uid}`)}`, 500);
  return new Map(items.map((e) => [String(asObject(e.metadata)?.name), e]));
}

const countOf = (event: Plain | undefined): number => Number(event?.count ?? asObject(event?.series)?.count ?? 1);

async function readLog(client: KubernetesClient, t: Target, query: Record<string, string>): Promise<{ text: string } | { unread: string }> {
  try {
    return await client.text(logPath(t, { limitBytes: String(LOG_HEAD_BYTES), ...query }), { maxBytes: LOG_HEAD_BYTES });
  } catch (error) {
    if (error instanceof KubernetesApiError) return { unread: error.message };
    throw error;
  }
}

/** The preflight's lines of a log, read into evidence. */
export function preflightEvidence(text: string): PreflightEvidence {
  const evidence: PreflightEvidence = { lines: [], waitingLines: 0 };
  for (const raw of text.split('\n')) {
    const line = readPreflightLine(raw);
    if (!line) continue;
    evidence.lines.push(raw.trimEnd().slice(0, 1000));
    if (line.kind === 'waiting') {
      evidence.waitingLines++;
      evidence.firstShort ??= line.tightest;
      if (line.holders) evidence.heldBy ??= line.holders;
    } else if (line.kind === 'start') {
      evidence.waitedSeconds = line.waitedSeconds ?? 0;
      evidence.start = { ...line.tightest, gpus: line.gpus };
    } else if (line.kind === 'gave-up') {
      evidence.gaveUp = { waitedSeconds: line.waitedSeconds, timeoutSeconds: line.timeoutSeconds, ...(line.tightest && { tightest: line.tightest }), ...(line.holders && { holders: line.holders }) };
    } else if (line.kind === 'unchecked') {
      evidence.unchecked = line.why;
    }
  }
  return evidence;
}

/** The ticket's checks of one round, from its evidence. */
export function roundChecks(r: Omit<Round, 'checks'>, settings: Pick<RoundSettings, 'target' | 'timeoutMs' | 'marginMs'>, wrapped: boolean): Check[] {
  const t = settings.target;
  const checks: Check[] = [];
  checks.push(
    r.readyAfterMs !== undefined
      ? { name: 'ready-again', ok: true, detail: `container "${t.container}" Ready again ${seconds(r.readyAfterMs)} after the signal` }
      : { name: 'ready-again', ok: false, detail: `container "${t.container}" not Ready again within ${seconds(settings.timeoutMs)} (--timeout): ${r.stateAtEnd ?? 'state unknown'}`, fix: 'see the evidence below; kubectl describe pod shows the same' },
  );
  const added = r.restartCount.after - r.restartCount.before;
  checks.push({
    name: 'one-restart',
    ok: added === 1,
    detail: `restartCount ${r.restartCount.before} -> ${r.restartCount.after} (${added === 1 ? '+1 exactly' : added === 0 ? 'no restart: the signal did not end the container' : `+${added}: ${added - 1} failed start(s) on the way`})`,
  });
  const backOffs = r.backOff.map((e) => `"${e.message}" (x${e.count})`).join('; ');
  // In the kubelet's window (./backoff.ts) a BackOff is the kubelet's own, expected: not judged, said as such; the race shows in one-restart and no-vllm-error.
  const kubelet = r.kubeletBackOff && r.backOff.length > 0 ? r.kubeletBackOff : undefined;
  checks.push(
    r.backOff.length === 0
      ? { name: 'no-backoff', ok: true, detail: 'no BackOff event for the pod since the signal' }
      : kubelet
        ? {
            name: 'no-backoff',
            ok: null,
            detail: `BackOff since the signal: ${backOffs}: the kubelet's crash-loop back-off, expected, not the race: the signal came ${kubelet.secondsBefore} s after the container's previous restart, and the kubelet backs off any exit within 10 minutes of that, wrapped or not (one-restart and no-vllm-error judge the race; --round-gap at its default waits past that window)`,
          }
        : { name: 'no-backoff', ok: false, detail: `BackOff since the signal: ${backOffs}` },
  );
  const p = r.preflight;
  let ran: Check;
  if (!wrapped) ran = { name: 'preflight-ran', ok: false, detail: 'the container is not wrapped: no wait ran before vLLM' };
  else if (p.unread !== undefined) ran = { name: 'preflight-ran', ok: false, detail: `the new container's log could not be read: ${p.unread}` };
  else if (p.start) ran = { name: 'preflight-ran', ok: true, detail: p.waitingLines > 0 ? `the preflight waited ${p.waitedSeconds} s for GPU memory (${p.waitingLines} waiting line(s)), then started vLLM` : 'the preflight found the memory at its first check and started vLLM at once' };
  else if (p.gaveUp) ran = { name: 'preflight-ran', ok: false, detail: `the preflight gave up after ${p.gaveUp.waitedSeconds} s (its timeout ${p.gaveUp.timeoutSeconds} s): the memory did not come back`, fix: 'find what holds the GPU (docs/restart-race.md, "Reading a timeout")' };
  else if (p.unchecked) ran = { name: 'preflight-ran', ok: false, detail: `vLLM started without the wait: ${p.unchecked}`, fix: 'see docs/restart-race.md, "Log lines"' };
  else if (p.waitingLines > 0) ran = { name: 'preflight-ran', ok: false, detail: `the preflight was still waiting at the end (${p.waitingLines} waiting line(s))` };
  else ran = { name: 'preflight-ran', ok: false, detail: "no line of the preflight in the new container's log" };
  checks.push(ran);
  const errors = [...r.failedStarts.flatMap((f) => f.freeMemory), ...r.previousFreeMemory];
  checks.push(errors.length === 0 ? { name: 'no-vllm-error', ok: true, detail: `no "${VLLM_SHORT}" error from vLLM` } : { name: 'no-vllm-error', ok: false, detail: `vLLM's start-up check failed: ${errors[0]}` });
  const cold = t.coldStart;
  if (r.readyAfterMs === undefined) checks.push({ name: 'restart-time', ok: null, detail: 'not Ready again: no time to compare' });
  else if (!cold) checks.push({ name: 'restart-time', ok: null, detail: `SIGTERM -> Ready ${seconds(r.readyAfterMs)}; not compared, the cold start is unknown (${t.coldStartUnknown})` });
  else if (kubelet && r.readyAfterMs > cold.ms + settings.marginMs) {
    checks.push({ name: 'restart-time', ok: null, detail: `SIGTERM -> Ready ${seconds(r.readyAfterMs)}, cold start ${seconds(cold.ms)}: not compared, the kubelet's back-off is in it` });
  } else {
    const within = r.readyAfterMs <= cold.ms + settings.marginMs;
    checks.push({
      name: 'restart-time',
      ok: within,
      detail: `SIGTERM -> Ready ${seconds(r.readyAfterMs)}, cold start ${seconds(cold.ms)} (${(r.readyAfterMs / Math.max(cold.ms, 1)).toFixed(2)}x): ${within ? 'within' : 'more than'} ${seconds(settings.marginMs)} of it`,
    });
  }
  return checks;
}

/** One round: the signal, the watch, the evidence, the checks. */
export async function restartOnce(client: KubernetesClient, settings: RoundSettings, wrapped: boolean): Promise<Round> {
  const t = settings.target;
  const before = await client.get(podPath(t));
  if (String(asObject(before.metadata)?.uid) !== t.uid) throw new PreflightError('CANNOT_VERIFY', `pod ${t.namespace}/${t.pod} was replaced (another uid) before round ${settings.round}`, { fix: 'run verify again on the new pod' });
  const statusBefore = statusOf(before, t.container);
  if (statusBefore?.ready !== true) throw new PreflightError('CANNOT_VERIFY', `container "${t.container}" is not ready before round ${settings.round}: ${describeState(statusBefore)}`, { fix: 'wait until it is Ready, then run verify again' });
  const restartsBefore = Number(statusBefore.restartCount ?? 0);
  const runningSince = asObject(asObject(statusBefore.state)?.running)?.startedAt;
  const idBefore = statusBefore.containerID;
  const eventsBefore = await podEvents(client, t);

  const sent = Date.now();
  const kubeletBackOff = backOffWindow({ restartCount: restartsBefore, ...(typeof runningSince === 'string' && { runningSince }) }, sent);
  let exec: Awaited<ReturnType<typeof execInContainer>>;
  try {
    const request: ExecRequest = { namespace: t.namespace, pod: t.pod, container: t.container, command: SIGNAL_COMMAND, deadline: Math.min(Date.now() + SIGNAL_LIMIT_MS, settings.readyBy) };
    exec = await (settings.signal ? settings.signal(request) : execInContainer(client, request));
  } catch (error) {
    if (!(error instanceof KubernetesApiError) || error.status === 401 || error.status === 403) throw error;
    // The API server opens the exec on the pod's kubelet: it answers with an error when it cannot (no such node, the kubelet unreachable, the container gone).
    throw new PreflightError('CANNOT_VERIFY', `the API server could not run the signal in container "${t.container}" on node ${t.node ?? '(none)'}: ${error.message}`, {
      fix: `check that the node is Ready and its kubelet reachable from the API server (kubectl get node ${t.node ?? 'NODE'}; kubectl -n ${t.namespace} exec ${t.pod} -c ${t.container} -- true)`,
    });
  }
  // 1 to 127: kill itself failed (not permitted, no such process). 128 and up: the shell was killed, as the container it ran in stopped: the signal went.
  if (exec.exitCode !== undefined && exec.exitCode !== 0 && exec.exitCode < 128) {
    throw new PreflightError('CANNOT_VERIFY', `the signal failed in container "${t.container}": ${SIGNAL_COMMAND.join(' ')} exited ${exec.exitCode}${exec.stderr.trim() ? `: ${exec.stderr.trim().slice(0, 300)}` : ''}`, {
      fix: 'the container needs /bin/sh, whose kill is a builtin, and may not ignore SIGTERM as PID 1; run the same with kubectl exec to see why',
    });
  }
  const outcome =
    exec.exitCode === 0
      ? 'sent (the command exited 0)'
      : exec.exitCode !== undefined
        ? `sent (the command ended with the container, exit ${exec.exitCode})`
        : exec.status
          ? `sent (${String(exec.status.message ?? exec.status.status)})`
          : 'sent (the exec ended with the container, without an exit status)';

  const failedStarts: FailedStart[] = [];
  const seenFailures = new Set<string>();
  let latest = before;
  let readyAt: number | undefined;
  let gone: string | undefined;
  let resourceVersion = String(asObject(before.metadata)?.resourceVersion ?? '');

  /** A start that failed since the signal (not the container the signal ended): its exit, message and vLLM's error. */
  const noteFailures = async (pod: Plain): Promise<void> => {
    const status = statusOf(pod, t.container);
    const current = asObject(asObject(status?.state)?.terminated);
    const last = asObject(asObject(status?.lastState)?.terminated);
    for (const [terminated, previous] of [[current, false], [last, true]] as const) {
      const id = typeof terminated?.containerID === 'string' ? terminated.containerID : undefined;
      if (!terminated || id === undefined || id === idBefore || seenFailures.has(id) || terminated.exitCode === 0) continue;
      seenFailures.add(id);
      const log = await readLog(client, t, previous ? { previous: 'true', tailLines: String(LOG_TAIL_LINES) } : { tailLines: String(LOG_TAIL_LINES) });
      failedStarts.push({
        containerId: id,
        ...(typeof terminated.exitCode === 'number' && { exitCode: terminated.exitCode }),
        ...(typeof terminated.reason === 'string' && { reason: terminated.reason }),
        ...(typeof terminated.message === 'string' && terminated.message.trim() !== '' && { message: terminated.message.trim().slice(0, 1000) }),
        freeMemory: 'text' in log ? freeMemoryLines(log.text) : [],
      });
    }
  };
  const isReadyAgain = (pod: Plain): boolean => {
    const status = statusOf(pod, t.container);
    return Number(status?.restartCount ?? 0) > restartsBefore && status?.ready === true && status.containerID !== idBefore && asObject(asObject(status.state)?.running) !== undefined;
  };

  watching: while (Date.now() < settings.readyBy) {
    const opened = Date.now();
    const left = Math.ceil((settings.readyBy - Date.now()) / 1000);
    const query = new URLSearchParams({ fieldSelector: `metadata.name=${t.pod}`, watch: '1', allowWatchBookmarks: 'true', resourceVersion, timeoutSeconds: String(Math.max(1, Math.min(300, left))) });
    // Each event holds the pod: within the client's limit for one object, as a GET of it.
    for await (const event of client.watch(`/api/v1/namespaces/${encodeURIComponent(t.namespace)}/pods?${query}`, { deadline: settings.readyBy })) {
      if (event.type === 'ERROR') {
        // 410 Gone: the resourceVersion is too old to watch from; start again from the pod as it is now.
        if (Number(event.object.code) === 410) {
          latest = await client.get(podPath(t));
          resourceVersion = String(asObject(latest.metadata)?.resourceVersion ?? '');
          continue watching;
        }
        throw new PreflightError('KUBERNETES_API', `the watch of pod ${t.namespace}/${t.pod} failed: ${String(event.object.message ?? 'no message')}`, { fix: 'check the API server, then run verify again' });
      }
      resourceVersion = String(asObject(event.object.metadata)?.resourceVersion ?? resourceVersion);
      if (event.type === 'BOOKMARK') continue;
      if (event.type === 'DELETED' || String(asObject(event.object.metadata)?.uid) !== t.uid) {
        gone = `the pod was deleted during the round (${event.type === 'DELETED' ? 'DELETED' : 'replaced'})`;
        break watching;
      }
      latest = event.object;
      await noteFailures(latest);
      if (isReadyAgain(latest)) {
        readyAt = Date.now();
        break watching;
      }
    }
    // A watch the API server ended at once (not its timeoutSeconds): do not ask again in a tight loop.
    if (Date.now() - opened < 1000) await new Promise((resolve) => setTimeout(resolve, 1000));
  }

  const statusAfter = statusOf(latest, t.container);
  const eventsAfter = await podEvents(client, t);
  const backOff = [...eventsAfter.entries()]
    .filter(([name, e]) => e.reason === 'BackOff' && countOf(e) > (eventsBefore.has(name) ? countOf(eventsBefore.get(name)) : 0))
    .map(([name, e]) => ({ message: String(e.message ?? '').slice(0, 500), count: countOf(e) - (eventsBefore.has(name) ? countOf(eventsBefore.get(name)) : 0), ...(typeof e.lastTimestamp === 'string' && { lastTimestamp: e.lastTimestamp }) }))
    .sort((a, b) => (a.lastTimestamp ?? '').localeCompare(b.lastTimestamp ?? ''));
  const current = await readLog(client, t, {});
  const preflight: PreflightEvidence = 'text' in current ? preflightEvidence(current.text) : { lines: [], waitingLines: 0, unread: current.unread };
  const previous = await readLog(client, t, { previous: 'true', tailLines: String(LOG_TAIL_LINES) });
  const round: Omit<Round, 'checks'> = {
    round: settings.round,
    restartCount: { before: restartsBefore, after: Number(statusAfter?.restartCount ?? restartsBefore) },
    signal: { command: SIGNAL_COMMAND, protocol: exec.protocol, outcome },
    ...(readyAt !== undefined && { readyAfterMs: readyAt - sent }),
    ...(readyAt === undefined && { stateAtEnd: gone ?? describeState(statusAfter) }),
    backOff,
    ...(kubeletBackOff && { kubeletBackOff }),
    preflight,
    failedStarts,
    previousFreeMemory: 'text' in previous ? freeMemoryLines(previous.text) : [],
  };
  return { ...round, checks: roundChecks(round, settings, wrapped) };
}
