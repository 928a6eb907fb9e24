/**
 * The webhook server: what it serves, put together from its parts.
 *
 *   POST /mutate    AdmissionReview v1 (./admission.ts)
 *   GET  /healthz   the process answers
 *   GET  /readyz    a valid config is loaded and the process is not draining
 *   GET  /metrics   Prometheus text format 0.0.4 (./metrics.ts)
 *
 * The parts: the transport (./transport.ts: TLS, HTTP/1.1 and HTTP/2,
 * deadlines, connection books), the lifecycle (./lifecycle.ts: ready, the
 * drain on SIGTERM), what is re-read when it changes (./reload.ts: the config
 * file, the certificate), the one body reader (./body.ts), and the answers
 * (./answers.ts). A config invalid at start makes the webhook not ready, but
 * it serves /healthz and /metrics so that the reason can be seen.
 *
 * Request hygiene: /mutate takes POST only (405), application/json only
 * (415), at most BODY_LIMIT bytes (413; the API server's objects are at most
 * ~3 MiB), malformed bodies get 400 with a message.
 */
import type { Options } from '../core/options.js';
import { VERSION } from '../core/version.js';
import type { RegistryOptions } from '../registry/index.js';
import { admit, type AdmissionDependencies } from './admission.js';
import { notReadyAnswer } from './answers.js';
import { BODY_LIMIT, HttpProblem, readBody, type Request } from './body.js';
import { ClaimReader } from './claims.js';
import { DEFAULT_CACHE_SETTINGS, ImageStartCache, type LookupFunction } from './image-starts.js';
import { Lifecycle } from './lifecycle.js';
import { webhookMetrics, type WebhookMetrics } from './metrics.js';
import { CertificateReloader, ConfigReloader } from './reload.js';
import { Transport, type Response } from './transport.js';
import type { FileWatch } from './watch.js';

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
  /** https://host:port of the Kubernetes API; absent: none (DRA claims cannot be read). */
  kubernetesApi?: string;
  kubernetesCredentialsDir: string;
  /** How long a drain waits for requests in flight. */
  drainTimeoutMs: number;
  /** How often changed files are looked for, besides the directory watch. */
  reloadPollMs: number;
  headersTimeoutMs: number;
  requestTimeoutMs: number;
  idleTimeoutMs: number;
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
  drainTimeoutMs: 15_000,
  reloadPollMs: 2000,
  headersTimeoutMs: 3000,
  requestTimeoutMs: 5000,
  idleTimeoutMs: 60_000,
} as const;

export interface Webhook {
  port: number;
  metrics: WebhookMetrics;
  ready(): boolean;
  /** Stop accepting, finish what is in flight (at most drainTimeoutMs), close everything. */
  drain(): Promise<void>;
}

/** The registry client's options: per request within the pod's budget; the whole lookup may run on after it, bounded, to fill the cache. */
function registryOptions(options: Options, env: WebhookSettings['env']): RegistryOptions {
  const requestTimeoutMs = Math.min(5000, Math.round(options.registryTimeoutSeconds * 1000));
  return {
    platform: options.registryPlatform,
    cacheDir: options.cacheDir ?? `${env.TMPDIR || '/tmp'}/vram-preflight-cache`,
    requestTimeoutMs,
    totalTimeoutMs: 3 * requestTimeoutMs,
    insecureRegistries: options.registryInsecure,
    caFile: options.registryCaFile,
    env,
  };
}

const ROUTES = new Set(['/mutate', '/healthz', '/readyz', '/metrics']);
const pathOf = (req: Request): string => (req.url ?? '').split('?')[0]!;
const TEXT = 'text/plain; charset=utf-8';

