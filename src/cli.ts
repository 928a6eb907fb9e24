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
import {
  CONFIG_ENV,
  CONFIG_FLAG,
  mergeOptions,
  optionsFromEnv,
  optionsFromFile,
  optionsFromFlags,
  SCALAR_OPTIONS,
  type Options,
} from './config.js';
import { PreflightError } from './errors.js';
import { renderExplanation } from './explain.js';
import type { RegistryAnswers } from './start.js';
import { transform, type TransformResult } from './transform.js';
import { VERSION } from './version.js';

export interface CliIO {
  stdin: AsyncIterable<Uint8Array | string>;
  stdout: { write(text: string): unknown };
  stderr: { write(text: string): unknown };
  env: Readonly<Record<string, string | undefined>>;
  readFile(path: string): string;
  writeFile(path: string, text: string): void;
  /** Reads image starts from registries (src/registry); absent: no lookups. */
  lookupImageStarts?(images: readonly string[], options: Options): Promise<RegistryAnswers>;
}

const HELP = `vram-preflight ${VERSION}: make vLLM containers wait for GPU memory before they start

Usage:
  vram-preflight [options] < rendered.yaml > wrapped.yaml
  vram-preflight explain [options] < rendered.yaml
  helm install NAME CHART --post-renderer vram-preflight [--post-renderer-args --timeout-seconds=600]

Rewrites every container that starts vLLM on an NVIDIA GPU so that it waits
until each GPU has the memory vLLM will ask for, then starts vLLM unchanged.
Every other document passes through byte for byte.

Options (flag, or environment variable; a config file sets the same names in camelCase):
${[
  { flag: CONFIG_FLAG, env: CONFIG_ENV, help: 'YAML or JSON config file (schema: config.schema.json)' },
  ...SCALAR_OPTIONS,
]
  .map((o) => `  ${`${o.flag} VALUE`.padEnd(36)}${o.help}\n  ${''.padEnd(36)}env ${o.env}`)
  .join('\n')}
  -h, --help                          show this help
  -v, --version                       print the version

Annotations on a workload or its pod template:
  vram-preflight.io/skip: "true"                      leave this workload alone
  vram-preflight.io/containers: "name[,name]"         also wrap these containers (custom images)
  vram-preflight.io/gpu-memory-utilization: "0.85"    the utilization, when the args cannot say it

Exit codes: 0 ok, 1 input cannot be rewritten safely, 2 usage or option error.
Docs: docs/ in the package (detection, configuration, errors, operations).
`;

interface ParsedArgs {
  command: 'transform' | 'explain' | 'help' | 'version';
  flags: { flag: string; value: string }[];
  configPath?: string;
}

function parseArgs(argv: readonly string[]): ParsedArgs {
  const parsed: ParsedArgs = { command: 'transform', flags: [] };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === '-h' || arg === '--help') return { ...parsed, command: 'help' };
    if (arg === '-v' || arg === '--version') return { ...parsed, command: 'version' };
    if (arg === 'explain' && i === 0) {
      parsed.command = 'explain';
      continue;
    }
    if (!arg.startsWith('--')) {
      throw new PreflightError('USAGE', `unexpected argument "${arg}"`, { fix: 'vram-preflight reads the manifests on stdin; see --help' });
    }
    const eq = arg.indexOf('=');
    const flag = eq === -1 ? arg : arg.slice(0, eq);
    let value: string;
    if (eq !== -1) value = arg.slice(eq + 1);
    else if (i + 1 < argv.length) value = argv[++i]!;
    else throw new PreflightError('USAGE', `option ${flag} needs a value`, { fix: 'see vram-preflight --help' });
    if (flag === CONFIG_FLAG) parsed.configPath = value;
    else if (!SCALAR_OPTIONS.some((o) => o.flag === flag)) {
      throw new PreflightError('USAGE', `unknown option ${flag}`, { fix: `valid options: ${[CONFIG_FLAG, ...SCALAR_OPTIONS.map((o) => o.flag)].join(', ')}` });
    } else parsed.flags.push({ flag, value });
  }
  return parsed;
}

function resolveOptions(args: ParsedArgs, io: CliIO): Options {
  const configPath = args.configPath ?? io.env[CONFIG_ENV];
  let fromFile = {};
  if (configPath !== undefined && configPath !== '') {
    let text: string;
    try {
      text = io.readFile(configPath);
    } catch (error) {
      throw new PreflightError('BAD_CONFIG', `cannot read config file ${configPath}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`);
    }
    fromFile = optionsFromFile(text, configPath);
  }
  return mergeOptions(fromFile, optionsFromEnv(io.env), optionsFromFlags(args.flags));
}

async function readAll(stdin: AsyncIterable<Uint8Array | string>): Promise<string> {
  const parts: Uint8Array[] = [];
  for await (const part of stdin) parts.push(typeof part === 'string' ? Buffer.from(part, 'utf8') : part);
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

function report(io: CliIO, diagnosticsFile: string | undefined, lines: string[]): void {
  for (const line of lines) io.stderr.write(`vram-preflight: ${line}\n`);
  if (diagnosticsFile === undefined) return;
  try {
    io.writeFile(diagnosticsFile, lines.map((l) => `${l}\n`).join(''));
  } catch (error) {
    io.stderr.write(`vram-preflight: warning: cannot write diagnostics file ${diagnosticsFile}: ${(error as Error).message}\n`);
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

/**
 * The transform, and once more with registry answers when it found images
 * only their registry can place (the lookup is I/O, so it stays out here).
 */
async function transformWithLookups(input: string, options: Options, io: CliIO): Promise<TransformResult> {
  const first = transform(input, options);
  if (first.wantedImages.length === 0 || options.registryLookup === 'never' || !io.lookupImageStarts) return first;
  const answers = await io.lookupImageStarts(first.wantedImages, options);
  return transform(input, options, { registry: answers });
}

export async function main(argv: readonly string[], io: CliIO): Promise<number> {
  let args: ParsedArgs;
  let options: Options;
  // An option error must reach the diagnostics file too, so find it before options parse.
  let diagnosticsFile = diagnosticsFileIn(argv) ?? (io.env.VRAM_PREFLIGHT_DIAGNOSTICS_FILE || undefined);
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
  } catch (error) {
    if (!(error instanceof PreflightError)) throw error;
    report(io, diagnosticsFile, [error.format()]);
    return 2;
  }
  try {
    const input = await readAll(io.stdin);
    const result = await transformWithLookups(input, options, io);
    if (args.command === 'explain') {
      if (result.errors.some((e) => e.code === 'YAML_SYNTAX' || e.code === 'BAD_ENCODING')) {
        report(io, diagnosticsFile, result.errors.map((e) => e.format()));
        return 1;
      }
      const explanation = renderExplanation(result, options);
      // An explanation that ends in an error is a failed run: nothing on stdout, as for the transform.
      if (result.errors.length) {
        io.stderr.write(explanation);
        return 1;
      }
      io.stdout.write(explanation);
      return 0;
    }
    const warnings = result.warnings.map((w) => `warning: ${w}`);
    if (result.errors.length) {
      const count = result.errors.length > 1 ? [`${result.errors.length} errors; nothing was written to stdout`] : [];
      report(io, diagnosticsFile, [...result.errors.map((e) => e.format()), ...count, ...warnings]);
      return 1;
    }
    report(io, diagnosticsFile, warnings);
    for (const piece of result.pieces) io.stdout.write(piece);
    return 0;
  } catch (error) {
    if (!(error instanceof PreflightError)) throw error;
    report(io, diagnosticsFile, [error.format()]);
    return 1;
  }
}
