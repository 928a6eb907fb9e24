/**
 * `vram-preflight webhook`: the admission webhook as a process. Flags in,
 * `listening <port>` on stdout once it serves (tests and scripts start it on
 * port 0 and read the port), JSON log lines on stderr, SIGTERM/SIGINT drain
 * and exit 0. Loaded by src/cli/bin.ts only for this command.
 */
import { CONFIG_FLAG } from '../config/sources.js';
import { optionHelp, parseCommandLine, refuseRenderOnlyEnv, type FlagRow } from '../config/flags.js';
import { quoteBounded } from '../config/suggest.js';
import { PreflightError } from '../core/errors.js';
import { VERSION } from '../core/version.js';
import { inClusterApiServer, SERVICE_ACCOUNT_DIR } from './claims.js';
import { DEFAULT_SETTINGS, startWebhook, type WebhookSettings } from './server.js';

import { watchCertificateExpiry } from './certificate-expiry.js';
import { startMetricsPort, type MetricsPort } from './metrics-port.js';

export { runAdmitProcess } from './admit-command.js';

/** The webhook's own flags: rows of the one option table (src/config/flags.ts), which parses them. */
const WEBHOOK_ROWS: readonly FlagRow[] = [
  { flag: '--tls-cert-file', value: 'FILE', help: 'PEM certificate (chain) served; re-read when it changes (required)', doors: ['webhook'], kind: 'door' },
  { flag: '--tls-key-file', value: 'FILE', help: 'PEM private key of the certificate; re-read when it changes (required)', doors: ['webhook'], kind: 'door' },
  { flag: '--port', value: 'PORT', help: 'port to listen on; 0: any free port', doors: ['webhook'], kind: 'door', defaultOf: 'port' },
  { flag: '--address', value: 'ADDRESS', help: 'address to listen on (default: every interface)', doors: ['webhook'], kind: 'door' },
  { flag: '--registry-budget-ms', value: 'MS', help: 'how long one admission waits for registry lookups', doors: ['webhook'], kind: 'door', defaultOf: 'registryBudgetMs' },
  { flag: '--kubernetes-budget-ms', value: 'MS', help: 'how long one admission waits for the Kubernetes API to read DRA claims', doors: ['webhook'], kind: 'door', defaultOf: 'kubernetesBudgetMs' },
  { flag: '--kubernetes-api', value: 'URL', help: 'https://HOST:PORT of the Kubernetes API (default: in-cluster, from KUBERNETES_SERVICE_HOST/PORT)', doors: ['webhook'], kind: 'door' },
  { flag: '--kubernetes-credentials-dir', value: 'DIR', help: 'directory with token, ca.crt of a service account', doors: ['webhook'], kind: 'door', defaultOf: 'kubernetesCredentialsDir' },
  { flag: '--drain-timeout-ms', value: 'MS', help: 'on SIGTERM, how long requests in flight may take to finish', doors: ['webhook'], kind: 'door', defaultOf: 'drainTimeoutMs' },
  { flag: '--reload-poll-ms', value: 'MS', help: 'how often the certificate and config files are checked for changes, besides a directory watch', doors: ['webhook'], kind: 'door', defaultOf: 'reloadPollMs' },
  { flag: '--metrics-port', value: 'PORT', help: 'also serve /metrics over plain HTTP on this port (default: none; 0: any free port), for scrapers without the CA', doors: ['webhook'], kind: 'door' },
  { flag: '--cert-expiry-warning-days', value: 'DAYS', help: 'log a warning (daily) when the certificate expires within this many days', doors: ['webhook'], kind: 'door', defaultOf: 'certExpiryWarningDays' },
];

/** The webhook's settings that this door handles around the server (src/webhook/server.ts knows nothing of them). */
export interface ProcessSettings {
  /** Absent: no plain-HTTP metrics port. */
  metricsPort?: number;
  certExpiryWarningDays: number;
}

export const PROCESS_DEFAULTS = { certExpiryWarningDays: 30 } as const;

