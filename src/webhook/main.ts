/**
 * `vram-preflight webhook`: the admission webhook as a process. Flags in,
 * `listening <port>` on stdout once it serves (tests and scripts start it on
 * port 0 and read the port), JSON log lines on stderr, SIGTERM/SIGINT drain
 * and exit 0. Loaded by src/cli/bin.ts only for this command.
 */
import { fileURLToPath } from 'node:url';
import { isMainThread, parentPort, workerData } from 'node:worker_threads';
import { CONFIG_ENV, CONFIG_FLAG, SCALAR_OPTIONS } from '../config/sources.js';
import { PreflightError } from '../core/errors.js';
import { VERSION } from '../core/version.js';
import { inClusterApiServer, SERVICE_ACCOUNT_DIR } from './claims.js';
import { BODY_LIMIT, DEFAULT_SETTINGS, startWebhook, type WebhookSettings } from './server.js';
import { TLS12_SUITES } from './transport.js';
import { ADMISSION_WORKER, serveAdmissions } from './worker.js';

// This bundle is also the script of the worker that decides large bodies (./worker.ts).
if (!isMainThread && parentPort && (workerData as { role?: unknown } | null)?.role === ADMISSION_WORKER) serveAdmissions(parentPort);

/** The webhook bundle's own file (the build maps import.meta.url to it); from the TypeScript source (tests) none, and large bodies are decided inline. */
function bundleFile(): string | undefined {
  const file = fileURLToPath(import.meta.url);
  return file.endsWith('.cjs') ? file : undefined;
}

const WEBHOOK_FLAGS = {
  '--tls-cert-file': 'PEM certificate (chain) served; re-read when it changes (required)',
  '--tls-key-file': 'PEM private key of the certificate; re-read when it changes (required)',
  '--port': `port to listen on (default ${DEFAULT_SETTINGS.port}; 0: any free port)`,
  '--address': 'address to listen on (default: every interface)',
  '--registry-budget-ms': `how long one admission waits for registry lookups (default ${DEFAULT_SETTINGS.registryBudgetMs})`,
  '--kubernetes-budget-ms': `how long one admission waits for the Kubernetes API to read DRA claims (default ${DEFAULT_SETTINGS.kubernetesBudgetMs})`,
  '--kubernetes-api': 'https://HOST:PORT of the Kubernetes API (default: in-cluster, from KUBERNETES_SERVICE_HOST/PORT)',
  '--kubernetes-credentials-dir': `directory with token, ca.crt of a service account (default ${SERVICE_ACCOUNT_DIR})`,
  '--shutdown-delay-ms': `on SIGTERM, how long the webhook goes on accepting and answering, not ready, before it drains (default ${DEFAULT_SETTINGS.shutdownDelayMs}, as Gatekeeper's --shutdown-delay)`,
  '--drain-timeout-ms': `after the shutdown delay, how long requests in flight may take to finish (default ${DEFAULT_SETTINGS.drainTimeoutMs})`,
  '--max-connections': `connections open at once; at the cap the longest idle one is closed (default ${DEFAULT_SETTINGS.maxConnections})`,
  '--max-http2-streams': `concurrent streams per HTTP/2 connection (default ${DEFAULT_SETTINGS.maxStreams})`,
  '--max-body-bytes-in-flight': 'bytes of request bodies read or answered at once; more wait under flow control (default: a sixteenth of the heap limit, 7.25 to 32 MiB)',
  '--registry-lookups-in-flight': `registry lookups in flight in the process (default ${DEFAULT_SETTINGS.registryLookupsInFlight})`,
  '--kubernetes-reads-in-flight': `DRA claim reads in flight in the process (default ${DEFAULT_SETTINGS.kubernetesReadsInFlight})`,
  '--tls-min-version': 'VersionTLS12 or VersionTLS13 (default VersionTLS12; TLS 1.2 with ECDHE and AEAD suites only)',
  '--tls-cipher-suites': `TLS 1.2 suites offered, comma-separated IANA names among ${Object.keys(TLS12_SUITES).join(', ')} (default: all of them)`,
  '--client-ca-file': 'PEM CA bundle that signs the API server\'s client certificate: /mutate then answers only a client that presents one (default: none asked)',
  '--client-common-name': 'with --client-ca-file, the common name the client certificate must have (e.g. kube-apiserver; default: any)',
  '--reload-poll-ms': `how often the certificate and config files are checked for changes, besides a directory watch (default ${DEFAULT_SETTINGS.reloadPollMs})`,
} as const;
type WebhookFlag = keyof typeof WEBHOOK_FLAGS;

