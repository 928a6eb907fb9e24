/**
 * `vram-preflight verify`: the ticket's test plan as a command. For one pod
 * and container that the operator names, it first checks and says (each
 * with its fix) that the container is wrapped (the audit's reading), that the
 * pod is Running and Ready, that RBAC allows all it will do, and what it is
 * about to do; without --yes it stops there (exit 0, a plan), as `kubectl
 * drain` asks before it acts. With --yes it restarts the container in place
 * (`kill -TERM 1` through the exec API, --repeat times) and reports, each
 * time, the ticket's checks with their evidence (./restart.ts).
 *
 * Exit codes: 0 the plan (nothing done) or every check held; 3 a check
 * failed, or the container is not wrapped (the report on stdout says which,
 * with the evidence); 1 it could not be done (kubeconfig, API server, RBAC,
 * a pod not Ready, the signal refused); 2 usage or option error; 70 internal
 * error. On any error nothing is written to stdout.
 *
 * Loaded by src/cli/bin.ts for this command only, from the cluster doors'
 * bundle (scripts/build.mjs: <launcher stem>.audit.cjs, which holds the audit
 * too): a render never reads it.
 */
import { resolveOptions } from '../config/load.js';
import { optionHelp, parseCommandLine, renderOnlyVariable, VERIFY_RENDER_ONLY_WHY, wrapOptions, type FlagRow } from '../config/flags.js';
import type { Options } from '../config/sources.js';
import { quoteBounded } from '../config/suggest.js';
import { escapeControl, PreflightError, redactUserinfo, type RegistryAnswers, VERSION } from '../core/index.js';
import { ITEM_LIMIT } from '../audit/audit.js';
import type { AuditIO } from '../audit/main.js';
import { KubernetesApiError, KubernetesClient, KubernetesDeadlineError, loadConnection, SERVICE_ACCOUNT_DIR } from '../kubernetes/index.js';
import { COMMAND_BUDGET, registryOptions } from '../registry/options.js';
import { DEFAULT_ROUND_GAP_MS, signalAt } from './backoff.js';
import { findTarget, rbacCheck, readyCheck, runningSinceOf, statusOf } from './before.js';
import { flagDuration, parseDuration, seconds } from './duration.js';
import { holds, outcomeOf, type Check, type VerifyResult } from './model.js';
import { renderJson, renderText } from './render.js';
import { podPath, restartOnce, SIGNAL_COMMAND } from './restart.js';

export const EXIT_CHECK_FAILED = 3;
export const EXIT_CANNOT_VERIFY = 1;
export const EXIT_USAGE = 2;
export const EXIT_INTERNAL = 70;

const REQUEST_TIMEOUT_MS = 30_000;
const DEFAULT_TIMEOUT = '10m';
const DEFAULT_MARGIN = '30s';
/** Time for the requests around each restart (the checks before, the evidence after), on top of --timeout. */
const ROUND_SLACK_MS = 60_000;
const MAX_REPEAT = 20;
const DEFAULT_ROUND_GAP = '10m15s';
const MAX_ROUND_GAP_MS = 3_600_000;