export const WEBHOOK_HELP = `vram-preflight ${VERSION} webhook: a mutating admission webhook that wraps vLLM containers of pods at creation

Usage:
  vram-preflight webhook --tls-cert-file tls.crt --tls-key-file tls.key [--config config.yaml] [options]

Serves HTTPS (HTTP/1.1 and HTTP/2, TLS 1.2+):
  POST /mutate    AdmissionReview admission.k8s.io/v1 for Pods on CREATE; always allowed
  GET  /healthz   the process answers
  GET  /readyz    a valid config is loaded (503 while it is not, and while draining)
  GET  /metrics   Prometheus text format (also over plain HTTP on --metrics-port)
Prints "listening PORT" on stdout once it serves; logs JSON lines on stderr.
Every answer that is not 2xx is JSON: {"error": ..., "status": ...}.
SIGTERM: stops accepting, finishes requests in flight, exits 0.

Webhook options:
${optionHelp('webhook', 'door', WEBHOOK_ROWS, { ...DEFAULT_SETTINGS, ...PROCESS_DEFAULTS, kubernetesCredentialsDir: SERVICE_ACCOUNT_DIR })}

Options of the wrap, as for the post-renderer (flag, or environment variable; the config file,
re-read when it changes, sets the same names in camelCase):
${optionHelp('webhook', 'wrap')}

Docs: docs/webhook.md.
`;

interface ParsedWebhookArgs {
  stop?: '--help' | '--version';
  webhook: Map<string, string>;
  configPath?: string;
  flags: { flag: string; value: string }[];
}

function parseWebhookArgs(argv: readonly string[]): ParsedWebhookArgs {
  const line = parseCommandLine(argv, 'webhook', WEBHOOK_ROWS);
  if (line.words.length) throw new PreflightError('USAGE', `unexpected argument ${quoteBounded(line.words[0])}`, { fix: 'the webhook takes options only; see vram-preflight webhook --help' });
  const parsed: ParsedWebhookArgs = { stop: line.stop, webhook: line.door, flags: [] };
  for (const { flag, value } of line.wrap) {
    if (flag === CONFIG_FLAG) parsed.configPath = value;
    else parsed.flags.push({ flag, value });
  }
  return parsed;
}

function whole(flag: string, text: string | undefined, fallback: number, min = 0): number {
  if (text === undefined) return fallback;
  if (!/^\d+$/.test(text.trim()) || Number(text) < min) throw new PreflightError('USAGE', `${flag} is ${quoteBounded(text)}`, { fix: `give a whole number${min > 0 ? ` of at least ${min}` : ''}` });
  return Number(text);
}

export interface WebhookIO {
  stdout: { write(text: string): unknown };
  stderr: { write(text: string): unknown };
  env: Readonly<Record<string, string | undefined>>;
}

/** Settings from argv; throws PreflightError (USAGE) for bad flags. Undefined: --help or --version was printed. */
export function webhookSettings(argv: readonly string[], io: WebhookIO): WebhookSettings | undefined {
  return processSettings(argv, io)?.server;
}

