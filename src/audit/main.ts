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
import { escapeControl, PreflightError, VERSION, type Options, type RegistryAnswers } from '../core/index.js';
import { KubernetesClient, loadConnection, SERVICE_ACCOUNT_DIR } from '../kubernetes/index.js';
import type { RegistryOptions } from '../registry/index.js';
import { auditCluster } from './audit.js';
import { failing, renderJson, renderText } from './render.js';

/** Exit code when some vLLM container on an NVIDIA GPU is not protected (or cannot be told to be). */
export const EXIT_UNPROTECTED = 3;
/** Exit code when the audit could not be done: kubeconfig, API server, RBAC. */
export const EXIT_CANNOT_AUDIT = 1;
export const EXIT_USAGE = 2;
export const EXIT_INTERNAL = 70;

const DEFAULT_CHUNK_SIZE = 500;
const REQUEST_TIMEOUT_MS = 30_000;

/** The audit's own flags: rows of the one option table (src/config/flags.ts), which parses them. */
const AUDIT_ROWS: readonly FlagRow[] = [
  { flag: '--kubeconfig', value: 'FILE', help: "kubeconfig file (default: KUBECONFIG, then ~/.kube/config, then the pod's service account)", doors: ['audit'], kind: 'door' },
  { flag: '--context', value: 'NAME', help: 'kubeconfig context (default: its current-context)', doors: ['audit'], kind: 'door' },
  { flag: '--namespace', aliases: ['-n'], value: 'NAME', help: 'audit this namespace only (default: all namespaces)', doors: ['audit'], kind: 'door' },
  { flag: '--kubernetes-credentials-dir', value: 'DIR', help: `in-cluster credentials (token, ca.crt) from this directory and no others (default in a pod without a kubeconfig: ${SERVICE_ACCOUNT_DIR})`, doors: ['audit'], kind: 'door' },
  { flag: '--webhook-configuration', value: 'NAME', help: 'judge by this MutatingWebhookConfiguration only (default: every one with the webhook pods.vram-preflight.io)', doors: ['audit'], kind: 'door' },
  { flag: '--chunk-size', value: 'N', help: 'objects per list request, as kubectl --chunk-size', doors: ['audit'], kind: 'door', defaultOf: 'chunkSize' },
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
${optionHelp('audit', 'door', AUDIT_ROWS, { chunkSize: DEFAULT_CHUNK_SIZE })}

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
}

function parseAuditArgs(argv: readonly string[]): ParsedAuditArgs {
  const line = parseCommandLine(argv, 'audit', AUDIT_ROWS);
  if (line.words.length) throw new PreflightError('USAGE', `unexpected argument ${quoteBounded(line.words[0])}`, { fix: 'the audit takes options only; see vram-preflight audit --help' });
  const parsed: ParsedAuditArgs = { stop: line.stop, audit: line.door, ...wrapOptions(line) };
  const output = parsed.audit.get('--output');
  if (output !== undefined && output !== 'text' && output !== 'json') throw new PreflightError('USAGE', `--output is ${quoteBounded(output)}`, { fix: 'use --output text or --output json' });
  const chunk = parsed.audit.get('--chunk-size');
  if (chunk !== undefined && (!/^\d+$/.test(chunk) || Number(chunk) < 1)) throw new PreflightError('USAGE', `--chunk-size is ${quoteBounded(chunk)}`, { fix: 'give a whole number of at least 1' });
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

/** The registry client's options from ours: those of a CLI run (src/cli/main.ts), the audit being one. */
function registryOptions(options: Options, env: AuditIO['env']): RegistryOptions {
  const requestTimeoutMs = Math.round(options.registryTimeoutSeconds * 1000);
  return { platform: options.registryPlatform, cacheDir: options.cacheDir, requestTimeoutMs, totalTimeoutMs: Math.max(15_000, 3 * requestTimeoutMs), insecureRegistries: options.registryInsecure, caFile: options.registryCaFile, env };
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
  try {
    const a = (flag: string): string | undefined => args.audit.get(flag);
    const connection = loadConnection({ kubeconfig: a('--kubeconfig'), context: a('--context'), credentialsDir: a('--kubernetes-credentials-dir'), env: io.env, readFile: io.readFile, exists: io.exists, home: io.home });
    client = new KubernetesClient(connection, { requestTimeoutMs: REQUEST_TIMEOUT_MS, env: io.env });
    const lookup = async (images: readonly string[]): Promise<RegistryAnswers> => {
      const registry = await import('../registry/index.js');
      return registry.lookupImageStarts(images, registryOptions(options, io.env));
    };
    const result = await auditCluster(client, {
      namespace: a('--namespace'),
      webhookConfiguration: a('--webhook-configuration'),
      chunkSize: a('--chunk-size') === undefined ? DEFAULT_CHUNK_SIZE : Number(a('--chunk-size')),
      options,
      lookup,
    });
    const target = { server: connection.server, credentials: connection.origin, context: connection.context };
    io.stdout.write(a('--output') === 'json' ? renderJson(result, target) : renderText(result, target));
    return failing(result).length > 0 ? EXIT_UNPROTECTED : 0;
  } catch (error) {
    if (!(error instanceof PreflightError)) return internal(io, error);
    say(error);
    return error.code === 'USAGE' ? EXIT_USAGE : EXIT_CANNOT_AUDIT;
  } finally {
    client?.close();
  }
}

function internal(io: AuditIO, error: unknown): number {
  const what = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  io.stderr.write(`vram-preflight: error INTERNAL: ${escapeControl(`internal error (a bug in vram-preflight ${VERSION}): ${what}`)}\n`);
  if (error instanceof Error && error.stack) io.stderr.write(`${error.stack.split('\n').slice(1).map((l) => `  ${l}`).join('\n')}\n`);
  return EXIT_INTERNAL;
}
