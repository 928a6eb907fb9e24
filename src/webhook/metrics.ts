/**
 * Prometheus metrics in the text exposition format 0.0.4, without a client
 * library: counters by label, one gauge, one histogram. Names and help texts
 * are the documentation's (docs/webhook.md, "Metrics").
 */

type Labels = Readonly<Record<string, string>>;

const NEEDS_ESCAPE = /[\\\n"]/;

/** `{k="v",…}`; counted on every admission, so a value escaped only when it holds what must be. */
function labelText(labels: Labels): string {
  let text = '';
  for (const key in labels) {
    const value = labels[key]!;
    const written = NEEDS_ESCAPE.test(value) ? value.replace(/\\/g, '\\\\').replace(/\n/g, '\\n').replace(/"/g, '\\"') : value;
    text += `${text === '' ? '{' : ','}${key}="${written}"`;
  }
  return text === '' ? '' : `${text}}`;
}

interface Metric {
  render(): string;
}

export class Counter implements Metric {
  private readonly values = new Map<string, number>();

  constructor(
    readonly name: string,
    readonly help: string,
    /** Label sets shown at 0 before anything happened, so that rate() and alerts see the series from the start. */
    initial: readonly Labels[] = [],
  ) {
    for (const labels of initial) this.values.set(labelText(labels), 0);
  }

  inc(labels: Labels = {}, by = 1): void {
    const key = labelText(labels);
    this.values.set(key, (this.values.get(key) ?? 0) + by);
  }

  get(labels: Labels = {}): number {
    return this.values.get(labelText(labels)) ?? 0;
  }

  render(): string {
    const lines = [`# HELP ${this.name} ${this.help}`, `# TYPE ${this.name} counter`];
    for (const [labels, value] of this.values) lines.push(`${this.name}${labels} ${value}`);
    return lines.join('\n');
  }
}

export class Gauge implements Metric {
  private value = 0;

  constructor(
    readonly name: string,
    readonly help: string,
  ) {}

  add(by: number): void {
    this.value += by;
  }

  set(value: number): void {
    this.value = value;
  }

  get(): number {
    return this.value;
  }

  render(): string {
    return [`# HELP ${this.name} ${this.help}`, `# TYPE ${this.name} gauge`, `${this.name} ${this.value}`].join('\n');
  }
}

export class Histogram implements Metric {
  private readonly counts: number[];
  private sum = 0;
  private count = 0;

  constructor(
    readonly name: string,
    readonly help: string,
    /** Upper bounds, ascending, in the metric's unit. */
    readonly buckets: readonly number[],
  ) {
    this.counts = buckets.map(() => 0);
  }

  observe(value: number): void {
    this.sum += value;
    this.count++;
    for (let i = 0; i < this.buckets.length; i++) if (value <= this.buckets[i]!) this.counts[i]!++;
  }

  render(): string {
    const lines = [`# HELP ${this.name} ${this.help}`, `# TYPE ${this.name} histogram`];
    this.buckets.forEach((bound, i) => lines.push(`${this.name}_bucket{le="${bound}"} ${this.counts[i]}`));
    lines.push(`${this.name}_bucket{le="+Inf"} ${this.count}`, `${this.name}_sum ${this.sum}`, `${this.name}_count ${this.count}`);
    return lines.join('\n');
  }
}

/** What a pod's admission came to (the `outcome` label). */
export const OUTCOMES = ['wrapped', 'unchanged', 'not-wrapped', 'ignored', 'invalid'] as const;
export type Outcome = (typeof OUTCOMES)[number];

/** The limits counted when they bite (the `limit` label). */
export const LIMITS = ['connections-idle-closed', 'connections-refused', 'metrics-connections-idle-closed', 'metrics-connections-refused', 'http2-headers-deadline', 'body-budget', 'body-queue-full', 'containers-per-pod', 'claims-per-pod', 'dra-queue-timeout', 'dra-share-ended'] as const;

export function webhookMetrics() {
  const prefix = 'vram_preflight_webhook';
  const metrics = {
    admissions: new Counter(
      `${prefix}_admissions_total`,
      'AdmissionReviews answered, by outcome (wrapped: a patch was returned; unchanged: nothing to wrap; not-wrapped: a target container could not be wrapped safely and the pod was admitted without it wrapped; ignored: not a Pod CREATE; invalid: not an AdmissionReview, HTTP 400) and dry_run.',
      OUTCOMES.flatMap((outcome) => ['false', 'true'].map((dryRun) => ({ outcome, dry_run: dryRun }))),
    ),
    containers: new Counter(`${prefix}_containers_total`, 'Containers decided, by result: wrapped, skipped (not a target, or already wrapped), refused (a target that could not be wrapped safely).', [
      { result: 'wrapped' },
      { result: 'skipped' },
      { result: 'refused' },
    ]),
    requests: new Counter(`${prefix}_http_requests_total`, 'HTTP requests by route and status code.'),
    latency: new Histogram(`${prefix}_admission_duration_seconds`, 'Time from the request to the answer of /mutate, seconds.', [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5]),
    registryLookups: new Counter(`${prefix}_registry_lookups_total`, 'Image start lookups, by result: hit (cached answer), negative-hit (cached failure), answered, failed, timeout (the budget ran out), shared (joined a lookup in flight).', [
      { result: 'hit' },
      { result: 'negative-hit' },
      { result: 'answered' },
      { result: 'failed' },
      { result: 'timeout' },
      { result: 'shared' },
    ]),
    claimReads: new Counter(`${prefix}_dra_claim_reads_total`, 'ResourceClaim / ResourceClaimTemplate reads from the Kubernetes API, by result: hit, read, failed.', [
      { result: 'hit' },
      { result: 'read' },
      { result: 'failed' },
    ]),
    reloads: new Counter(`${prefix}_reloads_total`, 'Config and certificate (re)loads, by what and result (ok, error: the previous one is kept).', [
      { what: 'config', result: 'ok' },
      { what: 'config', result: 'error' },
      { what: 'certificate', result: 'ok' },
      { what: 'certificate', result: 'error' },
    ]),
    limits: new Counter(
      `${prefix}_limit_hits_total`,
      'Times a limit bit, by limit (docs/webhook.md, "Hardening"): connections-idle-closed (at the connection cap, the longest idle one closed), connections-refused (at the cap, none idle), metrics-connections-idle-closed and metrics-connections-refused (the same on the plain-HTTP metrics port), http2-headers-deadline (a header block too slow), body-budget (a body waited past its deadline for bytes in flight), body-queue-full (too many bodies waiting, refused), containers-per-pod, claims-per-pod, dra-queue-timeout (a DRA read got no slot within its budget), dra-share-ended (a DRA read gave its slot up to waiting ones after its fair share).',
      LIMITS.map((limit) => ({ limit })),
    ),
    inFlight: new Gauge(`${prefix}_in_flight_requests`, 'Requests being answered now.'),
    configValid: new Gauge(`${prefix}_config_valid`, '1 when a valid config is loaded (the webhook is ready), else 0.'),
    certificateExpiry: new Gauge(`${prefix}_certificate_expiry_timestamp_seconds`, 'When the certificate in --tls-cert-file (the first of its chain) expires, Unix seconds; re-read when the file changes.'),
  };
  return {
    ...metrics,
    render(): string {
      return `${Object.values(metrics)
        .map((m) => m.render())
        .join('\n')}\n`;
    },
  };
}

export type WebhookMetrics = ReturnType<typeof webhookMetrics>;