const VERIFY_ROWS: readonly FlagRow[] = [
  { flag: '--namespace', aliases: ['-n'], value: 'NAME', help: "the pod's namespace (required: verify restarts a container, it does not guess where)", doors: ['verify'], kind: 'door' },
  { flag: '--pod', value: 'NAME', help: 'the pod', doors: ['verify'], kind: 'door' },
  { flag: '--selector', aliases: ['-l'], value: 'SELECTOR', help: 'the pod, by a label selector that matches exactly one running pod (more: refused, listed)', doors: ['verify'], kind: 'door' },
  { flag: '--container', aliases: ['-c'], value: 'NAME', help: "the vLLM container (default: the pod's kubectl.kubernetes.io/default-container, its only container, or its only vLLM container)", doors: ['verify'], kind: 'door' },
  { flag: '--yes', aliases: ['-y'], help: 'do it: restart the container (without it, verify checks and prints the plan, and changes nothing)', doors: ['verify'], kind: 'door', switch: true },
  { flag: '--repeat', value: 'N', help: "restarts, one after the other (the ticket's test plan: 3), each --round-gap after the container's previous restart", doors: ['verify'], kind: 'door', defaultOf: 'repeat' },
  {
    flag: '--round-gap',
    value: 'DURATION',
    help: "how long after the container's previous restart a round's signal waits: the kubelet backs off any exit within 10 minutes of a container's last restart, wrapped or not; shorter: those rounds report that BackOff as the kubelet's, not the race",
    doors: ['verify'],
    kind: 'door',
    defaultOf: 'gap',
  },
  { flag: '--timeout', value: 'DURATION', help: 'how long each restart may take to be Ready again (90s, 10m, 1h)', doors: ['verify'], kind: 'door', defaultOf: 'timeout' },
  { flag: '--cold-start', value: 'DURATION', help: "the model's cold start, to compare each restart with (default: the pod's own, status.startTime to Ready, when nothing in it has restarted)", doors: ['verify'], kind: 'door' },
  { flag: '--restart-margin', value: 'DURATION', help: 'how much longer than the cold start a restart may take and pass', doors: ['verify'], kind: 'door', defaultOf: 'margin' },
  { flag: '--allow-unwrapped', help: 'restart a container that is not wrapped too (to show the incident: it fails)', doors: ['verify'], kind: 'door', switch: true },
  { flag: '--kubeconfig', value: 'FILE', help: "kubeconfig file (default: KUBECONFIG, then ~/.kube/config, then the pod's service account)", doors: ['verify'], kind: 'door' },
  { flag: '--context', value: 'NAME', help: 'kubeconfig context (default: its current-context)', doors: ['verify'], kind: 'door' },
  { flag: '--kubernetes-credentials-dir', value: 'DIR', help: `in-cluster credentials (token, ca.crt) from this directory and no others (default in a pod without a kubeconfig: ${SERVICE_ACCOUNT_DIR})`, doors: ['verify'], kind: 'door' },
  { flag: '--output', value: 'text|json', help: 'text, or json (schema: verify.schema.json)', doors: ['verify'], kind: 'door' },
];

export const VERIFY_HELP = `vram-preflight ${VERSION} verify: restart a vLLM container in place, as the kubelet does, and check that it recovers on the first attempt

Usage:
  vram-preflight verify --namespace NS (--pod NAME | --selector SELECTOR) [--container NAME] [--yes] [--repeat N] [options]

First it checks, and says with the fix of each: the container is wrapped (as vram-preflight
audit reads it), the pod is Running and Ready, RBAC allows what verify does; then the plan.
Without --yes it stops there and changes nothing. With --yes it runs kill -TERM 1 in the
container through the exec API, watches the pod until the container is Ready again, and checks:
restartCount +1 exactly, no BackOff event, the preflight's lines in the new container's log, no
"Free memory on device" error from vLLM, SIGTERM -> Ready against the cold start.
While the container restarts it serves nothing.

RBAC in the namespace: get and watch pods (list with --selector), create and get pods/exec,
get pods/log, list events.

Exit codes: 0 the plan, or every check held; 3 a check failed, or the container is not
wrapped; 1 it could not be done (kubeconfig, API server, RBAC, a pod not Ready, the signal
refused); 2 usage or option error; 74 stdout could not be written; 70 internal error.

Verify options:
${optionHelp('verify', 'door', VERIFY_ROWS, { repeat: 1, timeout: DEFAULT_TIMEOUT, margin: DEFAULT_MARGIN, gap: DEFAULT_ROUND_GAP })}

Options of the wrap, as for the audit (flag, or environment variable; a config file sets the
same names in camelCase), so that verify reads the pod as the audit and the webhook do:
${optionHelp('verify', 'wrap')}

Docs: docs/restart-race.md ("With vram-preflight verify").
`;

interface VerifyArgs {
  stop?: '--help' | '--version';
  door: Map<string, string>;
  configPath?: string;
  flags: { flag: string; value: string }[];
  namespace: string;
  pod?: string;
  selector?: string;
  container?: string;
  yes: boolean;
  allowUnwrapped: boolean;
  repeat: number;
  timeoutMs: number;
  coldStartMs?: number;
  marginMs: number;
  roundGapMs: number;
  output: 'text' | 'json';
}

