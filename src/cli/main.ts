/**
 * The command line: a function of its argv, streams and environment that
 * returns an exit code. Reading stdin, files and the environment happens here
 * and nowhere else; the transform itself is pure.
 *
 * Exit codes: 0 success; 1 the input cannot be rewritten safely (or explain
 * found such a container); 2 usage or option error. On any error nothing is
 * written to stdout.
 */
import { isUtf8 } from 'node:buffer';
import { CONFIG_FLAG } from '../config/sources.js';
import { optionHelp, parseCommandLine } from '../config/flags.js';
import { closest, quoteBounded } from '../config/suggest.js';
import { resolveOptions } from '../config/load.js';
import { type CandidateRule, escapeControl, type Options, PreflightError, renderExplanation, renderReport, type StreamText, transform, type TransformResult, VERSION, withLookups } from '../core/index.js';
import type { ImageStartAnswer, LookupFailure, RegistryOptions } from '../registry/index.js';
import { COMMAND_BUDGET, registryOptions, withTypedImages } from '../registry/options.js';

export interface CliIO {
  stdin: AsyncIterable<Uint8Array | string>;
  stdout: { write(text: string): unknown };
  stderr: { write(text: string): unknown };
  env: Readonly<Record<string, string | undefined>>;
  readFile(path: string): string;
  writeFile(path: string, text: string): void;
  /** Reads image starts from registries (src/registry); absent: no lookups. */
  lookupImageStarts?(images: readonly string[], options: RegistryOptions): Promise<Map<string, ImageStartAnswer | LookupFailure>>;
}

const HELP = `vram-preflight ${VERSION}: make vLLM containers wait for GPU memory before they start

Usage:
  vram-preflight [options] < rendered.yaml > wrapped.yaml
  vram-preflight explain [--output text|json] [options] < rendered.yaml
  vram-preflight resolve [options] IMAGE...     print config images entries read from the registry
  vram-preflight webhook --help                 the cluster-wide admission webhook (docs/webhook.md)
  vram-preflight admit [options] < pod.yaml     what the webhook answers for a pod, a workload or an admission review
  vram-preflight audit --help                   running vLLM containers that do not wait, why, the fix (docs/webhook.md)
  vram-preflight verify --help                  restart one in place and check it recovers at once (docs/restart-race.md)
  helm install NAME CHART --post-renderer vram-preflight [--post-renderer-args --timeout-seconds=600]

Rewrites every container that starts vLLM on an NVIDIA GPU so that it waits
until each GPU has the memory vLLM will ask for, then starts vLLM unchanged.
Every other document passes through byte for byte.

Options (flag, or environment variable; a config file sets the same names in camelCase):
${optionHelp('render', 'all')}

Annotations on a workload or its pod template:
  vram-preflight.io/skip: "true"                      leave this workload alone
  vram-preflight.io/containers: "name[,name]"         also wrap these containers (custom images)
  vram-preflight.io/gpu-memory-utilization: "0.85"    the utilization, when the args cannot say it

Exit codes: 0 ok, 1 input cannot be rewritten safely, 2 usage or option error,
74 stdout could not be written (the output is incomplete), 70 internal error.
Docs: docs/ in the package (detection, configuration, errors, operations).
`;

type Command = 'transform' | 'explain' | 'resolve';

interface ParsedArgs {
  command: Command | 'help' | 'version';
  flags: { flag: string; value: string }[];
  configPath?: string;
  output: 'text' | 'json';
  /** `resolve`'s images. */
  images: string[];
}

const OUTPUT_FLAG = '--output';

/** The commands a first word may name (`webhook` and `admit` are started by src/cli/bin.ts before this parser runs). */
const COMMANDS: readonly string[] = ['explain', 'resolve', 'webhook', 'admit', 'audit', 'verify'];

function parseArgs(argv: readonly string[]): ParsedArgs {
  const line = parseCommandLine(argv, 'render');
  const parsed: ParsedArgs = { command: 'transform', flags: [], output: 'text', images: [] };
  if (line.stop === '--help') return { ...parsed, command: 'help' };
  if (line.stop === '--version') return { ...parsed, command: 'version' };
  const [first, ...rest] = line.words;
  if (first === 'explain' || first === 'resolve') parsed.command = first;
  else if (first !== undefined) refuseWord(first, true);
  if (parsed.command === 'resolve') parsed.images = rest;
  else if (rest.length) refuseWord(rest[0]!, false);
  for (const { flag, value } of line.wrap) {
    if (flag === CONFIG_FLAG) parsed.configPath = value;
    else parsed.flags.push({ flag, value });
  }
  const output = line.door.get(OUTPUT_FLAG);
  if (output !== undefined) {
    if (output !== 'text' && output !== 'json') throw new PreflightError('USAGE', `${OUTPUT_FLAG} is ${quoteBounded(output)}`, { fix: `use ${OUTPUT_FLAG} text or ${OUTPUT_FLAG} json` });
    if (parsed.command !== 'explain') throw new PreflightError('USAGE', `${OUTPUT_FLAG} belongs to explain`, { fix: 'vram-preflight explain --output json < rendered.yaml' });
    parsed.output = output;
  }
  if (parsed.command === 'resolve' && parsed.images.length === 0) throw new PreflightError('USAGE', 'resolve needs at least one image', { fix: 'vram-preflight resolve lmcache/vllm-openai:nightly-2026-08-18-cu129' });
  return parsed;
}

