/**
 * `vram-preflight audit`: which containers of a running cluster run vLLM on
 * an NVIDIA GPU without the preflight, why, and the fix. Reads pods through
 * the Kubernetes API (kubeconfig as kubectl finds it, or the pod's service
 * account), decides them with the core and the same options as the other
 * doors (--config, VRAM_PREFLIGHT_*, flags), prints text or JSON
 * (src/audit.schema.json).
 *
 * Exit codes: 0 every such container is protected (opted-out ones do not
 * count); 3 some are not, or cannot be told to be; 1 the audit could not be
 * done (kubeconfig, API server, RBAC); 2 usage or option error; 70 internal
 * error (the CLI's process around it adds 74: stdout could not be written).
 * On any error nothing is written to stdout.
 *
 * Loaded by src/cli/bin.ts for this command only, from a bundle of its own
 * (scripts/build.mjs: <launcher stem>.audit.cjs): a render never reads it.
 */
import { resolveOptions } from '../config/load.js';
import { AUDIT_RENDER_ONLY_WHY, optionHelp, parseCommandLine, renderOnlyVariable, wrapOptions, type FlagRow } from '../config/flags.js';
import { quoteBounded } from '../config/suggest.js';
import { escapeControl, type Options, PreflightError, type RegistryAnswers, VERSION } from '../core/index.js';
import { KubernetesClient, KubernetesDeadlineError, loadConnection, SERVICE_ACCOUNT_DIR } from '../kubernetes/index.js';
import { COMMAND_BUDGET, registryOptions } from '../registry/options.js';
import { auditCluster, AuditTimedOut, ITEM_LIMIT } from './audit.js';
import { failing, renderJson, renderText } from './render.js';

/** Exit code when some vLLM container on an NVIDIA GPU is not protected (or cannot be told to be). */
export const EXIT_UNPROTECTED = 3;
/** Exit code when the audit could not be done: kubeconfig, API server, RBAC. */
export const EXIT_CANNOT_AUDIT = 1;
export const EXIT_USAGE = 2;
export const EXIT_INTERNAL = 70;

const DEFAULT_CHUNK_SIZE = 500;
/** One request to the API server, the whole exchange (a page of a list: its network time). */
const REQUEST_TIMEOUT_MS = 30_000;
/** The whole audit, unless --timeout says otherwise (docs/webhook.md, "Audit"). */
export const DEFAULT_TIMEOUT = '30s';

/** The audit's own flags: rows of the one option table (src/config/flags.ts), which parses them. */
const AUDIT_ROWS: readonly FlagRow[] = [
  { flag: '--kubeconfig', value: 'FILE', help: "kubeconfig file (default: KUBECONFIG, then ~/.kube/config, then the pod's service account)", doors: ['audit'], kind: 'door' },
  { flag: '--context', value: 'NAME', help: 'kubeconfig context (default: its current-context)', doors: ['audit'], kind: 'door' },
  { flag: '--namespace', aliases: ['-n'], value: 'NAME', help: 'audit this namespace only (default: all namespaces)', doors: ['audit'], kind: 'door' },
  { flag: '--kubernetes-credentials-dir', value: 'DIR', help: `in-cluster credentials (token, ca.crt) from this directory and no others (default in a pod without a kubeconfig: ${SERVICE_ACCOUNT_DIR})`, doors: ['audit'], kind: 'door' },
  { flag: '--webhook-configuration', value: 'NAME', help: 'judge by this MutatingWebhookConfiguration only (default: every one with the webhook pods.vram-preflight.io)', doors: ['audit'], kind: 'door' },
  { flag: '--chunk-size', value: 'N', help: 'objects per list request, as kubectl --chunk-size', doors: ['audit'], kind: 'door', defaultOf: 'chunkSize' },
  { flag: '--timeout', value: 'DURATION', help: 'the whole audit at most this long: 90s, 5m, 1m30s (a bare number: seconds; 0: no limit)', doors: ['audit'], kind: 'door', defaultOf: 'timeout' },
  { flag: '--output', value: 'text|json', help: 'text, or json (schema: audit.schema.json)', doors: ['audit'], kind: 'door' },
];

