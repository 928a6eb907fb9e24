/**
 * The webhook server, put together from its parts, as controller-runtime's
 * webhook server's Start puts its own together:
 *
 * - the transport (./transport.ts: TLS, HTTP/1.1 and HTTP/2, deadlines, the
 *   connection and stream caps, connection books);
 * - the lifecycle (./lifecycle.ts: ready, the shutdown delay and the drain
 *   on SIGTERM);
 * - what is re-read when it changes (./reload.ts: the config file, the
 *   certificate);
 * - the routes (./routes.ts: /mutate, /healthz, /readyz, /metrics, and the
 *   request hygiene), with the one body reader and the budget of bytes in
 *   flight (./body.ts) and the answers (./answers.ts);
 * - the clients an admission uses: registry lookups (./image-starts.ts), DRA
 *   claim reads (./claims.ts), the worker for large bodies (./worker.ts).
 *
 * A config invalid at start makes the webhook not ready, but it serves
 * /healthz and /metrics so that the reason can be seen.
 */
import { existsSync, readFileSync } from 'node:fs';
import { getHeapStatistics } from 'node:v8';
import { type Options, PreflightError, VERSION } from '../core/index.js';
import { KubernetesClient, loadServerConnection } from '../kubernetes/index.js';
import type { AdmissionDependencies } from './admission.js';
import { BODY_LIMIT, ByteBudget, SMALL_BODY } from './body.js';
import { CLAIM_BODY_LIMIT, ClaimReader } from './claims.js';
import { admissionLookupOptions, DEFAULT_CACHE_SETTINGS, ImageStartCache, type LookupFunction } from './image-starts.js';
import { Lifecycle } from './lifecycle.js';
import { webhookMetrics, type WebhookMetrics } from './metrics.js';
import { CertificateReloader, ConfigReloader } from './reload.js';
import { Routes, routeOf } from './routes.js';
import { TLS12_SUITES, Transport, type TlsSettings } from './transport.js';
import type { FileWatch } from './watch.js';
import { AdmissionWorker } from './worker.js';

export { BODY_LIMIT };

export interface WebhookSettings {
  certFile: string;
  keyFile: string;
  /** 0: any free port. */
  port: number;
  /** Empty: every interface. */
  address: string;
  /** The config file (--config, else VRAM_PREFLIGHT_CONFIG). */
  configPath?: string;
  /** Option flags, as the CLI takes them. */
  flags: readonly { flag: string; value: string }[];
  env: Readonly<Record<string, string | undefined>>;
  /** How long one admission waits for registry lookups. */
  registryBudgetMs: number;
  /** How long one admission waits for the Kubernetes API (DRA claims). */
  kubernetesBudgetMs: number;
  /** A kubeconfig (--kubeconfig); absent: KUBECONFIG, in-cluster, ~/.kube/config, as controller-runtime finds one (src/kubernetes). */
  kubeconfig?: string;
  /** https://host:port of the Kubernetes API (--kubernetes-api), with the token and CA of kubernetesCredentialsDir. */
  kubernetesApi?: string;
  /** The service account's token and ca.crt; absent: /var/run/secrets/kubernetes.io/serviceaccount. */
  kubernetesCredentialsDir?: string;
  /** After SIGTERM, how long the server goes on accepting and answering (not ready) before it drains. */
  shutdownDelayMs: number;
  /** How long a drain waits for requests in flight. */
  drainTimeoutMs: number;
  /** How often changed files are looked for, besides the directory watch. */
  reloadPollMs: number;
  headersTimeoutMs: number;
  requestTimeoutMs: number;
  idleTimeoutMs: number;
  /** Connections open at once, at most. */
  maxConnections: number;
  /** Concurrent streams per HTTP/2 connection, at most. */
  maxStreams: number;
  /** Bytes of request bodies read or being answered at once, at most; absent: from the heap's limit (defaultBodyBudget). */
  bodyBytesInFlight?: number;
  /** Registry lookups in flight in the process, at most. */
  registryLookupsInFlight: number;
  /** DRA claim reads in flight in the process, at most. */
  kubernetesReadsInFlight: number;
  tlsMinVersion: TlsSettings['minVersion'];
  /** IANA names of the TLS 1.2 suites offered (TLS12_SUITES). */
  tlsCipherSuites: readonly string[];
  /** PEM CA bundle that signs the API server's client certificate: /mutate then answers only a client with one. */
  clientCaFile?: string;
  /** With clientCaFile: the common name the client certificate must have (Gatekeeper's default: kube-apiserver). */
  clientCommonName?: string;
  /** The script of the worker that decides large bodies (./worker.ts; the webhook bundle); absent: they are decided inline. */
  admissionWorkerScript?: string;
  /** One JSON object per call, written as one line. */
  log: (entry: Record<string, unknown>) => void;
  /** Registry lookups (tests may count them); default: src/registry. */
  lookup?: LookupFunction;
}