/** A word where none is taken: a misspelt command gets its name, anything else what the CLI reads instead. */
function refuseWord(word: string, first: boolean): never {
  const close = first ? closest(word, COMMANDS) : [];
  throw new PreflightError('USAGE', `unexpected argument ${quoteBounded(word)}`, {
    fix: close.length ? `did you mean vram-preflight ${close.join(' or ')}? (see vram-preflight --help)` : 'vram-preflight reads the manifests on stdin; see --help',
  });
}

async function readAll(stdin: AsyncIterable<Uint8Array | string>): Promise<StreamText> {
  const given: (Uint8Array | string)[] = [];
  for await (const part of stdin) given.push(part);
  // Text is taken as it is, in the pieces it came in (src/cli/bin.ts decodes
  // ASCII input itself, piece by piece): no copy back to bytes and out again,
  // no join. Unless a piece has a lone surrogate, which its UTF-8 bytes would
  // turn into U+FFFD.
  if (given.length > 0 && given.every((part) => typeof part === 'string' && (part as string & { isWellFormed(): boolean }).isWellFormed())) {
    return given.length === 1 ? (given[0] as string) : (given as string[]);
  }
  const parts = given.map((part) => (typeof part === 'string' ? Buffer.from(part, 'utf8') : part));
  given.length = 0;
  const only = parts[0];
  const bytes = parts.length === 1 && only ? Buffer.from(only.buffer, only.byteOffset, only.byteLength) : Buffer.concat(parts);
  parts.length = 0;
  // Checked first: a byte that is not UTF-8 would otherwise come back changed.
  if (!isUtf8(bytes)) {
    throw new PreflightError('BAD_ENCODING', 'the input is not UTF-8', { fix: 'Kubernetes manifests are UTF-8; check what produced the stream' });
  }
  // Buffer#toString keeps a BOM as text (so it is written back) and gives V8's
  // compact one-byte string for ASCII input, half the memory of TextDecoder's.
  return bytes.toString('utf8');
}

/**
 * Writes `lines` to stderr and, when asked for, into the diagnostics file
 * (`fileOnly`: more for the file, a stack trace). False when the file could
 * not be written: then an IO error says so on stderr, and the run fails, since
 * under Helm 4 the file may be the only place its messages were meant to reach.
 */
function report(io: CliIO, diagnosticsFile: string | undefined, lines: string[], fileOnly: string[] = []): boolean {
  for (const line of lines) io.stderr.write(`vram-preflight: ${line}\n`);
  if (diagnosticsFile === undefined) return true;
  try {
    io.writeFile(diagnosticsFile, [...lines, ...fileOnly].map((l) => `${l}\n`).join(''));
    return true;
  } catch (error) {
    const failure = new PreflightError('IO', `cannot write the diagnostics file ${diagnosticsFile}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`, {
      fix: 'give --diagnostics-file (or VRAM_PREFLIGHT_DIAGNOSTICS_FILE) a path in a directory this process may write, or leave it out',
    });
    io.stderr.write(`vram-preflight: ${failure.format()}\n`);
    return false;
  }
}

function diagnosticsFileIn(argv: readonly string[]): string | undefined {
  let found: string | undefined;
  argv.forEach((arg, i) => {
    if (arg.startsWith('--diagnostics-file=')) found = arg.slice('--diagnostics-file='.length);
    else if (arg === '--diagnostics-file' && i + 1 < argv.length) found = argv[i + 1];
  });
  return found || undefined;
}

/** The JSON report, when asked for, on every run (ok or not): CI gates on it. */
function writeReportFile(io: CliIO, options: Options, result: TransformResult): void {
  if (options.reportFile === undefined) return;
  try {
    io.writeFile(options.reportFile, renderReport(result, options));
  } catch (error) {
    throw new PreflightError('IO', `cannot write the report file ${options.reportFile}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`, {
      fix: 'check --report-file: its directory must exist and be writable',
    });
  }
}

