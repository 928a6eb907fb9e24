/**
 * The kubelet's crash-loop back-off, and when verify's rounds may signal.
 *
 * The kubelet restarts a container that exits at once only the first time, or
 * when its previous restart was more than 10 minutes before: any other exit
 * of the same container, wrapped or not, clean or not, waits a back-off (10 s,
 * doubling to 5 min) and the kubelet records a BackOff event for it. In
 * kubelet 1.37: pkg/kubelet/kubelet.go sets crashLoopBackOff.HasExpiredFunc
 * to "more than 600 s between the exit and the back-off entry's last update"
 * (the previous restart), and client-go util/flowcontrol/backoff.go
 * IsInBackOffSince is true while now - the exit's finishedAt < the entry's
 * back-off (pkg/kubelet/kuberuntime/kuberuntime_manager.go doBackOff).
 *
 * So the ticket's step 2 as a tight loop reports a BackOff on its second
 * round that is the kubelet's, not the race's, and its new container starts
 * 10 s late, when the old engine has had that long to give its memory back:
 * such a round hardly tests the race. verify therefore waits, before a
 * round, until the container's previous restart is --round-gap old (default
 * 10 min and CLOCK_SLACK_MS). A shorter gap is the operator's choice: those
 * rounds are marked as in the window, and a BackOff in them is reported as
 * the kubelet's, never counted as the race and never hidden.
 */

/** The kubelet forgets a container's back-off 600 s after its last restart (kubelet.go, HasExpiredFunc). */
export const KUBELET_BACKOFF_RESET_MS = 600_000;
/** The container's start time is the node's clock; verify's may differ by a few seconds. */
export const CLOCK_SLACK_MS = 15_000;
/** --round-gap's default: past the kubelet's window, with the slack. */
export const DEFAULT_ROUND_GAP_MS = KUBELET_BACKOFF_RESET_MS + CLOCK_SLACK_MS;

/** What the back-off decision needs of the container: restartCount and the start of its current container. */
export interface ContainerTiming {
  restartCount: number;
  /** state.running.startedAt (RFC 3339), when it runs. */
  runningSince?: string;
}

/** The previous restart, as epoch ms: the current container's start, when the container has restarted (a first container leaves the kubelet no back-off). */
export function previousRestart(c: ContainerTiming): number | undefined {
  if (c.restartCount < 1 || c.runningSince === undefined) return undefined;
  const at = Date.parse(c.runningSince);
  return Number.isNaN(at) ? undefined : at;
}

/** When a signal may go, at `now` or later, so that it comes `gapMs` after the container's previous restart. */
export function signalAt(c: ContainerTiming, now: number, gapMs: number): number {
  const last = previousRestart(c);
  return last === undefined ? now : Math.max(now, last + gapMs);
}

/**
 * Whether a signal at `at` falls in the kubelet's back-off window (the restart it causes may
 * be backed off: within 600 s of the previous restart, with the clock slack), and how long
 * after that restart it came. undefined: outside it, or the container never restarted.
 */
export function backOffWindow(c: ContainerTiming, at: number): { previousRestart: string; secondsBefore: number } | undefined {
  const last = previousRestart(c);
  if (last === undefined || at - last >= KUBELET_BACKOFF_RESET_MS + CLOCK_SLACK_MS) return undefined;
  return { previousRestart: new Date(last).toISOString(), secondsBefore: Math.max(0, Math.round((at - last) / 100) / 10) };
}