export const AUDIT_HELP = `vram-preflight ${VERSION} audit: list the containers of a cluster that run vLLM on an NVIDIA GPU without the preflight, why, and the fix

Usage:
  vram-preflight audit [--namespace NS] [--output text|json] [--kubeconfig FILE] [--context NAME] [options]

Reads pods, namespaces and MutatingWebhookConfigurations through the Kubernetes API
(RBAC: the webhook chart's ClusterRole <release>-audit) and decides every pod as the
webhook would, with the same config. Opted-out containers are listed apart.

Exit codes: 0 every vLLM container on an NVIDIA GPU is protected; 3 some are not (or
cannot be told to be); 1 the audit could not be done (kubeconfig, API server, RBAC);
2 usage or option error; 74 stdout could not be written; 70 internal error.

Audit options:
${optionHelp('audit', 'door', AUDIT_ROWS, { chunkSize: DEFAULT_CHUNK_SIZE, timeout: DEFAULT_TIMEOUT })}

Options of the wrap, as for the post-renderer and the webhook (flag, or environment variable;
a config file sets the same names in camelCase), so that the audit decides like the webhook:
${optionHelp('audit', 'wrap')}

Docs: docs/webhook.md ("Audit").
`;

interface ParsedAuditArgs {
  stop?: '--help' | '--version';
  audit: Map<string, string>;
  configPath?: string;
  flags: { flag: string; value: string }[];
  /** --timeout in ms; 0: none. */
  timeoutMs: number;
}

const UNIT_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/** A duration as Go (kubectl, helm) writes one: 90s, 5m, 1m30s, 1.5h; a bare number is seconds, as kubectl's --request-timeout takes it. */
export function parseDuration(text: string): number | undefined {
  const t = text.trim();
  if (/^\d+(\.\d+)?$/.test(t)) return Math.round(Number(t) * 1000);
  if (!/^(\d+(\.\d+)?(ms|s|m|h))+$/.test(t)) return undefined;
  let ms = 0;
  for (const [, number, , unit] of t.matchAll(/(\d+(\.\d+)?)(ms|s|m|h)/g)) ms += Number(number) * UNIT_MS[unit!]!;
  return Math.round(ms);
}

function parseAuditArgs(argv: readonly string[]): ParsedAuditArgs {
  const line = parseCommandLine(argv, 'audit', AUDIT_ROWS);
  if (line.words.length) throw new PreflightError('USAGE', `unexpected argument ${quoteBounded(line.words[0])}`, { fix: 'the audit takes options only; see vram-preflight audit --help' });
  const parsed: ParsedAuditArgs = { stop: line.stop, audit: line.door, ...wrapOptions(line), timeoutMs: 0 };
  const output = parsed.audit.get('--output');
  if (output !== undefined && output !== 'text' && output !== 'json') throw new PreflightError('USAGE', `--output is ${quoteBounded(output)}`, { fix: 'use --output text or --output json' });
  const chunk = parsed.audit.get('--chunk-size');
  if (chunk !== undefined && (!/^\d+$/.test(chunk) || Number(chunk) < 1)) throw new PreflightError('USAGE', `--chunk-size is ${quoteBounded(chunk)}`, { fix: 'give a whole number of at least 1' });
  const timeout = parsed.audit.get('--timeout') ?? DEFAULT_TIMEOUT;
  const timeoutMs = parseDuration(timeout);
  if (timeoutMs === undefined) throw new PreflightError('USAGE', `--timeout is ${quoteBounded(timeout)}`, { fix: 'give a duration: 90s, 5m, 1m30s, or a number of seconds (0: no limit)' });
  parsed.timeoutMs = timeoutMs;
  for (const flag of ['--namespace', '--context', '--kubeconfig', '--kubernetes-credentials-dir', '--webhook-configuration']) {
    if (parsed.audit.get(flag) === '') throw new PreflightError('USAGE', `${flag} is empty`, { fix: `give ${flag} a value, or leave it out` });
  }
  return parsed;
}

export interface AuditIO {
  stdout: { write(text: string): unknown };
  stderr: { write(text: string): unknown };
  env: Readonly<Record<string, string | undefined>>;
  readFile(path: string): string;
  exists(path: string): boolean;
  home?: string;
}

