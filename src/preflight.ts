/**
 * The preflight: a POSIX sh script that runs as the container's start
 * (`/bin/sh -ec SCRIPT -- <original start...>`), waits until every visible GPU
 * has the memory vLLM will ask for, then `exec "$@"`.
 *
 * OWNER: preflight-script work (issue 3). This file is a contract stub.
 */

/** First characters of every generated script; also how a wrapped container is recognised. */
export const PREFLIGHT_MARKER_PREFIX = '# vram-preflight ';

export interface PreflightSettings {
  /** Tool version, written into the marker line. */
  version: string;
  /** vLLM's --gpu-memory-utilization, validated: 0 < u <= 1. */
  utilization: number;
  /** Extra MiB required per GPU on top of ceil(total x utilization); integer >= 0. */
  headroomMiB: number;
  /** Give up after this many seconds of waiting; integer >= 1. */
  timeoutSeconds: number;
  /** Seconds between nvidia-smi polls while waiting; > 0 (fractions allowed). */
  pollIntervalSeconds: number;
  /** Seconds between progress lines while waiting; integer >= 1. */
  logIntervalSeconds: number;
  /** nvidia-smi missing, failing or unreadable: warn and start vLLM, or fail. */
  onNvidiaSmiUnavailable: 'warn' | 'fail';
  /** Where the timeout message is also written (the container's terminationMessagePath). */
  terminationMessagePath: string;
}

export function renderPreflightScript(settings: PreflightSettings): string {
  throw new Error(`not implemented yet (${settings.version})`);
}