/** `vram-preflight resolve IMAGE...`: config entries that pin what the registries say, for air-gapped CI. */
async function resolveImages(images: readonly string[], options: Options, io: CliIO, diagnosticsFile: string | undefined): Promise<number> {
  if (!io.lookupImageStarts) throw new PreflightError('IO', 'registry lookups are not available in this build', {
    fix: 'run resolve with the vram-preflight of the npm package or the Helm plugin, which can look images up',
  });
  // The operator typed these images: their registries may be asked, wherever they are (docs/registry-lookup.md).
  const answers = await io.lookupImageStarts(images, registryOptions(withTypedImages(options, images), io.env, COMMAND_BUDGET));
  const failures = [...answers.values()].filter((a): a is LookupFailure => 'error' in a);
  const found = [...answers.values()].filter((a): a is ImageStartAnswer => !('error' in a));
  const warnings = [...new Set(found.flatMap((a) => (a.warning ? [`warning: ${escapeControl(`${a.image}: ${a.warning}`)}`] : [])))];
  if (failures.length) {
    report(io, diagnosticsFile, [...failures.map((f) => new PreflightError('IO', `image "${f.image}": ${f.error}`, { fix: resolveFix(f) }).format()), ...warnings]);
    return 1;
  }
  if (!report(io, diagnosticsFile, warnings)) return 1;
  const { renderImageEntries } = await import('../registry/index.js');
  io.stdout.write(renderImageEntries(found));
  return 0;
}

/** What to do about a failed `resolve`, by what failed (docs/registry-lookup.md). */
function resolveFix(failure: LookupFailure): string {
  const image = failure.image.trim();
  switch (failure.kind) {
    case 'unreachable':
      return `the registry cannot be reached from here: check the way to it (HTTPS_PROXY/NO_PROXY, --registry-ca-file for a private CA, --registry-insecure for plain HTTP; docs/registry-lookup.md), or run resolve where it can be reached, or read the start where the image can be pulled (skopeo inspect --config docker://${image}) and write the entry by hand`;
    case 'denied':
      return 'give credentials for this registry: `docker login <registry>` writes them into ~/.docker/config.json, which resolve reads ($DOCKER_CONFIG/config.json when DOCKER_CONFIG is set; docs/registry-lookup.md, "Authentication")';
    case 'not-found':
      return `check the repository and tag: the registry has no ${image} (skopeo list-tags docker://${image.replace(/[:@][^/]*$/, '')} lists the tags)`;
    default:
      return 'check the image reference and --registry-platform (docs/registry-lookup.md)';
  }
}

/**
 * The transform, and once more with registry answers when it found images
 * only their registry can place (the lookup is I/O, so it stays out here).
 * The render parses only documents whose mentions of vLLM could decide a
 * container; explain reads every document that mentions it, to list all its
 * containers (docs/report.md). Both write the same manifests, warnings and errors.
 */
function transformWithLookups(input: StreamText, options: Options, io: CliIO, candidates: CandidateRule): Promise<TransformResult> {
  const lookup = io.lookupImageStarts && ((images: readonly string[]) => io.lookupImageStarts!(images, registryOptions(options, io.env, COMMAND_BUDGET)));
  return withLookups((registry) => transform(input, options, { registry, candidates }), options.registryLookup, lookup);
}

/** Helm 4 runs the plugin with this in the environment (Helm 3 runs a post-renderer as a bare executable). */
const HELM4_PLUGIN_NAME = 'vram-preflight';

/** Exit code of an internal error (EX_SOFTWARE of sysexits.h): a bug of ours, not a problem of the input. */
export const EXIT_INTERNAL = 70;

/** The last plain scalar of a refused render under Helm 4 (see main). */
export const HELM4_REFUSED = 'vram-preflight-refused-the-render';

/**
 * The CLI. Under Helm 4 a failing post-renderer's stderr is thrown away and
 * the user reads only 'plugin "vram-preflight" exited with error'. So there,
 * and only there, a failed run also writes its messages to stdout as
 * comments above a plain scalar, and exits 0: Helm 4 cannot read a scalar as
 * a manifest, fails the render, and prints the document it got: the
 * messages, the first of which says that vram-preflight refused the render,
 * so that nobody reads it as a broken chart. No manifest can come out of
 * such a run; everywhere else stdout stays empty on error.
 */
