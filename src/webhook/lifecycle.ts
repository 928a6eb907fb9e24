/**
 * The webhook's life, as a rollout needs it (docs/webhook.md, "Shutdown and
 * readiness"):
 *
 *   serving   ready once a valid config is loaded (/readyz 200);
 *   stopping  on SIGTERM: /readyz 503 at once, and for the shutdown delay
 *             the server goes on accepting connections and answering
 *             everything, as before, while the kubelet's failing readiness
 *             and the pod's deletion take it out of the Service's endpoints
 *             and kube-proxy stops sending it new connections. Every answer
 *             retires its connection, so the API server moves to new ones;
 *   draining  after the delay: no new connections, every request accepted
 *             is answered (HTTP/1.1 requests pipelined behind another too),
 *             at most drainTimeoutMs;
 *   stopped   every connection closed; the process exits at once, without
 *             waiting out the drain timeout when nothing was in flight.
 *
 * Without the delay, the API server, which sends to the Service's address
 * until kube-proxy's rules change, would meet a closed port for a moment at
 * every rollout and admit those pods unwrapped (failurePolicy: Ignore). The
 * anchors do the same: Gatekeeper's --shutdown-delay (10 s by default),
 * Kyverno's documented preStop sleep.
 */
import type { Log } from './reload.js';
import type { Transport } from './transport.js';

export interface LifecycleSettings {
  /** After SIGTERM, how long the server goes on accepting and answering before it drains. */
  shutdownDelayMs: number;
  /** How long a drain waits for requests in flight. */
  drainTimeoutMs: number;
}

export type Phase = 'serving' | 'stopping' | 'draining' | 'stopped';

export class Lifecycle {
  phase: Phase = 'serving';
  private drained: Promise<void> | undefined;
  private shutDown: Promise<void> | undefined;
  private skipDelay: (() => void) | undefined;

  constructor(
    private readonly settings: LifecycleSettings,
    private readonly transport: Transport,
    /** Why the webhook cannot answer yet (no valid config), or undefined when it can. */
    private readonly notReadyBecause: () => string | undefined,
    private readonly log: Log,
    /** What the server started besides the transport: file watches stop first, clients close last. */
    private readonly others: { stopWatching(): void; closeClients(): void },
  ) {}

  ready(): boolean {
    return this.phase === 'serving' && this.notReadyBecause() === undefined;
  }

  /** The /readyz answer's text when not ready. */
  whyNotReady(): string {
    if (this.phase !== 'serving') return `shutting down (${this.phase})`;
    return `no valid config: ${this.notReadyBecause() ?? 'see the log'}`;
  }

  /** SIGTERM: not ready at once, serving on for the shutdown delay, then the drain. A second call skips what is left of the delay. */
  shutdown(): Promise<void> {
    if (this.shutDown) {
      this.skipDelay?.();
      return this.shutDown;
    }
    return (this.shutDown = (async () => {
      this.phase = 'stopping';
      this.transport.retire();
      this.log({ level: 'info', msg: 'shutting down', shutdownDelayMs: this.settings.shutdownDelayMs, inFlight: this.transport.inFlight, connections: this.transport.connections });
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, this.settings.shutdownDelayMs);
        this.skipDelay = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      await this.drain();
    })());
  }

  /** Stop accepting, finish what is in flight (at most drainTimeoutMs), close everything. */
  drain(): Promise<void> {
    return (this.drained ??= (async () => {
      const { transport } = this;
      this.phase = 'draining';
      this.log({ level: 'info', msg: 'draining', inFlight: transport.inFlight, connections: transport.connections });
      this.others.stopWatching();
      transport.stopAccepting();
      await transport.settled(this.settings.drainTimeoutMs);
      const left = transport.inFlight;
      transport.destroy();
      this.others.closeClients();
      this.phase = 'stopped';
      this.log({ level: left > 0 ? 'warn' : 'info', msg: 'drained', unfinished: left });
    })());
  }
}