export async function startWebhook(settings: WebhookSettings): Promise<Webhook> {
  const metrics = webhookMetrics();
  const log = settings.log;

  const images = new ImageStartCache(DEFAULT_CACHE_SETTINGS.budgetMs === settings.registryBudgetMs ? DEFAULT_CACHE_SETTINGS : { ...DEFAULT_CACHE_SETTINGS, budgetMs: settings.registryBudgetMs }, metrics, settings.lookup);
  const configPath = settings.configPath ?? (settings.env.VRAM_PREFLIGHT_CONFIG || undefined);
  // Answers read under other registry settings may not hold.
  const config = new ConfigReloader({ path: configPath, flags: settings.flags, env: settings.env }, metrics, log, () => images.clear());
  config.load(true);
  const certificate = new CertificateReloader(settings.certFile, settings.keyFile, metrics, log);

  const claimReader = settings.kubernetesApi
    ? new ClaimReader({ apiServer: settings.kubernetesApi, credentialsDir: settings.kubernetesCredentialsDir, budgetMs: settings.kubernetesBudgetMs, ttlMs: 60_000, failureTtlMs: 10_000 }, metrics)
    : undefined;

  const deps = (options: Options): AdmissionDependencies => ({
    options,
    lookup: (wanted) => images.answers(wanted, registryOptions(options, settings.env)),
    readClaims: claimReader ? (namespace, references) => claimReader.read(namespace, references) : undefined,
  });

  const mutate = async (req: Request, res: Response): Promise<void> => {
    const started = process.hrtime.bigint();
    if (req.method !== 'POST') {
      transport.send(req, res, 405, TEXT, `${req.method} is not allowed here: POST an AdmissionReview\n`, { allow: 'POST' });
      return;
    }
    const type = String(req.headers['content-type'] ?? '');
    if (!/^application\/json\s*(;|$)/i.test(type)) {
      transport.send(req, res, 415, TEXT, `Content-Type is ${JSON.stringify(type)}: send application/json\n`);
      return;
    }
    let text: string;
    try {
      text = await readBody(req, settings.requestTimeoutMs);
    } catch (error) {
      const status = error instanceof HttpProblem ? error.status : 400;
      metrics.admissions.inc({ outcome: 'invalid', dry_run: 'false' });
      log({ level: 'warn', msg: 'request refused', status, error: (error as Error).message });
      transport.send(req, res, status, TEXT, `${(error as Error).message}\n`);
      return;
    }
    // Not ready (no valid config yet): the API server should not be sending; if it does, the pod goes in unchanged.
    const options = config.options;
    const admission = options ? await admit(text, deps(options)) : notReadyAnswer(text);
    metrics.admissions.inc({ outcome: admission.outcome, dry_run: String(admission.dryRun) });
    metrics.containers.inc({ result: 'wrapped' }, admission.wrapped.length);
    metrics.containers.inc({ result: 'refused' }, admission.refused.length);
    metrics.containers.inc({ result: 'skipped' }, admission.skipped);
    const seconds = Number(process.hrtime.bigint() - started) / 1e9;
    metrics.latency.observe(seconds);
    const { level, ...fields } = admission.log;
    log({ level: level ?? (admission.status === 200 ? 'info' : 'warn'), msg: 'admission', ...fields, ...(admission.status !== 200 ? { status: admission.status } : {}), durationMs: Math.round(seconds * 1e5) / 100 });
    transport.send(req, res, admission.status, 'application/json', admission.body);
  };

  const handle = async (req: Request, res: Response): Promise<void> => {
    const path = pathOf(req);
    if (path === '/mutate') return mutate(req, res);
    if (req.method !== 'GET' && req.method !== 'HEAD') return transport.send(req, res, 405, TEXT, `${req.method} is not allowed here\n`, { allow: 'GET' });
    if (path === '/healthz') return transport.send(req, res, 200, TEXT, 'ok\n');
    if (path === '/readyz') return lifecycle.ready() ? transport.send(req, res, 200, TEXT, 'ok\n') : transport.send(req, res, 503, TEXT, `${lifecycle.whyNotReady()}\n`);
    if (path === '/metrics') return transport.send(req, res, 200, 'text/plain; version=0.0.4; charset=utf-8', metrics.render());
    return transport.send(req, res, 404, TEXT, 'not found: POST /mutate, GET /healthz, /readyz, /metrics\n');
  };

  const transport = new Transport(settings, certificate.pair, { handle, route: (req) => (ROUTES.has(pathOf(req)) ? pathOf(req) : 'other'), metrics, log });

  const watches: FileWatch[] = [certificate.watch(settings.reloadPollMs, (pair) => transport.setCertificate(pair))];
  const configWatch = config.watch(settings.reloadPollMs);
  if (configWatch) watches.push(configWatch);

  const lifecycle = new Lifecycle(settings, transport, () => (config.options ? undefined : (config.problem ?? 'see the log')), log, {
    stopWatching: () => watches.forEach((w) => w.close()),
    closeClients: () => claimReader?.close(),
  });

  const port = await transport.listen();
  log({ level: 'info', msg: 'listening', version: VERSION, port, address: settings.address || '*', ready: lifecycle.ready(), kubernetesApi: settings.kubernetesApi ?? null });

  return { port, metrics, ready: () => lifecycle.ready(), drain: () => lifecycle.drain() };
}
