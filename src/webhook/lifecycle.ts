/**
 * The webhook's life: ready (a valid config is loaded and it is not
 * stopping), and the drain on SIGTERM: stop accepting connections, let the
 * requests in flight finish (bounded), then close every connection.
 */
import type { Log } from './reload.js';
import type { Transport } from './transport.js';

export interface LifecycleSettings {
  /** How long a drain waits for requests in flight. */
  drainTimeoutMs: number;
}

export class Lifecycle {
  private draining = false;
  private drained: Promise<void> | undefined;

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
    return !this.draining && this.notReadyBecause() === undefined;
  }

  /** The /readyz answer's text when not ready. */
  whyNotReady(): string {
    return this.draining ? 'draining' : `no valid config: ${this.notReadyBecause() ?? 'see the log'}`;
  }

  /** Stop accepting, finish what is in flight (at most drainTimeoutMs), close everything. */
  drain(): Promise<void> {
    return (this.drained ??= (async () => {
      const { transport } = this;
      this.draining = true;
      this.log({ level: 'info', msg: 'draining', inFlight: transport.inFlight });
      this.others.stopWatching();
      transport.stopAccepting();
      await transport.settled(this.settings.drainTimeoutMs);
      const left = transport.inFlight;
      transport.destroy();
      this.others.closeClients();
      this.log({ level: left > 0 ? 'warn' : 'info', msg: 'drained', unfinished: left });
    })());
  }
}
