/** A Helm-style stream of `count` documents (~5 KiB each, 1 % vLLM Deployments); deterministic. */
export function generate(count: number): string;