function parseVerifyArgs(argv: readonly string[]): VerifyArgs | { stop: '--help' | '--version' } {
  const line = parseCommandLine(argv, 'verify', VERIFY_ROWS);
  if (line.stop) return { stop: line.stop };
  if (line.words.length) throw new PreflightError('USAGE', `unexpected argument ${quoteBounded(line.words[0])}`, { fix: 'verify takes options only: name the pod with --pod NAME or --selector; see vram-preflight verify --help' });
  const d = line.door;
  for (const flag of ['--namespace', '--pod', '--selector', '--container', '--context', '--kubeconfig', '--kubernetes-credentials-dir']) {
    if (d.get(flag) === '') throw new PreflightError('USAGE', `${flag} is empty`, { fix: `give ${flag} a value, or leave it out` });
  }
  const namespace = d.get('--namespace');
  if (namespace === undefined) throw new PreflightError('USAGE', 'no --namespace', { fix: 'name the pod\'s namespace: --namespace NS (verify restarts a container and does not take a default)' });
  if ((d.get('--pod') === undefined) === (d.get('--selector') === undefined)) {
    throw new PreflightError('USAGE', d.get('--pod') === undefined ? 'no pod: give --pod or --selector' : '--pod and --selector both given', { fix: 'name the pod with --pod NAME, or find it with --selector (one running pod must match)' });
  }
  const output = d.get('--output') ?? 'text';
  if (output !== 'text' && output !== 'json') throw new PreflightError('USAGE', `--output is ${quoteBounded(output)}`, { fix: 'use --output text or --output json' });
  const repeat = d.get('--repeat') ?? '1';
  if (!/^\d+$/.test(repeat) || Number(repeat) < 1 || Number(repeat) > MAX_REPEAT) throw new PreflightError('USAGE', `--repeat is ${quoteBounded(repeat)}`, { fix: `give a whole number from 1 to ${MAX_REPEAT} (the ticket's test plan: 3)` });
  const cold = d.get('--cold-start');
  return {
    door: d,
    ...wrapOptions(line),
    namespace,
    pod: d.get('--pod'),
    selector: d.get('--selector'),
    container: d.get('--container'),
    yes: d.get('--yes') === 'true',
    allowUnwrapped: d.get('--allow-unwrapped') === 'true',
    repeat: Number(repeat),
    timeoutMs: parseDuration(d.get('--timeout') ?? DEFAULT_TIMEOUT, '--timeout', { min: 1000 }),
    ...(cold !== undefined && { coldStartMs: parseDuration(cold, '--cold-start') }),
    marginMs: parseDuration(d.get('--restart-margin') ?? DEFAULT_MARGIN, '--restart-margin', { min: 0 }),
    roundGapMs: roundGap(d.get('--round-gap')),
    output,
  };
}

function roundGap(text: string | undefined): number {
  if (text === undefined) return DEFAULT_ROUND_GAP_MS;
  const ms = parseDuration(text, '--round-gap', { min: 0 });
  if (ms > MAX_ROUND_GAP_MS) throw new PreflightError('USAGE', `--round-gap is ${quoteBounded(text)}, more than 1h`, { fix: `the kubelet forgets a back-off after 10 minutes: the default, ${DEFAULT_ROUND_GAP}, is enough` });
  return ms;
}

/** The same edges as the audit's: streams, the environment and the kubeconfig's files. */
export type VerifyIO = AuditIO;

/** The checks before anything happens, on stderr, when they stop the run (stdout stays empty on an error). */
function sayChecks(io: VerifyIO, checks: readonly Check[]): void {
  io.stderr.write('vram-preflight: verify: before anything happens:\n');
  for (const c of checks) {
    io.stderr.write(`  ${c.ok === false ? 'FAILED' : 'ok    '} ${c.name}: ${escapeControl(c.detail)}\n`);
    if (c.ok === false && c.fix) io.stderr.write(`         fix: ${escapeControl(c.fix)}\n`);
  }
}

