/**
 * `vram-preflight webhook`: the admission webhook as a process. Flags in,
 * `listening <port>` on stdout once it serves (tests and scripts start it on
 * port 0 and read the port), JSON log lines on stderr, SIGTERM/SIGINT drain
 * and exit 0. Loaded by src/cli/bin.ts only for this command.
 */
import { fileURLToPath } from 'node:url';
import { isMainThread, parentPort, workerData } from 'node:worker_threads';
import { resolveOptions } from '../config/load.js';
import { CONFIG_FLAG } from '../config/sources.js';
import { optionHelp, parseCommandLine, refuseRenderOnlyEnv, type FlagRow } from '../config/flags.js';
import { quoteBounded } from '../config/suggest.js';
import { PreflightError, VERSION } from '../core/index.js';
import { SERVICE_ACCOUNT_DIR } from '../kubernetes/index.js';
import { BODY_LIMIT, DEFAULT_SETTINGS, startWebhook, type WebhookSettings } from './server.js';
import { TLS12_SUITES } from './transport.js';
import { ADMISSION_WORKER, serveAdmissions } from './worker.js';

import { watchCertificateExpiry } from './certificate-expiry.js';
import { startMetricsPort, type MetricsPort } from './metrics-port.js';

export { runAdmit } from './admit-command.js';

// This bundle is also the script of the worker that decides large bodies (./worker.ts).
if (!isMainThread && parentPort && (workerData as { role?: unknown } | null)?.role === ADMISSION_WORKER) serveAdmissions(parentPort);

/** The webhook bundle's own file (the build maps import.meta.url to it); from the TypeScript source (tests) none, and large bodies are decided inline. */
function bundleFile(): string | undefined {
  const file = fileURLToPath(import.meta.url);
  return file.endsWith('.cjs') ? file : undefined;
}

