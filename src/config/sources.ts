/**
 * Configuration: defaults, then a config file, then environment variables,
 * then flags (the later wins). Every source is checked against the same JSON
 * Schema (config.schema.json, shipped in the package), so a bad value reads
 * the same whichever way it came in. Reading files and the environment stays
 * in the CLI; this module only turns text into options.
 */
import { isCollection, parseDocument, visit } from 'yaml';
import { DEFAULT_OPTIONS, type ImageStart, KNOWN_IMAGES, type Options, PreflightError } from '../core/index.js';
export { DEFAULT_OPTIONS, type ImageStart, type Options, type RegistryLookupMode } from '../core/index.js';
import { validateConfig, type SchemaError } from './validate.js';
import { closest, quoteBounded } from './suggest.js';


type Key = keyof Options;
type ValueKind = 'number' | 'text' | 'list';

/** Options settable by flag and environment variable (`images` needs a file). */
export const SCALAR_OPTIONS: readonly { key: Key; flag: string; env: string; kind: ValueKind; help: string }[] = [
  { key: 'timeoutSeconds', flag: '--timeout-seconds', env: 'VRAM_PREFLIGHT_TIMEOUT_SECONDS', kind: 'number', help: 'give up waiting for GPU memory after N seconds (default 300)' },
  { key: 'pollIntervalSeconds', flag: '--poll-interval-seconds', env: 'VRAM_PREFLIGHT_POLL_INTERVAL_SECONDS', kind: 'number', help: 'seconds between nvidia-smi queries while waiting (default 1)' },
  { key: 'logIntervalSeconds', flag: '--log-interval-seconds', env: 'VRAM_PREFLIGHT_LOG_INTERVAL_SECONDS', kind: 'number', help: 'seconds between progress lines while waiting (default 10)' },
  { key: 'headroomMiB', flag: '--headroom-mib', env: 'VRAM_PREFLIGHT_HEADROOM_MIB', kind: 'number', help: 'extra MiB each GPU must have free (default 0)' },
  { key: 'contextMiB', flag: '--context-mib', env: 'VRAM_PREFLIGHT_CONTEXT_MIB', kind: 'number', help: "MiB vLLM takes of each GPU before its own check: auto (768 on one GPU, 1536 on several) or a number (default auto)" },
  { key: 'defaultUtilization', flag: '--default-utilization', env: 'VRAM_PREFLIGHT_DEFAULT_UTILIZATION', kind: 'number', help: 'utilization assumed when --gpu-memory-utilization is absent (default 0.9)' },
  { key: 'onNvidiaSmiUnavailable', flag: '--on-nvidia-smi-unavailable', env: 'VRAM_PREFLIGHT_ON_NVIDIA_SMI_UNAVAILABLE', kind: 'text', help: 'warn|fail: when nvidia-smi is missing or unreadable (default warn)' },
  { key: 'containerNames', flag: '--container-name', env: 'VRAM_PREFLIGHT_CONTAINER_NAMES', kind: 'list', help: 'only consider containers matching this name pattern (repeatable; env: comma list)' },
  { key: 'nvidiaSmiTimeoutSeconds', flag: '--nvidia-smi-timeout-seconds', env: 'VRAM_PREFLIGHT_NVIDIA_SMI_TIMEOUT_SECONDS', kind: 'number', help: 'seconds one nvidia-smi query may take before it counts as hung (default 10)' },
  { key: 'diagnosticsFile', flag: '--diagnostics-file', env: 'VRAM_PREFLIGHT_DIAGNOSTICS_FILE', kind: 'text', help: 'also write warnings and errors to FILE (Helm 4 hides stderr)' },
  { key: 'reportFile', flag: '--report-file', env: 'VRAM_PREFLIGHT_REPORT_FILE', kind: 'text', help: 'also write the JSON report of every run to FILE (schema: report.schema.json)' },
  { key: 'registryLookup', flag: '--registry-lookup', env: 'VRAM_PREFLIGHT_REGISTRY_LOOKUP', kind: 'text', help: 'missing|never|always: read image starts from registries (default missing: only what nothing else places)' },
  { key: 'registryPlatform', flag: '--registry-platform', env: 'VRAM_PREFLIGHT_REGISTRY_PLATFORM', kind: 'text', help: 'platform of multi-arch images, os/arch[/variant] (default linux/amd64)' },
  { key: 'registryTimeoutSeconds', flag: '--registry-timeout-seconds', env: 'VRAM_PREFLIGHT_REGISTRY_TIMEOUT_SECONDS', kind: 'number', help: 'per-request registry timeout (default 5)' },
  { key: 'registryInsecure', flag: '--registry-insecure', env: 'VRAM_PREFLIGHT_REGISTRY_INSECURE', kind: 'list', help: 'registry host[:port] reached over plain HTTP or unverified TLS (repeatable; env: comma list)' },
  { key: 'registryAllow', flag: '--registry-allow', env: 'VRAM_PREFLIGHT_REGISTRY_ALLOW', kind: 'list', help: 'registry host, host:port or *.domain that lookups may reach, besides the image table\'s and those the config names (repeatable; env: comma list)' },
  { key: 'registryCaFile', flag: '--registry-ca-file', env: 'VRAM_PREFLIGHT_REGISTRY_CA_FILE', kind: 'text', help: 'extra CA certificates (PEM) trusted for registries' },
  { key: 'fastParse', flag: '--fast-parse', env: 'VRAM_PREFLIGHT_FAST_PARSE', kind: 'text', help: 'on|off: read plain rendered YAML with the fast parser, falling back to the yaml library (default on)' },
  { key: 'cacheDir', flag: '--cache-dir', env: 'VRAM_PREFLIGHT_CACHE_DIR', kind: 'text', help: 'registry answer cache (default $XDG_CACHE_HOME/vram-preflight; the webhook: $TMPDIR/vram-preflight-cache)' },
];