export const DEFAULT_SETTINGS = {
  port: 8443,
  address: '',
  registryBudgetMs: DEFAULT_CACHE_SETTINGS.budgetMs,
  kubernetesBudgetMs: 1000,
  // Gatekeeper's --shutdown-delay default (open-policy-agent/gatekeeper main.go).
  shutdownDelayMs: 10_000,
  drainTimeoutMs: 15_000,
  reloadPollMs: 2000,
  headersTimeoutMs: 3000,
  requestTimeoutMs: 5000,
  idleTimeoutMs: 60_000,
  maxConnections: 512,
  maxStreams: 100,
  registryLookupsInFlight: 8,
  kubernetesReadsInFlight: 16,
  tlsMinVersion: 'TLSv1.2',
  tlsCipherSuites: Object.keys(TLS12_SUITES),
} as const satisfies Partial<WebhookSettings>;

/**
 * The budget of body bytes in flight from the heap's limit (V8's, which the
 * chart sets from the container's memory limit): a body parsed into objects
 * takes several times its size while its admission runs, so the budget is a
 * sixteenth of the heap, between two largest bodies and 32 MiB.
 */
export function defaultBodyBudget(heapLimit = getHeapStatistics().heap_size_limit): number {
  return Math.round(Math.min(32 * 1024 * 1024, Math.max(2 * BODY_LIMIT + SMALL_BODY, heapLimit / 16)));
}

export interface Webhook {
  port: number;
  metrics: WebhookMetrics;
  ready(): boolean;
  /** SIGTERM: not ready, serving on for the shutdown delay, then the drain; a second call drains at once. */
  shutdown(): Promise<void>;
  /** Stop accepting, finish what is in flight (at most drainTimeoutMs), close everything. */
  drain(): Promise<void>;
}

/** The TLS settings from the webhook's: the client CA read from its file. */
function tlsSettings(settings: WebhookSettings): TlsSettings {
  let clientCa: Buffer | undefined;
  if (settings.clientCaFile) {
    try {
      clientCa = readFileSync(settings.clientCaFile);
    } catch (error) {
      throw new PreflightError('IO', `cannot read the client CA ${settings.clientCaFile}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`, { fix: 'check --client-ca-file: a readable PEM bundle of the CA that signs the API server\'s client certificate' });
    }
  }
  return { minVersion: settings.tlsMinVersion, cipherSuites: settings.tlsCipherSuites, ...(clientCa ? { clientCa } : {}), ...(settings.clientCommonName ? { clientCommonName: settings.clientCommonName } : {}) };
}