export const WEBHOOK_HELP = `vram-preflight ${VERSION} webhook: a mutating admission webhook that wraps vLLM containers of pods at creation

Usage:
  vram-preflight webhook --tls-cert-file tls.crt --tls-key-file tls.key [--config config.yaml] [options]

Serves HTTPS (HTTP/1.1 and HTTP/2, TLS 1.2+):
  POST /mutate    AdmissionReview admission.k8s.io/v1 for Pods on CREATE; always allowed
  GET  /healthz   the process answers
  GET  /readyz    a valid config is loaded (503 while it is not, and while draining)
  GET  /metrics   Prometheus text format
Prints "listening PORT" on stdout once it serves; logs JSON lines on stderr.
SIGTERM: /readyz turns 503 at once; for the shutdown delay it goes on accepting and answering;
then it stops accepting, answers every request accepted, and exits 0 (a second signal: at once).

Webhook options:
${Object.entries(WEBHOOK_FLAGS)
  .map(([flag, help]) => `  ${`${flag} VALUE`.padEnd(36)}${help}`)
  .join('\n')}

Options of the wrap, as for the post-renderer (flag, or environment variable; the config file,
re-read when it changes, sets the same names in camelCase):
${[{ flag: CONFIG_FLAG, env: CONFIG_ENV, help: 'YAML or JSON config file (schema: config.schema.json)' }, ...SCALAR_OPTIONS]
  .map((o) => `  ${`${o.flag} VALUE`.padEnd(36)}${o.help}\n  ${''.padEnd(36)}env ${o.env}`)
  .join('\n')}
  -h, --help                          show this help

Docs: docs/webhook.md.
`;

interface ParsedWebhookArgs {
  help: boolean;
  webhook: Partial<Record<WebhookFlag, string>>;
  configPath?: string;
  flags: { flag: string; value: string }[];
}

function parseWebhookArgs(argv: readonly string[]): ParsedWebhookArgs {
  const parsed: ParsedWebhookArgs = { help: false, webhook: {}, flags: [] };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === '-h' || arg === '--help') return { ...parsed, help: true };
    if (!arg.startsWith('--')) throw new PreflightError('USAGE', `unexpected argument "${arg}"`, { fix: 'see vram-preflight webhook --help' });
    const eq = arg.indexOf('=');
    const flag = eq === -1 ? arg : arg.slice(0, eq);
    let value: string;
    if (eq !== -1) value = arg.slice(eq + 1);
    else if (i + 1 < argv.length) value = argv[++i]!;
    else throw new PreflightError('USAGE', `option ${flag} needs a value`, { fix: 'see vram-preflight webhook --help' });
    if (flag in WEBHOOK_FLAGS) parsed.webhook[flag as WebhookFlag] = value;
    else if (flag === CONFIG_FLAG) parsed.configPath = value;
    else if (SCALAR_OPTIONS.some((o) => o.flag === flag)) parsed.flags.push({ flag, value });
    else throw new PreflightError('USAGE', `unknown option ${flag}`, { fix: 'see vram-preflight webhook --help' });
  }
  return parsed;
}

function whole(flag: WebhookFlag, text: string | undefined, fallback: number, min = 0): number {
  if (text === undefined) return fallback;
  if (!/^\d+$/.test(text.trim()) || Number(text) < min) throw new PreflightError('USAGE', `${flag} is "${text}"`, { fix: `give a whole number${min > 0 ? ` of at least ${min}` : ''}` });
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
  if (!version) throw new PreflightError('USAGE', `--tls-min-version is "${text}"`, { fix: 'give VersionTLS12 or VersionTLS13' });
  return version;
}

function cipherSuites(text: string | undefined): string[] {
  if (text === undefined) return [...DEFAULT_SETTINGS.tlsCipherSuites];
  const names = text.split(',').map((name) => name.trim()).filter((name) => name !== '');
  const unknown = names.filter((name) => !(name in TLS12_SUITES));
  if (names.length === 0 || unknown.length > 0) {
    throw new PreflightError('USAGE', `--tls-cipher-suites ${names.length === 0 ? 'names no suite' : `names ${unknown.join(', ')}, not an ECDHE suite with an AEAD cipher`}`, { fix: `give one or more of ${Object.keys(TLS12_SUITES).join(', ')} (TLS 1.3's suites are always on)` });
  }
  return names;
}