/** The command; returns its exit code. Never throws. */
export async function runAudit(argv: readonly string[], io: AuditIO): Promise<number> {
  const say = (error: PreflightError): void => void io.stderr.write(`vram-preflight: ${error.format()}\n`);
  let args: ParsedAuditArgs;
  let options: Options;
  try {
    args = parseAuditArgs(argv);
    if (args.stop === '--help') {
      io.stdout.write(AUDIT_HELP);
      return 0;
    }
    if (args.stop === '--version') {
      io.stdout.write(`${VERSION}\n`);
      return 0;
    }
    // A render's option in the environment would be read and then do nothing: said instead, as the webhook does.
    const renderOnly = renderOnlyVariable(io.env);
    if (renderOnly) throw new PreflightError('BAD_OPTION', `${renderOnly} is an option of the post-renderer, not of the audit: ${AUDIT_RENDER_ONLY_WHY}`, { fix: `unset ${renderOnly} for the audit` });
    options = resolveOptions({ configPath: args.configPath, flags: args.flags }, io);
  } catch (error) {
    if (!(error instanceof PreflightError)) return internal(io, error);
    say(error);
    return EXIT_USAGE;
  }
  let client: KubernetesClient | undefined;
  const a = (flag: string): string | undefined => args.audit.get(flag);
  // The whole audit's deadline: every request, the exec plugin and the registry lookups end by it.
  const deadline = args.timeoutMs > 0 ? Date.now() + args.timeoutMs : undefined;
  try {
    const connection = loadConnection({ kubeconfig: a('--kubeconfig'), context: a('--context'), credentialsDir: a('--kubernetes-credentials-dir'), env: io.env, readFile: io.readFile, exists: io.exists, home: io.home });
    client = new KubernetesClient(connection, { env: io.env, requestTimeoutMs: REQUEST_TIMEOUT_MS, maxBodyBytes: ITEM_LIMIT, deadline, maxSockets: 4, userAgent: 'vram-preflight-audit' });
    const lookup = async (images: readonly string[]): Promise<RegistryAnswers> => {
      const registry = await import('../registry/index.js');
      const lookups = registryOptions(options, io.env, COMMAND_BUDGET);
      // Within what is left of the audit's deadline.
      const left = deadline === undefined ? Infinity : deadline - Date.now();
      return registry.lookupImageStarts(images, { ...lookups, totalTimeoutMs: Math.max(1, Math.min(lookups.totalTimeoutMs, left)) });
    };
    const result = await auditCluster(client, {
      namespace: a('--namespace'),
      webhookConfiguration: a('--webhook-configuration'),
      chunkSize: a('--chunk-size') === undefined ? DEFAULT_CHUNK_SIZE : Number(a('--chunk-size')),
      options,
      lookup,
      deadline,
    });
    const target = { server: connection.server, credentials: connection.origin, context: connection.context };
    io.stdout.write(a('--output') === 'json' ? renderJson(result, target) : renderText(result, target));
    return failing(result).length > 0 ? EXIT_UNPROTECTED : 0;
  } catch (error) {
    if (!(error instanceof PreflightError)) return internal(io, error);
    say(error instanceof AuditTimedOut || (error instanceof KubernetesDeadlineError && error.which === 'caller') ? timedOut(a('--timeout') ?? DEFAULT_TIMEOUT, error) : error);
    return error.code === 'USAGE' ? EXIT_USAGE : EXIT_CANNOT_AUDIT;
  } finally {
    client?.close();
  }
}

/** The audit's deadline passed: said as such, with how far it got and how to give it more. */
function timedOut(timeout: string, error: PreflightError): PreflightError {
  const progress = error instanceof AuditTimedOut ? ` (${error.progress})` : '';
  return new PreflightError('KUBERNETES_API', `the audit did not finish within --timeout ${timeout}${progress}: ${error.message}`, {
    fix: 'give it more time (--timeout 5m; for the chart\'s CronJob audit.cronJob.timeoutSeconds), or audit one namespace at a time (--namespace); an API server that answers this slowly is worth a look too',
  });
}

function internal(io: AuditIO, error: unknown): number {
  const what = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  io.stderr.write(`vram-preflight: error INTERNAL: ${escapeControl(`internal error (a bug in vram-preflight ${VERSION}): ${what}`)}\n`);
  if (error instanceof Error && error.stack) io.stderr.write(`${error.stack.split('\n').slice(1).map((l) => `  ${l}`).join('\n')}\n`);
  return EXIT_INTERNAL;
}