export async function startWebhook(settings: WebhookSettings): Promise<Webhook> {
  const metrics = webhookMetrics();
  const log = settings.log;

  const images = new ImageStartCache({ ...DEFAULT_CACHE_SETTINGS, budgetMs: settings.registryBudgetMs, lookupsInFlight: settings.registryLookupsInFlight }, metrics, settings.lookup, Date.now, log);
  const configPath = settings.configPath ?? (settings.env.VRAM_PREFLIGHT_CONFIG || undefined);
  // Answers read under other registry settings may not hold.
  const config = new ConfigReloader({ path: configPath, flags: settings.flags, env: settings.env }, metrics, log, () => images.clear());
  config.load(true);
  const certificate = new CertificateReloader(settings.certFile, settings.keyFile, metrics, log);
  const budget = new ByteBudget(settings.bodyBytesInFlight ?? defaultBodyBudget());
  // The worker's heap: a quarter of the process's, at least room for a few largest bodies parsed.
  const worker = settings.admissionWorkerScript ? new AdmissionWorker(settings.admissionWorkerScript, Math.max(64, Math.round(getHeapStatistics().heap_size_limit / 4 / 1048576)), log) : undefined;

  // Where the Kubernetes API is and who the webhook is there, as controller-runtime finds it; none: DRA claims cannot be read.
  const kubernetes = loadServerConnection({ kubeconfig: settings.kubeconfig, apiServer: settings.kubernetesApi, credentialsDir: settings.kubernetesCredentialsDir, env: settings.env, readFile: (file) => readFileSync(file, 'utf8'), exists: existsSync, home: settings.env.HOME || undefined });
  const claimReader =
    'connection' in kubernetes
      ? new ClaimReader(
          new KubernetesClient(kubernetes.connection, { env: settings.env, requestTimeoutMs: settings.kubernetesBudgetMs, maxBodyBytes: CLAIM_BODY_LIMIT, maxSockets: settings.kubernetesReadsInFlight, userAgent: `vram-preflight/${VERSION} (webhook)` }),
          { budgetMs: settings.kubernetesBudgetMs, ttlMs: 60_000, failureTtlMs: 10_000, maxInFlight: settings.kubernetesReadsInFlight },
          metrics,
        )
      : undefined;

  const deps = (options: Options): AdmissionDependencies => ({
    options,
    lookup: (wanted) => images.answers(wanted, admissionLookupOptions(options, settings.env)),
    readClaims: claimReader ? (namespace, references) => claimReader.read(namespace, references) : undefined,
    limitHit: (limit) => metrics.limits.inc({ limit }),
  });

  const transport = new Transport({ ...settings, tls: tlsSettings(settings) }, certificate.pair, { route: routeOf, metrics, log });

  const watches: FileWatch[] = [certificate.watch(settings.reloadPollMs, (pair) => transport.setCertificate(pair))];
  const configWatch = config.watch(settings.reloadPollMs);
  if (configWatch) watches.push(configWatch);

  const lifecycle = new Lifecycle(settings, transport, () => (config.options ? undefined : (config.problem ?? 'see the log')), log, {
    stopWatching: () => watches.forEach((w) => w.close()),
    closeClients: () => {
      claimReader?.close();
      worker?.close();
    },
  });
  const routes = new Routes({ lifecycle, config, clientAllowed: (req) => transport.clientAllowed(req), budget, worker, deps, requestTimeoutMs: settings.requestTimeoutMs, metrics, log });

  const port = await transport.listen(routes);
  log({
    level: 'info',
    msg: 'listening',
    version: VERSION,
    port,
    address: settings.address || '*',
    ready: lifecycle.ready(),
    kubernetesApi: 'connection' in kubernetes ? kubernetes.connection.server : null,
    kubernetes: 'connection' in kubernetes ? kubernetes.connection.origin : `none: ${kubernetes.none}`,
    limits: { heapBytes: getHeapStatistics().heap_size_limit, bodyBytesInFlight: budget.capacity, maxConnections: settings.maxConnections, maxStreams: settings.maxStreams, shutdownDelayMs: settings.shutdownDelayMs },
  });

  return { port, metrics, ready: () => lifecycle.ready(), shutdown: () => lifecycle.shutdown(), drain: () => lifecycle.drain() };
}
