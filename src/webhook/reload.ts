/**
 * What the webhook reads from files and reads again when they change
 * (./watch.ts notices): the config file, and the serving certificate and
 * key. A new config that is invalid, or a new pair that does not load, keeps
 * the one in use and says so (log line and metric). A config invalid at start
 * leaves the webhook without one (not ready) until a valid file comes; a
 * certificate that does not load at start stops it.
 */
import { readFileSync } from 'node:fs';
import { createSecureContext } from 'node:tls';
import { resolveOptions } from '../config/load.js';
import { PreflightError, type Options } from '../core/index.js';
import type { WebhookMetrics } from './metrics.js';
import { watchFiles, type FileWatch } from './watch.js';

export type Log = (entry: Record<string, unknown>) => void;

export interface ConfigSource {
  /** The config file, if any. */
  path?: string;
  /** Option flags, as the CLI takes them. */
  flags: readonly { flag: string; value: string }[];
  env: Readonly<Record<string, string | undefined>>;
}

/** The options in use, re-read from the config file when it changes. */
export class ConfigReloader {
  /** Undefined until a valid config is loaded. */
  options: Options | undefined;
  /** Why there is no valid config (only while there is none). */
  problem: string | undefined;

  constructor(
    private readonly source: ConfigSource,
    private readonly metrics: WebhookMetrics,
    private readonly log: Log,
    /** Called when the options in use change (answers read under the old ones may not hold). */
    private readonly onChange: () => void,
  ) {}

  load(first: boolean): void {
    const { path, flags, env } = this.source;
    try {
      const loaded = resolveOptions({ configPath: path, flags }, { env, readFile: (file: string) => readFileSync(file, 'utf8') });
      const changed = JSON.stringify(loaded) !== JSON.stringify(this.options);
      this.options = loaded;
      this.problem = undefined;
      this.metrics.configValid.set(1);
      if (!first && !changed) return;
      this.onChange();
      this.metrics.reloads.inc({ what: 'config', result: 'ok' });
      this.log({ level: 'info', msg: first ? 'config loaded' : 'config reloaded', config: path ?? null });
    } catch (error) {
      if (!(error instanceof PreflightError)) throw error;
      this.problem = error.format();
      this.metrics.reloads.inc({ what: 'config', result: 'error' });
      this.metrics.configValid.set(this.options ? 1 : 0);
      this.log({
        level: 'error',
        msg: this.options ? 'config invalid; keeping the one in use' : 'config invalid; not ready until it is fixed',
        config: path ?? null,
        error: this.problem,
      });
      // The one in use stays; readiness says only whether there is one.
      if (this.options) this.problem = undefined;
    }
  }

  /** Re-reads the file when it changes; none without a file. */
  watch(pollMs: number): FileWatch | undefined {
    return this.source.path ? watchFiles([this.source.path], () => this.load(false), pollMs) : undefined;
  }
}

export interface KeyPair {
  cert: Buffer;
  key: Buffer;
}

function loadPair(certFile: string, keyFile: string): KeyPair {
  const cert = readFileSync(certFile);
  const key = readFileSync(keyFile);
  // Throws for a key that does not match the certificate, or either unreadable as PEM.
  createSecureContext({ cert, key });
  return { cert, key };
}

/** The serving certificate: must load at start; a bad new pair keeps the old. */
export class CertificateReloader {
  pair: KeyPair;

  constructor(
    private readonly certFile: string,
    private readonly keyFile: string,
    private readonly metrics: WebhookMetrics,
    private readonly log: Log,
  ) {
    try {
      this.pair = loadPair(certFile, keyFile);
    } catch (error) {
      throw new PreflightError('IO', `cannot load the TLS certificate ${certFile} and key ${keyFile}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`, {
        fix: 'check --tls-cert-file and --tls-key-file: both files must exist, be readable, and hold a PEM certificate and its key',
      });
    }
    metrics.reloads.inc({ what: 'certificate', result: 'ok' });
  }

  /** Re-reads the pair when either file changes; `apply` puts a new one in use. */
  watch(pollMs: number, apply: (pair: KeyPair) => void): FileWatch {
    return watchFiles(
      [this.certFile, this.keyFile],
      () => {
        let next: KeyPair;
        try {
          next = loadPair(this.certFile, this.keyFile);
        } catch (error) {
          this.metrics.reloads.inc({ what: 'certificate', result: 'error' });
          this.log({ level: 'error', msg: 'new certificate does not load; keeping the one in use', cert: this.certFile, key: this.keyFile, error: (error as NodeJS.ErrnoException).code ?? (error as Error).message });
          return;
        }
        if (next.cert.equals(this.pair.cert) && next.key.equals(this.pair.key)) return;
        apply(next);
        this.pair = next;
        this.metrics.reloads.inc({ what: 'certificate', result: 'ok' });
        this.log({ level: 'info', msg: 'certificate reloaded', cert: this.certFile });
      },
      pollMs,
    );
  }
}
