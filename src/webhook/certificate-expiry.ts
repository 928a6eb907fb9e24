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
  if (notAfterMs - nowMs > warningDays * DAY_MS) return undefined;
  const hoursLeft = Math.floor((notAfterMs - nowMs) / (60 * 60 * 1000));
  return { level: 'warn', msg: daysLeft > 0 ? `certificate expires in ${daysLeft} day(s)` : `certificate expires in less than a day (${hoursLeft} h)`, daysLeft };
}

/**
 * How to renew the certificate, by who made it. A self-signed one (its own
 * issuer, signed by its own key) is neither cert-manager's nor the chart's,
 * which both sign with a CA: someone made it by hand (openssl, the recipe of
 * docs/webhook.md, "Try it without a cluster"), and only a new pair written
 * over the files renews it.
 */
export function renewalFix(certificate: X509Certificate): string {
  let selfSigned = false;
  try {
    selfSigned = certificate.checkIssued(certificate) && certificate.verify(certificate.publicKey);
  } catch {
    // A key that cannot verify: not self-signed.
  }
  if (selfSigned) return 'renew it: a self-signed certificate (made by hand, e.g. with openssl) is renewed by writing a new certificate and key over the files; the webhook re-reads them, no restart (in a cluster, the chart\'s certificates or cert-manager\'s renew themselves: docs/webhook.md, "Certificates")';
  return 'renew it: with cert-manager it renews by itself (check the Certificate); with the chart-generated certificate, helm upgrade renews it (certificates.generated.renewBeforeDays); a certificate of your own: write the new one and its key over the files, the webhook re-reads them (docs/webhook.md, "Certificates")';
}

export function watchCertificateExpiry(settings: ExpiryWatchSettings): FileWatch {
  const now = settings.now ?? Date.now;
  let lastLogged = '';
  const check = (): void => {
    let certificate: X509Certificate;
    let notAfterMs: number;
    try {
      certificate = new X509Certificate(readFileSync(settings.certFile));
      notAfterMs = Date.parse(certificate.validTo);
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
      fix: renewalFix(certificate),
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
