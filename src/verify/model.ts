/**
 * What `vram-preflight verify` finds, as values: the target, the checks
 * before anything happens, and each restart's evidence and checks. The two
 * outputs (./render.ts) and the exit code are functions of these alone.
 */
import type { MemoryHolder, TightestGpu } from '../core/index.js';

export type CheckName =
  // Before anything happens.
  | 'wrapped'
  | 'ready'
  | 'rbac'
  // After each signal: the ticket's checks.
  | 'ready-again'
  | 'one-restart'
  | 'no-backoff'
  | 'preflight-ran'
  | 'no-vllm-error'
  | 'restart-time';

export interface Check {
  name: CheckName;
  /** null: not judged (a figure it needs is unknown; the detail says which). */
  ok: boolean | null;
  detail: string;
  fix?: string;
}

export interface Target {
  namespace: string;
  pod: string;
  uid: string;
  container: string;
  image?: string;
  node?: string;
  /** How the pod was chosen (--pod, or the one pod a --selector matches). */
  podChosenBy: string;
  /** How the container was chosen (--container, the pod's default-container annotation, its only container, its only vLLM container). */
  containerChosenBy: string;
  restartCount: number;
  /** The current container's start (state.running.startedAt): its previous restart, when restartCount > 0. */
  runningSince?: string;
  /** The pod's cold start, from status.startTime to Ready (or --cold-start). */
  coldStart?: { ms: number; source: 'pod' | 'flag'; from?: string; to?: string };
  /** Why the pod's own cold start is not known (it restarted before, it has no Ready time). */
  coldStartUnknown?: string;
}

export interface PreflightEvidence {
  /** The vram-preflight lines in the new container's log. */
  lines: string[];
  waitingLines: number;
  /** From the start line: how long the wait took (0: the memory was there at the first check). */
  waitedSeconds?: number;
  /** The first short reading: the GPU, its free memory and what the wait needed. */
  firstShort?: TightestGpu;
  /** What held GPU memory at the first waiting line that says (nvidia-smi --query-compute-apps in the container); [] none it could see; absent when no line says (a preflight before 0.5.0). */
  heldBy?: MemoryHolder[];
  /** The reading the start went on (every GPU had its need). */
  start?: TightestGpu & { gpus: number };
  gaveUp?: { waitedSeconds: number; timeoutSeconds: number; tightest?: TightestGpu; holders?: MemoryHolder[] };
  /** Why vLLM started without the wait (nvidia-smi unusable, MIG). */
  unchecked?: string;
  /** Why the log could not be read, when it could not. */
  unread?: string;
}

export interface FailedStart {
  containerId?: string;
  exitCode?: number;
  reason?: string;
  /** The termination message (the preflight's, on a timeout). */
  message?: string;
  /** vLLM's "Free memory on device" lines in that container's log. */
  freeMemory: string[];
}

export interface Round {
  round: number;
  restartCount: { before: number; after: number };
  signal: { command: readonly string[]; protocol: string; outcome: string };
  /** From the signal to the container Ready again; absent when it was not by --timeout. */
  readyAfterMs?: number;
  /** The container's state when the round ended without Ready (the evidence so far). */
  stateAtEnd?: string;
  backOff: { message: string; count: number; lastTimestamp?: string }[];
  /**
   * Set when the signal came within the kubelet's back-off window (./backoff.ts): the
   * container's previous restart was less than 10 minutes before, so the kubelet backs
   * the restart off whatever the preflight does, and a BackOff is its, not the race's.
   */
  kubeletBackOff?: { previousRestart: string; secondsBefore: number };
  preflight: PreflightEvidence;
  failedStarts: FailedStart[];
  /** vLLM's "Free memory on device" lines in `logs --previous` after the round. */
  previousFreeMemory: string[];
  checks: Check[];
}

export interface VerifyResult {
  target: Target;
  /** The checks before anything happens. */
  before: Check[];
  /** What was asked: --yes, --repeat, --timeout, --allow-unwrapped. */
  plan: { yes: boolean; repeat: number; timeoutMs: number; marginMs: number; allowUnwrapped: boolean; command: readonly string[]; roundGapMs: number;
    /** When round 1's signal may go (epoch ms), when not at once: the container restarted less than --round-gap before (./backoff.ts). */
    firstSignalAt?: number;
  };
  /** The restarts done (none without --yes). */
  rounds: Round[];
  /** Why fewer rounds than asked were done. */
  stopped?: string;
  /** Reads that were refused while deciding the container (the why of one not wrapped may be incomplete). */
  unread: string[];
}

/** Whether every check holds (not judged counts as holding: the detail says why it was not). */
export const holds = (checks: readonly Check[]): boolean => checks.every((c) => c.ok !== false);

export type Outcome = 'plan' | 'not-wrapped' | 'passed' | 'failed';

export function outcomeOf(result: VerifyResult): Outcome {
  const wrapped = result.before.find((c) => c.name === 'wrapped')?.ok !== false;
  if (!result.plan.yes) return wrapped ? 'plan' : 'not-wrapped';
  if (result.rounds.length === 0) return wrapped ? 'failed' : 'not-wrapped';
  return wrapped && result.rounds.length === result.plan.repeat && result.rounds.every((r) => holds(r.checks)) ? 'passed' : 'failed';
}
