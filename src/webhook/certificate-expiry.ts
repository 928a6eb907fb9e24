/**
 * The serving certificate's expiry, said before it happens: a metric
 * (`..._certificate_expiry_timestamp_seconds`, for an alert) and a log line
 * at start, whenever the file changes, and once a day while the expiry is
 * within the warning window (`level: warn`; `error` once it has passed).
 * An expired serving certificate fails every TLS handshake of the API
 * server, and with failurePolicy Ignore every pod is then admitted
 * unwrapped without a word on the pod: this is the word.
 */
import { X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { WebhookMetrics } from './metrics.js';
import { watchFiles, type FileWatch } from './watch.js';

const DAY_MS = 24 * 60 * 60 * 1000;

export interface ExpiryWatchSettings {
  certFile: string;
  /** Warn this many days before the expiry. */
  warningDays: number;
  metrics: WebhookMetrics;
  log: (entry: Record<string, unknown>) => void;
  pollMs: number;
  now?: () => number;
  /** How often the warning is repeated while it holds (a day). */
  repeatMs?: number;
}

/** What the certificate's expiry calls for, at `now`. */
export function expiryNotice(notAfterMs: number, nowMs: number, warningDays: number): { level: 'warn' | 'error'; msg: string; daysLeft: number } | undefined {
  const daysLeft = Math.floor((notAfterMs - nowMs) / DAY_MS);
  if (notAfterMs <= nowMs) return { level: 'error', msg: 'certificate has expired: the API server cannot call the webhook, and pods are admitted unwrapped', daysLeft };
  if (notAfterMs - nowMs <= warningDays * DAY_MS) return { level: 'warn', msg: `certificate expires in ${daysLeft} day(s)`, daysLeft };
  return undefined;
}

export function watchCertificateExpiry(settings: ExpiryWatchSettings): FileWatch {
  const now = settings.now ?? Date.now;
  let lastLogged = '';
  const check = (): void => {
    let notAfterMs: number;
    try {
      notAfterMs = Date.parse(new X509Certificate(readFileSync(settings.certFile)).validTo);
    } catch {
      // A file that does not read as a certificate is the reload's to report (the pair in use stays).
      return;
    }
    settings.metrics.certificateExpiry.set(Math.round(notAfterMs / 1000));
    const notice = expiryNotice(notAfterMs, now(), settings.warningDays);
    if (!notice) return;
    const key = `${notAfterMs}:${Math.floor(now() / (settings.repeatMs ?? DAY_MS))}`;
    if (key === lastLogged) return;
    lastLogged = key;
    settings.log({
      level: notice.level,
      msg: notice.msg,
      cert: settings.certFile,
      notAfter: new Date(notAfterMs).toISOString(),
      daysLeft: notice.daysLeft,
      fix: 'renew it: with cert-manager it renews by itself (check the Certificate); with the chart-generated certificate, helm upgrade renews it (certificates.generated.renewBeforeDays; docs/webhook.md, "Certificates")',
    });
  };
  check();
  const files = watchFiles([settings.certFile], check, settings.pollMs);
  // Once an hour: the warning comes back once a day while it holds, and an expiry passes without any change of the file.
  const timer = setInterval(check, Math.min(settings.repeatMs ?? DAY_MS, 60 * 60 * 1000));
  timer.unref();
  return {
    close() {
      clearInterval(timer);
      files.close();
    },
  };
}