/** The command; returns its exit code. Never throws. */
export async function runVerify(argv: readonly string[], io: VerifyIO): Promise<number> {
  // An error may quote the server's URL, the API server's message or a container's output: a password in a URL is not shown (user:xxxxx@).
  const say = (error: PreflightError): void => void io.stderr.write(`vram-preflight: ${redactUserinfo(error.format())}\n`);
  let args: VerifyArgs;
  let options: Options;
  try {
    const parsed = parseVerifyArgs(argv);
    if ('stop' in parsed && parsed.stop !== undefined) {
      io.stdout.write(parsed.stop === '--help' ? VERIFY_HELP : `${VERSION}\n`);
      return 0;
    }
    args = parsed as VerifyArgs;
    const renderOnly = renderOnlyVariable(io.env);
    if (renderOnly) throw new PreflightError('BAD_OPTION', `${renderOnly} is an option of the post-renderer, not of verify: ${VERIFY_RENDER_ONLY_WHY}`, { fix: `unset ${renderOnly} for verify` });
    options = resolveOptions({ configPath: args.configPath, flags: args.flags }, io);
  } catch (error) {
    if (!(error instanceof PreflightError)) return internal(io, error);
    say(error);
    return EXIT_USAGE;
  }
  // The whole run's deadline: the checks, then each restart's wait for its gap, its --timeout and the requests around it.
  const deadline = Date.now() + ROUND_SLACK_MS + args.repeat * (args.roundGapMs + args.timeoutMs + ROUND_SLACK_MS);
  let client: KubernetesClient | undefined;
  let progress: string | undefined;
  try {
    return await verify(args, options, io, deadline, (text) => (progress = text), (c) => (client = c));
  } catch (failure) {
    const error = failure instanceof KubernetesApiError ? apiError(failure) : failure instanceof KubernetesDeadlineError && failure.which === 'caller' ? timedOut(args, failure) : failure;
    if (!(error instanceof PreflightError)) return internal(io, error);
    say(progress === undefined ? error : new PreflightError(error.code, `${error.message} (${progress})`, { ...error.details, fix: error.details.fix }));
    return error.code === 'USAGE' ? EXIT_USAGE : EXIT_CANNOT_VERIFY;
  } finally {
    client?.close();
  }
}