/** The webhook's own flags: rows of the one option table (src/config/flags.ts), which parses them. */
const WEBHOOK_ROWS: readonly FlagRow[] = [
  { flag: '--tls-cert-file', value: 'FILE', help: 'PEM certificate (chain) served; re-read when it changes (required)', doors: ['webhook'], kind: 'door' },
  { flag: '--tls-key-file', value: 'FILE', help: 'PEM private key of the certificate; re-read when it changes (required)', doors: ['webhook'], kind: 'door' },
  { flag: '--port', value: 'PORT', help: 'port to listen on; 0: any free port', doors: ['webhook'], kind: 'door', defaultOf: 'port' },
  { flag: '--address', value: 'ADDRESS', help: 'address to listen on (default: every interface)', doors: ['webhook'], kind: 'door' },
  { flag: '--registry-budget-ms', value: 'MS', help: 'how long one admission waits for registry lookups', doors: ['webhook'], kind: 'door', defaultOf: 'registryBudgetMs' },
  { flag: '--kubernetes-budget-ms', value: 'MS', help: 'how long one admission waits for the Kubernetes API to read DRA claims', doors: ['webhook'], kind: 'door', defaultOf: 'kubernetesBudgetMs' },
  { flag: '--kubeconfig', value: 'FILE', help: 'kubeconfig for the Kubernetes API, as controller-runtime\'s webhooks take it out of a cluster (default: KUBECONFIG, else in-cluster, else ~/.kube/config)', doors: ['webhook'], kind: 'door' },
  { flag: '--kubernetes-api', value: 'URL', help: 'https://HOST:PORT of the Kubernetes API, with the token and CA of --kubernetes-credentials-dir (default: as --kubeconfig says)', doors: ['webhook'], kind: 'door' },
  { flag: '--kubernetes-credentials-dir', value: 'DIR', help: 'directory with token, ca.crt of a service account', doors: ['webhook'], kind: 'door', defaultOf: 'kubernetesCredentialsDir' },
  { flag: '--shutdown-delay-ms', value: 'MS', help: "on SIGTERM, how long it goes on accepting and answering, not ready, before it drains (Gatekeeper's --shutdown-delay is 10 s)", doors: ['webhook'], kind: 'door', defaultOf: 'shutdownDelayMs' },
  { flag: '--drain-timeout-ms', value: 'MS', help: 'after the shutdown delay, how long requests in flight may take to finish', doors: ['webhook'], kind: 'door', defaultOf: 'drainTimeoutMs' },
  { flag: '--max-connections', value: 'N', help: 'connections open at once; at the cap the one idle the longest is closed', doors: ['webhook'], kind: 'door', defaultOf: 'maxConnections' },
  { flag: '--max-concurrent-streams', value: 'N', help: 'concurrent streams per HTTP/2 connection', doors: ['webhook'], kind: 'door', defaultOf: 'maxStreams' },
  { flag: '--max-body-bytes-in-flight', value: 'BYTES', help: 'bytes of request bodies read or answered at once; more wait under flow control (default: a sixteenth of the heap limit, 7.25 to 32 MiB)', doors: ['webhook'], kind: 'door' },
  { flag: '--registry-lookups-in-flight', value: 'N', help: 'registry lookups in flight in the process', doors: ['webhook'], kind: 'door', defaultOf: 'registryLookupsInFlight' },
  { flag: '--kubernetes-reads-in-flight', value: 'N', help: 'DRA claim reads in flight in the process', doors: ['webhook'], kind: 'door', defaultOf: 'kubernetesReadsInFlight' },
  { flag: '--tls-min-version', value: 'VERSION', help: 'VersionTLS12 or VersionTLS13; TLS 1.2 offers only ECDHE suites with AEAD ciphers (default VersionTLS12)', doors: ['webhook'], kind: 'door' },
  { flag: '--tls-cipher-suites', value: 'LIST', help: `TLS 1.2 suites offered, comma-separated IANA names among ${Object.keys(TLS12_SUITES).join(', ')} (default: all of them)`, doors: ['webhook'], kind: 'door' },
  { flag: '--client-ca-file', value: 'FILE', help: "PEM CA bundle that signs the API server's client certificate: /mutate then answers only a client that presents one (default: none asked)", doors: ['webhook'], kind: 'door' },
  { flag: '--client-common-name', value: 'NAME', help: 'with --client-ca-file, the common name the client certificate must have, e.g. kube-apiserver (default: any)', doors: ['webhook'], kind: 'door' },
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
SIGTERM: /readyz turns 503 at once; for the shutdown delay it goes on accepting and answering;
then it stops accepting, answers every request accepted, and exits 0 (a second signal: at once).

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

const TLS_VERSIONS: Readonly<Record<string, WebhookSettings['tlsMinVersion']>> = { VersionTLS12: 'TLSv1.2', VersionTLS13: 'TLSv1.3', '1.2': 'TLSv1.2', '1.3': 'TLSv1.3' };

function tlsMinVersion(text: string | undefined): WebhookSettings['tlsMinVersion'] {
  if (text === undefined) return DEFAULT_SETTINGS.tlsMinVersion;
  const version = TLS_VERSIONS[text.trim()];
  if (!version) throw new PreflightError('USAGE', `--tls-min-version is ${quoteBounded(text)}`, { fix: 'give VersionTLS12 or VersionTLS13' });
  return version;
}

function cipherSuites(text: string | undefined): string[] {
  if (text === undefined) return [...DEFAULT_SETTINGS.tlsCipherSuites];
  const names = text.split(',').map((name) => name.trim()).filter((name) => name !== '');
  const unknown = names.filter((name) => !(name in TLS12_SUITES));
  if (names.length === 0 || unknown.length > 0) {
    throw new PreflightError('USAGE', `--tls-cipher-suites ${names.length === 0 ? 'names no suite' : `names ${quoteBounded(unknown.join(', '))}, not an ECDHE suite with an AEAD cipher`}`, { fix: `give one or more of ${Object.keys(TLS12_SUITES).join(', ')} (TLS 1.3's suites are always on)` });
  }
  return names;
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
  // The wrap's flags and VRAM_PREFLIGHT_* variables, checked on their own (the config file aside): a bad value there is a
  // usage error, as at every other door. Only the file is re-read; left to it, a bad flag would keep the webhook unready for ever.
  resolveOptions({ configPath: '', flags: args.flags }, { env: io.env, readFile: () => '' });
  const w = (flag: string): string | undefined => args.webhook.get(flag);
  const certFile = w('--tls-cert-file');
  const keyFile = w('--tls-key-file');
  if (!certFile || !keyFile) throw new PreflightError('USAGE', 'the webhook needs --tls-cert-file and --tls-key-file', { fix: 'mount the Secret of its certificate (cert-manager, or the chart) and pass both paths' });
  const port = whole('--port', w('--port'), DEFAULT_SETTINGS.port);
  if (port > 65535) throw new PreflightError('USAGE', `--port is ${port}`, { fix: 'give a port from 0 to 65535' });
  if (w('--client-common-name') && !w('--client-ca-file')) throw new PreflightError('USAGE', '--client-common-name needs --client-ca-file', { fix: "give the CA that signs the API server's client certificate with --client-ca-file" });
  const metricsText = w('--metrics-port');
  const metricsPort = metricsText === undefined ? undefined : whole('--metrics-port', metricsText, 0);
  if (metricsPort !== undefined && metricsPort > 65535) throw new PreflightError('USAGE', `--metrics-port is ${metricsPort}`, { fix: 'give a port from 0 to 65535' });
  if (metricsPort !== undefined && metricsPort !== 0 && metricsPort === port) throw new PreflightError('USAGE', `--metrics-port is --port (${port})`, { fix: 'give the plain-HTTP metrics port a port of its own' });
  const own: ProcessSettings = {
    ...(metricsPort !== undefined ? { metricsPort } : {}),
    certExpiryWarningDays: whole('--cert-expiry-warning-days', w('--cert-expiry-warning-days'), PROCESS_DEFAULTS.certExpiryWarningDays, 1),
  };
  const server: WebhookSettings = {
    ...DEFAULT_SETTINGS,
    certFile,
    keyFile,
    port,
    address: w('--address') ?? DEFAULT_SETTINGS.address,
    configPath: args.configPath,
    flags: args.flags,
    env: io.env,
    registryBudgetMs: whole('--registry-budget-ms', w('--registry-budget-ms'), DEFAULT_SETTINGS.registryBudgetMs, 1),
    kubernetesBudgetMs: whole('--kubernetes-budget-ms', w('--kubernetes-budget-ms'), DEFAULT_SETTINGS.kubernetesBudgetMs, 1),
    ...(w('--kubeconfig') !== undefined ? { kubeconfig: w('--kubeconfig') } : {}),
    ...(w('--kubernetes-api') !== undefined ? { kubernetesApi: w('--kubernetes-api') } : {}),
    ...(w('--kubernetes-credentials-dir') !== undefined ? { kubernetesCredentialsDir: w('--kubernetes-credentials-dir') } : {}),
    shutdownDelayMs: whole('--shutdown-delay-ms', w('--shutdown-delay-ms'), DEFAULT_SETTINGS.shutdownDelayMs),
    drainTimeoutMs: whole('--drain-timeout-ms', w('--drain-timeout-ms'), DEFAULT_SETTINGS.drainTimeoutMs),
    maxConnections: whole('--max-connections', w('--max-connections'), DEFAULT_SETTINGS.maxConnections, 1),
    maxStreams: whole('--max-concurrent-streams', w('--max-concurrent-streams'), DEFAULT_SETTINGS.maxStreams, 1),
    ...(w('--max-body-bytes-in-flight') !== undefined ? { bodyBytesInFlight: whole('--max-body-bytes-in-flight', w('--max-body-bytes-in-flight'), 0, 2 * BODY_LIMIT) } : {}),
    registryLookupsInFlight: whole('--registry-lookups-in-flight', w('--registry-lookups-in-flight'), DEFAULT_SETTINGS.registryLookupsInFlight, 1),
    kubernetesReadsInFlight: whole('--kubernetes-reads-in-flight', w('--kubernetes-reads-in-flight'), DEFAULT_SETTINGS.kubernetesReadsInFlight, 1),
    tlsMinVersion: tlsMinVersion(w('--tls-min-version')),
    tlsCipherSuites: cipherSuites(w('--tls-cipher-suites')),
    ...(w('--client-ca-file') ? { clientCaFile: w('--client-ca-file') } : {}),
    ...(w('--client-common-name') ? { clientCommonName: w('--client-common-name') } : {}),
    reloadPollMs: whole('--reload-poll-ms', w('--reload-poll-ms'), DEFAULT_SETTINGS.reloadPollMs, 100),
    headersTimeoutMs: DEFAULT_SETTINGS.headersTimeoutMs,
    requestTimeoutMs: DEFAULT_SETTINGS.requestTimeoutMs,
    idleTimeoutMs: DEFAULT_SETTINGS.idleTimeoutMs,
    log: (entry) => io.stderr.write(`${JSON.stringify({ time: new Date().toISOString(), ...entry })}\n`),
    ...(bundleFile() ? { admissionWorkerScript: bundleFile() } : {}),
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
      metricsPort = await startMetricsPort({ port: own.metricsPort, address: settings.address, headersTimeoutMs: settings.headersTimeoutMs, requestTimeoutMs: settings.requestTimeoutMs, idleTimeoutMs: settings.idleTimeoutMs }, webhook.metrics);
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
  // The first signal starts the shutdown (not ready, the shutdown delay, the drain); a second one drains at once.
  const stop = (signal: string): void => {
    settings.log({ level: 'info', msg: `${signal}: shutting down` });
    expiry.close();
    void webhook
      .shutdown()
      .then(() => metricsPort?.close())
      .then(() => process.exit(0));
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
}