/** The server's settings and this door's own; undefined: --help or --version was printed. */
export function processSettings(argv: readonly string[], io: WebhookIO): { server: WebhookSettings; process: ProcessSettings } | undefined {
  const args = parseWebhookArgs(argv);
  if (args.stop === '--help') {
    io.stdout.write(WEBHOOK_HELP);
    return undefined;
  }
  if (args.stop === '--version') {
    io.stdout.write(`${VERSION}\n`);
    return undefined;
  }
  refuseRenderOnlyEnv(io.env, 'webhook');
  const w = (flag: string): string | undefined => args.webhook.get(flag);
  const certFile = w('--tls-cert-file');
  const keyFile = w('--tls-key-file');
  if (!certFile || !keyFile) throw new PreflightError('USAGE', 'the webhook needs --tls-cert-file and --tls-key-file', { fix: 'mount the Secret of its certificate (cert-manager, or the chart) and pass both paths' });
  const port = whole('--port', w('--port'), DEFAULT_SETTINGS.port);
  if (port > 65535) throw new PreflightError('USAGE', `--port is ${port}`, { fix: 'give a port from 0 to 65535' });
  const metricsText = w('--metrics-port');
  const metricsPort = metricsText === undefined ? undefined : whole('--metrics-port', metricsText, 0);
  if (metricsPort !== undefined && metricsPort > 65535) throw new PreflightError('USAGE', `--metrics-port is ${metricsPort}`, { fix: 'give a port from 0 to 65535' });
  if (metricsPort !== undefined && metricsPort !== 0 && metricsPort === port) throw new PreflightError('USAGE', `--metrics-port is --port (${port})`, { fix: 'give the plain-HTTP metrics port a port of its own' });
  const own: ProcessSettings = {
    ...(metricsPort !== undefined ? { metricsPort } : {}),
    certExpiryWarningDays: whole('--cert-expiry-warning-days', w('--cert-expiry-warning-days'), PROCESS_DEFAULTS.certExpiryWarningDays, 1),
  };
  const server: WebhookSettings = {
    certFile,
    keyFile,
    port,
    address: w('--address') ?? DEFAULT_SETTINGS.address,
    configPath: args.configPath,
    flags: args.flags,
    env: io.env,
    registryBudgetMs: whole('--registry-budget-ms', w('--registry-budget-ms'), DEFAULT_SETTINGS.registryBudgetMs, 1),
    kubernetesBudgetMs: whole('--kubernetes-budget-ms', w('--kubernetes-budget-ms'), DEFAULT_SETTINGS.kubernetesBudgetMs, 1),
    kubernetesApi: w('--kubernetes-api') ?? inClusterApiServer(io.env),
    kubernetesCredentialsDir: w('--kubernetes-credentials-dir') ?? SERVICE_ACCOUNT_DIR,
    drainTimeoutMs: whole('--drain-timeout-ms', w('--drain-timeout-ms'), DEFAULT_SETTINGS.drainTimeoutMs),
    reloadPollMs: whole('--reload-poll-ms', w('--reload-poll-ms'), DEFAULT_SETTINGS.reloadPollMs, 100),
    headersTimeoutMs: DEFAULT_SETTINGS.headersTimeoutMs,
    requestTimeoutMs: DEFAULT_SETTINGS.requestTimeoutMs,
    idleTimeoutMs: DEFAULT_SETTINGS.idleTimeoutMs,
    log: (entry) => io.stderr.write(`${JSON.stringify({ time: new Date().toISOString(), ...entry })}\n`),
  };
  return { server, process: own };
}

/** The process: runs until SIGTERM/SIGINT. Exit codes: 0 after a drain, 2 usage, 1 cannot start. */
export async function runWebhook(argv: readonly string[], io: WebhookIO = { stdout: process.stdout, stderr: process.stderr, env: process.env }): Promise<void> {
  let both: ReturnType<typeof processSettings>;
  try {
    both = processSettings(argv, io);
  } catch (error) {
    if (!(error instanceof PreflightError)) throw error;
    io.stderr.write(`vram-preflight: ${error.format()}\n`);
    process.exitCode = 2;
    return;
  }
  if (!both) return;
  const { server: settings, process: own } = both;
  let webhook;
  let metricsPort: MetricsPort | undefined;
  try {
    webhook = await startWebhook(settings);
    if (own.metricsPort !== undefined) {
      metricsPort = await startMetricsPort(own.metricsPort, settings.address, webhook.metrics);
      settings.log({ level: 'info', msg: 'metrics listening', port: metricsPort.port, address: settings.address || '*', scheme: 'http' });
    }
  } catch (error) {
    const message = error instanceof PreflightError ? error.format() : `cannot start: ${(error as NodeJS.ErrnoException).code ?? ''} ${(error as Error).message}`;
    settings.log({ level: 'error', msg: 'cannot start', error: message });
    process.exitCode = 1;
    if (webhook) void webhook.drain().then(() => process.exit(1));
    return;
  }
  const expiry = watchCertificateExpiry({ certFile: settings.certFile, warningDays: own.certExpiryWarningDays, metrics: webhook.metrics, log: settings.log, pollMs: settings.reloadPollMs });
  io.stdout.write(`listening ${webhook.port}\n`);
  const stop = (signal: string): void => {
    settings.log({ level: 'info', msg: `${signal}: draining` });
    expiry.close();
    void Promise.all([webhook.drain(), metricsPort?.close()]).then(() => process.exit(0));
  };
  process.once('SIGTERM', () => stop('SIGTERM'));
  process.once('SIGINT', () => stop('SIGINT'));
}