export const CONFIG_FLAG = '--config';
export const CONFIG_ENV = 'VRAM_PREFLIGHT_CONFIG';
const ENV_PREFIX = 'VRAM_PREFLIGHT_';

export type PartialOptions = Partial<Record<Key, unknown>>;

function convert(kind: ValueKind, text: string): unknown {
  if (kind === 'number') {
    const trimmed = text.trim();
    // Number('') is 0 and Number('0x10') is 16: accept plain decimals only.
    return /^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/.test(trimmed) ? Number(trimmed) : text;
  }
  // Every item is kept, an empty one too: the schema refuses it, as it refuses `containerNames: [""]` in a config file
  // (`--container-name="$NAME"` with NAME unset would otherwise select every container in silence).
  if (kind === 'list') return text.split(',').map((s) => s.trim());
  return text;
}

/** Options from `VRAM_PREFLIGHT_*` variables; an unknown one is an error, as a typo would otherwise be ignored. */
export function optionsFromEnv(env: Readonly<Record<string, string | undefined>>): PartialOptions {
  const result: PartialOptions = {};
  // Names first, values only of ours: reading process.env's values is a call into Node for each.
  for (const name of Object.keys(env)) {
    if (!name.startsWith(ENV_PREFIX) || name === CONFIG_ENV) continue;
    const value = env[name];
    if (value === undefined) continue;
    const option = SCALAR_OPTIONS.find((o) => o.env === name);
    if (!option) {
      const close = closest(name, [CONFIG_ENV, ...SCALAR_OPTIONS.map((o) => o.env)], (n) => n.slice(ENV_PREFIX.length));
      throw new PreflightError('BAD_OPTION', `unknown environment variable ${name}`, {
        fix: close.length ? `did you mean ${close.join(' or ')}? (every variable: docs/configuration.md)` : 'unset it; the variables vram-preflight reads are listed by vram-preflight --help and in docs/configuration.md',
      });
    }
    result[option.key] = convert(option.kind, value);
  }
  checkOptions(result, 'environment');
  return result;
}

/** Options from flags already split off by the CLI (`--name value` / `--name=value`). */
export function optionsFromFlags(flags: readonly { flag: string; value: string }[]): PartialOptions {
  const result: PartialOptions = {};
  for (const { flag, value } of flags) {
    const option = SCALAR_OPTIONS.find((o) => o.flag === flag);
    if (!option) throw new PreflightError('USAGE', `unknown option ${flag}`, { fix: 'see vram-preflight --help for the valid options' });
    const converted = convert(option.kind, value);
    if (option.kind === 'list') {
      result[option.key] = [...((result[option.key] as string[] | undefined) ?? []), ...(converted as string[])];
    } else {
      result[option.key] = converted;
    }
  }
  checkOptions(result, 'flags');
  return result;
}

/** A config file's text (YAML or JSON; JSON is YAML). */
export function optionsFromFile(text: string, path: string): PartialOptions {
  // logLevel error: the yaml library's own warnings (a collection key) would go to Node's process warnings on stderr.
  const doc = parseDocument(text, { prettyErrors: true, logLevel: 'error' });
  const syntax = doc.errors[0];
  if (syntax) {
    throw new PreflightError('BAD_CONFIG', `config file ${path} is not valid YAML: ${syntax.message.split('\n')[0]}`, {
      fix: 'correct the YAML of the config file; docs/configuration.md shows its form',
    });
  }
  const collectionKey = firstCollectionKey(doc, text);
  if (collectionKey !== undefined) {
    throw new PreflightError('BAD_CONFIG', `config file ${path} is not valid YAML for options: ${collectionKey} is read as a mapping whose key is a list or a mapping`, {
      fix: 'quote it: a registry written [fd00::1]:5000 inside a list is such a mapping to YAML; write "[fd00::1]:5000"',
    });
  }
  let value: unknown;
  try {
    value = doc.toJS();
  } catch (error) {
    throw new PreflightError('BAD_CONFIG', `config file ${path} is not valid YAML: ${(error as Error).message.split('\n')[0]}`, {
      fix: 'correct the YAML of the config file; docs/configuration.md shows its form',
    });
  }
  if (value === null || value === undefined) return {};
  if (typeof value !== 'object' || Array.isArray(value)) {
    throw new PreflightError('BAD_CONFIG', `config file ${path} must hold a mapping of options`, { fix: 'see docs/configuration.md' });
  }
  const { $schema: _ignored, ...options } = value as Record<string, unknown>;
  checkOptions(options, `config file ${path}`);
  checkLikes(options.images as ImageStart[] | undefined, path);
  return options as PartialOptions;
}