/** Settings from argv; throws PreflightError (USAGE) for bad flags. Undefined: --help was printed. */
export function webhookSettings(argv: readonly string[], io: WebhookIO): WebhookSettings | undefined {
  const args = parseWebhookArgs(argv);
  if (args.help) {
    io.stdout.write(WEBHOOK_HELP);
    return undefined;
  }
  const w = args.webhook;
  const certFile = w['--tls-cert-file'];
  const keyFile = w['--tls-key-file'];
  if (!certFile || !keyFile) throw new PreflightError('USAGE', 'the webhook needs --tls-cert-file and --tls-key-file', { fix: 'mount the Secret of its certificate (cert-manager, or the chart) and pass both paths' });
  if (w['--client-common-name'] && !w['--client-ca-file']) throw new PreflightError('USAGE', '--client-common-name needs --client-ca-file', { fix: 'give the CA that signs the API server\'s client certificate with --client-ca-file' });
  const port = whole('--port', w['--port'], DEFAULT_SETTINGS.port);
  if (port > 65535) throw new PreflightError('USAGE', `--port is ${port}`, { fix: 'give a port from 0 to 65535' });
  return {
    ...DEFAULT_SETTINGS,
    certFile,
    keyFile,
    port,
    address: w['--address'] ?? DEFAULT_SETTINGS.address,
    configPath: args.configPath,
    flags: args.flags,
    env: io.env,
    registryBudgetMs: whole('--registry-budget-ms', w['--registry-budget-ms'], DEFAULT_SETTINGS.registryBudgetMs, 1),
    kubernetesBudgetMs: whole('--kubernetes-budget-ms', w['--kubernetes-budget-ms'], DEFAULT_SETTINGS.kubernetesBudgetMs, 1),
    kubernetesApi: w['--kubernetes-api'] ?? inClusterApiServer(io.env),
    kubernetesCredentialsDir: w['--kubernetes-credentials-dir'] ?? SERVICE_ACCOUNT_DIR,
    shutdownDelayMs: whole('--shutdown-delay-ms', w['--shutdown-delay-ms'], DEFAULT_SETTINGS.shutdownDelayMs),
    drainTimeoutMs: whole('--drain-timeout-ms', w['--drain-timeout-ms'], DEFAULT_SETTINGS.drainTimeoutMs),
    maxConnections: whole('--max-connections', w['--max-connections'], DEFAULT_SETTINGS.maxConnections, 1),
    maxStreams: whole('--max-http2-streams', w['--max-http2-streams'], DEFAULT_SETTINGS.maxStreams, 1),
    ...(w['--max-body-bytes-in-flight'] !== undefined ? { bodyBytesInFlight: whole('--max-body-bytes-in-flight', w['--max-body-bytes-in-flight'], 0, 2 * BODY_LIMIT) } : {}),
    registryLookupsInFlight: whole('--registry-lookups-in-flight', w['--registry-lookups-in-flight'], DEFAULT_SETTINGS.registryLookupsInFlight, 1),
    kubernetesReadsInFlight: whole('--kubernetes-reads-in-flight', w['--kubernetes-reads-in-flight'], DEFAULT_SETTINGS.kubernetesReadsInFlight, 1),
    tlsMinVersion: tlsMinVersion(w['--tls-min-version']),
    tlsCipherSuites: cipherSuites(w['--tls-cipher-suites']),
    ...(w['--client-ca-file'] ? { clientCaFile: w['--client-ca-file'] } : {}),
    ...(w['--client-common-name'] ? { clientCommonName: w['--client-common-name'] } : {}),
    reloadPollMs: whole('--reload-poll-ms', w['--reload-poll-ms'], DEFAULT_SETTINGS.reloadPollMs, 100),
    headersTimeoutMs: DEFAULT_SETTINGS.headersTimeoutMs,
    requestTimeoutMs: DEFAULT_SETTINGS.requestTimeoutMs,
    idleTimeoutMs: DEFAULT_SETTINGS.idleTimeoutMs,
    log: (entry) => io.stderr.write(`${JSON.stringify({ time: new Date().toISOString(), ...entry })}\n`),
    ...(bundleFile() ? { admissionWorkerScript: bundleFile() } : {}),
  };
}

/** The process: runs until SIGTERM/SIGINT. Exit codes: 0 after a drain, 2 usage, 1 cannot start. */
export async function runWebhook(argv: readonly string[], io: WebhookIO = { stdout: process.stdout, stderr: process.stderr, env: process.env }): Promise<void> {
  let settings: WebhookSettings | undefined;
  try {
    settings = webhookSettings(argv, io);
  } catch (error) {
    if (!(error instanceof PreflightError)) throw error;
    io.stderr.write(`vram-preflight: ${error.format()}\n`);
    process.exitCode = 2;
    return;
  }
  if (!settings) return;
  let webhook;
  try {
    webhook = await startWebhook(settings);
  } catch (error) {
    const message = error instanceof PreflightError ? error.format() : `cannot start: ${(error as NodeJS.ErrnoException).code ?? ''} ${(error as Error).message}`;
    settings.log({ level: 'error', msg: 'cannot start', error: message });
    process.exitCode = 1;
    return;
  }
  io.stdout.write(`listening ${webhook.port}\n`);
  // The first signal starts the shutdown (not ready, the shutdown delay, the drain); a second one drains at once.
  const stop = (signal: string): void => {
    settings.log({ level: 'info', msg: `${signal}: shutting down` });
    void webhook.shutdown().then(() => process.exit(0));
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
}