/** The run itself, once the command line is read: its exit code, or it throws the error that stops it. */
async function verify(args: VerifyArgs, options: Options, io: VerifyIO, deadline: number, setProgress: (text: string) => void, setClient: (client: KubernetesClient) => void): Promise<number> {
  const d = (flag: string): string | undefined => args.door.get(flag);
  const connection = loadConnection({ kubeconfig: d('--kubeconfig'), context: d('--context'), credentialsDir: d('--kubernetes-credentials-dir'), env: io.env, readFile: io.readFile, exists: io.exists, home: io.home });
  // The audit's client settings (a pod, a watch event: at most ITEM_LIMIT), within the whole run's deadline.
  const client = new KubernetesClient(connection, { env: io.env, requestTimeoutMs: REQUEST_TIMEOUT_MS, maxBodyBytes: ITEM_LIMIT, deadline, maxSockets: 4, userAgent: `vram-preflight/${VERSION} (verify)` });
  setClient(client);
  const lookup = async (images: readonly string[]): Promise<RegistryAnswers> => {
    const registry = await import('../registry/index.js');
    const lookups = registryOptions(options, io.env, COMMAND_BUDGET);
    return registry.lookupImageStarts(images, { ...lookups, totalTimeoutMs: Math.max(1, Math.min(lookups.totalTimeoutMs, deadline - Date.now())) });
  };
  const found = await findTarget(client, { namespace: args.namespace, pod: args.pod, selector: args.selector, container: args.container, coldStartMs: args.coldStartMs }, { options, lookup, deadline });
  const target = found.target;
  const before = [found.wrapped, readyCheck(found.pod, target.container), await rbacCheck(client, target.namespace, target.pod, args.selector !== undefined)];
  const now = Date.now();
  const first = signalAt(target, now, args.roundGapMs);
  const firstSignal = first > now + 1000 ? { firstSignalAt: first } : {};
  const result: VerifyResult = {
    target,
    before,
    plan: { yes: args.yes, repeat: args.repeat, timeoutMs: args.timeoutMs, marginMs: args.marginMs, allowUnwrapped: args.allowUnwrapped, command: SIGNAL_COMMAND, roundGapMs: args.roundGapMs, ...firstSignal },
    rounds: [],
    unread: found.unread,
  };
  const blocking = before.filter((c) => c.name !== 'wrapped' && c.ok === false);
  if (blocking.length > 0) {
    sayChecks(io, before);
    throw new PreflightError('CANNOT_VERIFY', `pod ${target.namespace}/${target.pod}, container "${target.container}": ${blocking.map((c) => c.name).join(' and ')} failed (above); nothing was done`, { fix: blocking.map((c) => c.fix).filter(Boolean).join('; ') });
  }
  const wrapped = found.wrapped.ok === true;
  if (args.yes && (wrapped || args.allowUnwrapped)) {
    for (let round = 1; round <= args.repeat; round++) {
      setProgress(round === 1 ? 'no restart was done' : `after ${round - 1} of ${args.repeat} restarts, each recovered`);
      // Out of the kubelet's back-off window first (./backoff.ts): said on stderr, as the wait may be long.
      const status = statusOf(round === 1 ? found.pod : await client.get(podPath(target)), target.container);
      const timing = { restartCount: Number(status?.restartCount ?? 0), ...runningSinceOf(status) };
      const at = signalAt(timing, Date.now(), args.roundGapMs);
      if (at > Date.now()) {
        io.stderr.write(`vram-preflight: verify: round ${round} of ${args.repeat} waits ${seconds(at - Date.now())}, until ${new Date(at).toISOString()}: --round-gap ${flagDuration(args.roundGapMs)} after the container's previous restart (${timing.runningSince}), as the kubelet backs off any exit within 10 minutes of it\n`);
        await new Promise((resolve) => setTimeout(resolve, at - Date.now()));
      }
      const done = await restartOnce(client, { target, round, readyBy: Math.min(Date.now() + args.timeoutMs, deadline), timeoutMs: args.timeoutMs, marginMs: args.marginMs }, wrapped);
      result.rounds.push(done);
      if (!holds(done.checks) && round < args.repeat) {
        result.stopped = `round ${round} failed; the ${args.repeat - round} restart(s) left were not done`;
        break;
      }
    }
  }
  const where = { server: redactUserinfo(connection.server), credentials: connection.origin, context: connection.context };
  io.stdout.write(args.output === 'json' ? renderJson(result, where) : renderText(result, where));
  const outcome = outcomeOf(result);
  return outcome === 'plan' || outcome === 'passed' ? 0 : EXIT_CHECK_FAILED;
}

/** A request the API server refused, as the error verify stops with (exit 1), with the fix for its status. */
function apiError(error: KubernetesApiError): PreflightError {
  const fix =
    error.status === 403
      ? 'grant what the message names (the Role in docs/restart-race.md, "With vram-preflight verify")'
      : error.status === 401
        ? 'the credentials were not accepted: log in again, or check the kubeconfig user (kubectl auth whoami)'
        : 'check the API server and the request above';
  return new PreflightError('KUBERNETES_API', `the Kubernetes API refused ${error.path.split('?')[0]}: ${error.message}`, { fix });
}

/** The whole run's deadline passed (each --timeout and the requests around it): said as such, with how far it got. */
function timedOut(args: VerifyArgs, error: KubernetesDeadlineError): PreflightError {
  return new PreflightError('KUBERNETES_API', `verify did not finish within its deadline (${ROUND_SLACK_MS / 1000} s, and --round-gap, --timeout and ${ROUND_SLACK_MS / 1000} s for each of the ${args.repeat} restart(s)): ${error.message}`, {
    fix: 'check that the API server answers (kubectl get --raw /readyz); an API server this slow makes the restart\'s figures meaningless too',
  });
}

function internal(io: VerifyIO, error: unknown): number {
  const what = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  io.stderr.write(`vram-preflight: error INTERNAL: ${escapeControl(`internal error (a bug in vram-preflight ${VERSION}): ${what}`)}\n`);
  if (error instanceof Error && error.stack) io.stderr.write(`${error.stack.split('\n').slice(1).map((l) => `  ${l}`).join('\n')}\n`);
  return EXIT_INTERNAL;
}