/** The first mapping pair whose key is a list or a mapping (no option takes one), as written, cut short; undefined: none. */
function firstCollectionKey(doc: ReturnType<typeof parseDocument>, text: string): string | undefined {
  let found: string | undefined;
  visit(doc, {
    Pair(_, pair) {
      if (!isCollection(pair.key)) return undefined;
      const start = pair.key.range?.[0] ?? 0;
      const end = (pair.value as { range?: number[] } | null)?.range?.[1] ?? pair.key.range?.[1] ?? start;
      found = quoteBounded(text.slice(start, end).trim());
      return visit.BREAK;
    },
  });
  return found;
}

/** `like:` must name a row of the built-in table, or it would silently place nothing. */
function checkLikes(images: readonly ImageStart[] | undefined, path: string): void {
  const known = [...new Set(KNOWN_IMAGES.map((row) => row.repository))];
  for (const [i, entry] of (images ?? []).entries()) {
    if (entry.like !== undefined && !known.includes(entry.like)) {
      throw new PreflightError('BAD_CONFIG', `invalid config file ${path}: images.${i}.like is "${entry.like}", which is not a repository of the built-in table`, { fix: `use one of: ${known.join(', ')}` });
    }
  }
}

export function mergeOptions(...layers: PartialOptions[]): Options {
  const merged: Record<string, unknown> = { ...DEFAULT_OPTIONS };
  const given: Record<string, unknown> = {};
  for (const layer of layers) {
    for (const [key, value] of Object.entries(layer)) {
      if (value !== undefined) {
        merged[key] = value;
        given[key] = value;
      }
    }
  }
  // The defaults alone are valid (a unit test checks it), and the schema checks each key on
  // its own: only the given keys are checked, so a default's check (the platform's pattern,
  // a regex compiled on its first run) costs a render nothing. No option, no check.
  // (A `__proto__` key sets the objects' prototypes, not a key: then the merged object is checked, as before.)
  checkOptions(Object.getPrototypeOf(given) === Object.prototype ? given : merged, 'options');
  return merged as unknown as Options;
}

function checkOptions(options: Record<string, unknown>, origin: string): void {
  // An empty layer (no flag, no variable) has nothing to check: skip the validator's cold code.
  if (Object.keys(options).length === 0) return;
  const errors = validateConfig(options);
  if (errors.length === 0) return;
  const code = origin.startsWith('config file') ? 'BAD_CONFIG' : 'BAD_OPTION';
  const suggestions = errors.flatMap((e) => (e.suggestion ? [e.suggestion] : []));
  const emptyItem = origin !== 'options' && !origin.startsWith('config file') && errors.some((e) => /\/\d+$/.test(e.path) && valueAt(options, e.path) === '');
  if (emptyItem) suggestions.push('an item of a list is empty (a comma with nothing before or after it, or a flag such as --container-name="$NAME" whose variable is not set): give each item, or leave the option out');
  throw new PreflightError(code, `invalid ${origin}: ${errors.map((e) => describeSchemaError(e, options)).join('; ')}`, {
    fix: suggestions.length ? `${suggestions.join('; ')} (docs/configuration.md)` : 'see vram-preflight --help and docs/configuration.md',
  });
}

/** `key (flag / env) is "abc", must be integer`: where, the value given (cut short), what it must be. */
function describeSchemaError(error: SchemaError, options: Record<string, unknown>): string {
  const key = error.path === '' ? '' : error.path.replace(/^\//, '').replace(/\//g, '.');
  if (key === '') return error.message.replace(/^has an /, 'an ');
  const value = valueAt(options, error.path);
  const given = error.quoteValue && value !== undefined ? ` is ${quoteBounded(value)},` : '';
  return `${key} (${flagFor(key)})${given} ${error.message}`;
}

/** The value at a JSON pointer of the validated object (the schema's paths have no escapes: plain keys and indexes). */
function valueAt(root: unknown, pointer: string): unknown {
  let at = root;
  for (const part of pointer.split('/').slice(1)) {
    if (at === null || typeof at !== 'object') return undefined;
    at = (at as Record<string, unknown>)[part];
  }
  return at;
}

function flagFor(key: string): string {
  const top = key.split('.')[0];
  const option = SCALAR_OPTIONS.find((o) => o.key === top);
  return option ? `${option.flag} / ${option.env}` : 'config file only';
}