export async function main(argv: readonly string[], io: CliIO): Promise<number> {
  const underHelm4 = io.env.HELM_PLUGIN_NAME === HELM4_PLUGIN_NAME && !['explain', 'resolve', '-h', '--help', '-v', '--version'].includes(argv[0] ?? '');
  if (!underHelm4) return guardedRun(argv, io);
  const said: string[] = [];
  const code = await guardedRun(argv, { ...io, stderr: { write: (text: string) => (said.push(text), io.stderr.write(text)) } });
  if (code === 0) return 0;
  const lines = said.join('').split('\n').filter((line) => line !== '');
  const why = lines.find((line) => line.startsWith('vram-preflight: error '))?.slice('vram-preflight: '.length) ?? `exit code ${code}`;
  const headline = [
    `vram-preflight refused the render, so nothing was rendered or installed: ${why}`,
    '(Helm says it cannot parse the post-rendered output only because that is how a Helm 4 plugin can show this message; the chart is not broken)',
  ];
  io.stdout.write(`${[...headline, ...lines].map((line) => `# ${line}`).join('\n')}\n${HELM4_REFUSED}\n`);
  return 0;
}

/**
 * `run`, with any error that is not a PreflightError (a bug, whatever its
 * cause) reported through the same channel as the others: stderr, the
 * diagnostics file, Helm 4's stdout. Exit code 70. The stack trace goes into
 * the diagnostics file only: on stderr it would bury the one line that says
 * what happened.
 */
async function guardedRun(argv: readonly string[], io: CliIO): Promise<number> {
  const state: RunState = {};
  try {
    return await run(argv, io, state);
  } catch (error) {
    const what = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
    const internal = new PreflightError('INTERNAL', `internal error (a bug in vram-preflight ${VERSION}, not in the input): ${what}`, {
      fix: 'please report it with the input that caused it (docs/errors.md, "INTERNAL"); the diagnostics file (--diagnostics-file) also receives the stack trace',
    });
    const stack = error instanceof Error && error.stack ? error.stack.split('\n').map((line) => `  ${line}`) : [];
    report(io, state.diagnosticsFile, [internal.format()], stack);
    return EXIT_INTERNAL;
  }
}

/** What a run has learnt that its error handling needs. */
interface RunState {
  diagnosticsFile?: string;
}

async function run(argv: readonly string[], io: CliIO, state: RunState): Promise<number> {
  let args: ParsedArgs;
  let options: Options;
  // An option error must reach the diagnostics file too, so find it before options parse.
  let diagnosticsFile = diagnosticsFileIn(argv) ?? (io.env.VRAM_PREFLIGHT_DIAGNOSTICS_FILE || undefined);
  state.diagnosticsFile = diagnosticsFile;
  try {
    args = parseArgs(argv);
    if (args.command === 'help') {
      io.stdout.write(HELP);
      return 0;
    }
    if (args.command === 'version') {
      io.stdout.write(`${VERSION}\n`);
      return 0;
    }
    options = resolveOptions(args, io);
    diagnosticsFile = options.diagnosticsFile;
    state.diagnosticsFile = diagnosticsFile;
  } catch (error) {
    if (!(error instanceof PreflightError)) throw error;
    report(io, diagnosticsFile, [error.format()]);
    return 2;
  }
  try {
    if (args.command === 'resolve') return await resolveImages(args.images, options, io, diagnosticsFile);
    const input = await readAll(io.stdin);
    const result = await transformWithLookups(input, options, io, args.command === 'explain' ? 'any-mention' : 'deciding-mention');
    writeReportFile(io, options, result);
    const warnings = [...new Set(result.warnings)].map((w) => `warning: ${escapeControl(w)}`);
    if (args.command === 'explain') {
      if (result.errors.some((e) => e.code === 'YAML_SYNTAX' || e.code === 'BAD_ENCODING')) {
        report(io, diagnosticsFile, result.errors.map((e) => e.format()));
        return 1;
      }
      const explanation = args.output === 'json' ? renderReport(result, options) : renderExplanation(result, options);
      // An explanation that ends in an error is a failed run: nothing on stdout, as for the transform.
      if (result.errors.length) {
        io.stderr.write(explanation);
        return 1;
      }
      io.stdout.write(explanation);
      return 0;
    }
    if (result.errors.length) {
      const count = result.errors.length > 1 ? [`${result.errors.length} errors; nothing was written to stdout`] : [];
      report(io, diagnosticsFile, [...result.errors.map((e) => e.format()), ...count, ...warnings]);
      return 1;
    }
    if (!report(io, diagnosticsFile, warnings)) return 1;
    for (const piece of result.pieces) io.stdout.write(piece);
    return 0;
  } catch (error) {
    if (!(error instanceof PreflightError)) throw error;
    report(io, diagnosticsFile, [error.format()]);
    return 1;
  }
}
