/**
 * The preflight's own log lines, as one table of formats that both sides
 * use: the generator (./script.ts) writes the awk and shell text that
 * prints them from it, and the reader (readPreflightLine, for `vram-preflight
 * verify`) matches them with patterns built from it. A line reworded here is
 * reworded in both, so the two cannot drift apart.
 *
 * A format is text with `{field}`s. A field is a value the script computes
 * (an awk expression, a shell expansion), or another format of the table
 * spelt in place (`{tightest}`), so a line's parts are written once.
 * docs/restart-race.md ("Log lines") shows each line as an operator sees it.
 */

/** What every line of the preflight starts with (its say() and die(), on stderr and in the termination message). */
export const LOG_PREFIX = 'vram-preflight: ';

export const LINE_FORMATS = {
  /** The tightest GPU of one reading, in the start, waiting and give-up lines. */
  tightest: 'GPU {gpu} has {free} MiB free, needs {need} MiB ({how})',
  /** After the tightest GPU when more than one is short. */
  moreShort: '; {count} more GPU(s) short',
  /** The start: every GPU checked has what vLLM's check will ask. */
  checked: '{gpus} GPU(s) checked, tightest: {tightest}; starting',
  /** Before `checked` when the first reading was short: the wait ended well. */
  arrived: 'GPU memory arrived after {waited} s of waiting; ',
  /** A short reading; repeated at most every log interval, each with what holds the memory then (`holding`: the shell adds it to awk's line). */
  waiting: 'waiting for GPU memory before starting vLLM: {tightest}{moreShort}; waited {waited} s (timeout {timeout} s){holding}',
  /** After a waiting line: what nvidia-smi lists holding memory (absent from lines of a preflight before 0.5.0). */
  holding: '; holding GPU memory: {holders}',
  /** The wait ran into its timeout (exit 75); `why` is the tightest GPU, or lateWhy. */
  gaveUp: 'gave up after {waited} s (timeout {timeout} s) waiting for GPU memory before starting vLLM: {why}',
  /** gaveUp's reason when the last query ran into the timeout. */
  lateWhy: 'nvidia-smi did not answer within the {left} s that were left',
  /** The message of a timeout with a reading: gaveUp, then what nvidia-smi says holds memory. */
  stillHolding: "{gaveUp}. Still holding GPU memory: {holders}. This is the preflight's wait, not vLLM's check: find what keeps the memory (often an orphaned vLLM EngineCore or worker, or a sidecar) or raise the preflight timeout.",
  /** One process of --query-compute-apps in `holders` (joined with ", "), in the waiting lines and the give-up message. */
  holder: 'pid {pid} ({mib} MiB)',
  /** `holders` when nvidia-smi lists none. */
  noHolder: 'none that nvidia-smi can see from this container (look on the node)',
  /** SIGTERM or SIGINT during the wait (exit 143, 130). */
  signal: '{signal} while waiting for GPU memory, exiting',
  /** nvidia-smi cannot be used, mode warn: vLLM starts without the wait. */
  unchecked: 'WARNING: cannot check GPU memory, starting vLLM WITHOUT waiting: {why}',
  /** A MIG GPU: vLLM starts without the wait. */
  mig: 'NOTE: {why}',
} as const;

export type LineFormat = keyof typeof LINE_FORMATS;

/** A field's value in the script: an expression (awk) or expansion (shell), or another format with its own values. */
export type FieldValue = string | { format: LineFormat; values: Readonly<Record<string, FieldValue>> };

type Piece = { text: string } | { expr: string };

/** The format as literal text and expressions, nested formats spelt out, adjacent literals joined. */
function pieces(format: LineFormat, values: Readonly<Record<string, FieldValue>>): Piece[] {
  const out: Piece[] = [];
  const add = (piece: Piece): void => {
    const last = out[out.length - 1];
    if ('text' in piece && last && 'text' in last) out[out.length - 1] = { text: last.text + piece.text };
    else if (!('text' in piece) || piece.text !== '') out.push(piece);
  };
  for (const part of parts(format)) {
    if ('text' in part) {
      add(part);
      continue;
    }
    const value = values[part.field];
    if (value === undefined) throw new Error(`internal error: format ${format} needs a value for {${part.field}}`);
    // '': left out here (another part of the script adds it after this text).
    if (typeof value === 'string') {
      if (value !== '') add({ expr: value });
    }
    else for (const piece of pieces(value.format, value.values)) add(piece);
  }
  return out;
}

/**
 * A format as its literal texts and fields, in order. A scan, not a regex:
 * the script is generated in every render, where a regex costs its
 * compilation (docs/benchmarks.md).
 */
function parts(format: LineFormat): ({ text: string } | { field: string })[] {
  const text: string = LINE_FORMATS[format];
  const out: ({ text: string } | { field: string })[] = [];
  let at = 0;
  for (let open = text.indexOf('{'); open !== -1; open = text.indexOf('{', at)) {
    const close = text.indexOf('}', open);
    out.push({ text: text.slice(at, open) }, { field: text.slice(open + 1, close) });
    at = close + 1;
  }
  out.push({ text: text.slice(at) });
  return out;
}

/**
 * The awk expression that prints `format`: string literals and the values'
 * expressions, concatenated. `lead` is literal text before it (the verdict
 * word the poll reads), joined to its first literal.
 */
export function awkLine(format: LineFormat, values: Readonly<Record<string, FieldValue>> = {}, lead = ''): string {
  const all = lead === '' ? pieces(format, values) : [{ text: lead }, ...pieces(format, values)];
  const joined: Piece[] = [];
  for (const piece of all) {
    const last = joined[joined.length - 1];
    if ('text' in piece && last && 'text' in last) joined[joined.length - 1] = { text: last.text + piece.text };
    else joined.push(piece);
  }
  return joined.map((piece) => ('text' in piece ? `"${escaped(piece.text, '\\"')}"` : piece.expr)).join(' ');
}

/** The text of `format` inside a double-quoted shell word, the values being expansions (`$1`, `${r#ok }`). */
export function shellText(format: LineFormat, values: Readonly<Record<string, FieldValue>> = {}): string {
  return pieces(format, values).map((piece) => ('text' in piece ? escaped(piece.text, '\\"$`') : piece.expr)).join('');
}

/** `text` with a backslash before each of `special` (a scan: see parts()). */
function escaped(text: string, special: string): string {
  let out = '';
  for (const char of text) out += special.includes(char) ? `\\${char}` : char;
  return out;
}

/** What each field of the formats can hold, as the script prints it. */
const FIELD_PATTERNS: Record<string, string> = {
  gpu: '[^ ]+',
  free: '\\d+',
  need: '\\d+',
  how: '[^()]*',
  count: '\\d+',
  gpus: '\\d+',
  waited: '\\d+(?:\\.\\d+)?',
  timeout: '\\d+',
  left: '\\d+',
  pid: '\\d+',
  mib: '\\d+',
  signal: 'SIG[A-Z]+',
  why: '.*',
  holders: '.*',
};

/** Formats that a line may leave out where they stand in another (awk prints "" for them). */
const OPTIONAL: ReadonlySet<string> = new Set(['moreShort', 'holding']);

/** A pattern for `format`, its fields as capture groups named in `names` (`tightest.gpu` for a nested one). */
function patternSource(format: LineFormat, names: string[], prefix = ''): string {
  let source = '';
  for (const part of parts(format)) {
    if ('text' in part) {
      source += part.text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
    } else if (part.field in LINE_FORMATS && FIELD_PATTERNS[part.field] === undefined) {
      const inner = patternSource(part.field as LineFormat, names, `${prefix}${part.field}.`);
      source += OPTIONAL.has(part.field) ? `(?:${inner})?` : inner;
    } else {
      names.push(`${prefix}${part.field}`);
      source += `(${FIELD_PATTERNS[part.field] ?? '.*'})`;
    }
  }
  return source;
}

interface Compiled {
  pattern: RegExp;
  names: string[];
}

function compile(source: (names: string[]) => string): Compiled {
  const names: string[] = [];
  return { pattern: new RegExp(`^${source(names)}$`), names };
}

let compiled: Record<'start' | 'waiting' | 'gaveUp' | 'stillHolding' | 'holder' | 'signal' | 'unchecked' | 'mig' | 'tightestMore', Compiled> | undefined;

/** The patterns, compiled on first use (a render never reads a log line). */
function patterns(): NonNullable<typeof compiled> {
  compiled ??= {
    start: compile((names) => `(?:${patternSource('arrived', names)})?${patternSource('checked', names)}`),
    waiting: compile((names) => patternSource('waiting', names)),
    gaveUp: compile((names) => patternSource('gaveUp', names)),
    stillHolding: compile((names) => patternSource('stillHolding', names)),
    holder: compile((names) => patternSource('holder', names)),
    signal: compile((names) => patternSource('signal', names)),
    unchecked: compile((names) => patternSource('unchecked', names)),
    mig: compile((names) => patternSource('mig', names)),
    tightestMore: compile((names) => `${patternSource('tightest', names, 'tightest.')}(?:${patternSource('moreShort', names, 'moreShort.')})?`),
  };
  return compiled;
}

function match(which: keyof NonNullable<typeof compiled>, text: string): Record<string, string> | undefined {
  const { pattern, names } = patterns()[which];
  const m = pattern.exec(text);
  if (!m) return undefined;
  const fields: Record<string, string> = {};
  names.forEach((name, i) => {
    if (m[i + 1] !== undefined) fields[name] = m[i + 1]!;
  });
  return fields;
}

/** The GPU a line names as the tightest, and what it had and needed, in MiB. */
export interface TightestGpu {
  gpu: string;
  freeMiB: number;
  needMiB: number;
  /** How the need is made up, as the line says it. */
  how: string;
}

export interface MemoryHolder {
  pid: number;
  mib: number;
}

/** One line of the preflight, read. Values, not prose: a reader decides with them. */
export type PreflightLine =
  | { kind: 'start'; waitedSeconds?: number; gpus: number; tightest: TightestGpu }
  | {
      kind: 'waiting';
      tightest: TightestGpu;
      moreShort: number;
      waitedSeconds: number;
      timeoutSeconds: number;
      /** What nvidia-smi listed holding memory then; [] none it could see from the container; absent when the line does not say (a preflight before 0.5.0). */
      holders?: MemoryHolder[];
    }
  | {
      kind: 'gave-up';
      waitedSeconds: number;
      timeoutSeconds: number;
      /** Absent when the last query hung (nothing was read). */
      tightest?: TightestGpu;
      moreShort: number;
      /** What nvidia-smi listed holding memory; [] when it could see none from the container; absent when the line does not say. */
      holders?: MemoryHolder[];
    }
  | { kind: 'signal'; signal: string }
  | { kind: 'unchecked'; why: string }
  | { kind: 'other'; text: string };

/** `holders` as the script wrote it: the processes, or [] for none it could see. */
const holdersOf = (listed: string): MemoryHolder[] =>
  listed === LINE_FORMATS.noHolder ? [] : listed.split(', ').map((h) => match('holder', h)).filter((h): h is Record<string, string> => h !== undefined).map((h) => ({ pid: Number(h.pid), mib: Number(h.mib) }));

const tightestOf = (f: Record<string, string>, prefix: string): TightestGpu | undefined =>
  f[`${prefix}gpu`] === undefined ? undefined : { gpu: f[`${prefix}gpu`]!, freeMiB: Number(f[`${prefix}free`]), needMiB: Number(f[`${prefix}need`]), how: f[`${prefix}how`]! };

/**
 * One line of a container's log, read as the preflight wrote it; undefined
 * when it is not one of the preflight's (no LOG_PREFIX). A line of the
 * preflight that no format matches (a refusal to start, an unusable
 * utilization) is `other`, with its text.
 */
export function readPreflightLine(line: string): PreflightLine | undefined {
  const at = line.indexOf(LOG_PREFIX);
  // A log read with timestamps has one before the line (kubectl logs --timestamps).
  if (at === -1 || (at > 0 && !/^\S+ $/.test(line.slice(0, at)))) return undefined;
  const text = line.slice(at + LOG_PREFIX.length).replace(/\r$/, '');
  let f = match('start', text);
  if (f) return { kind: 'start', ...(f.waited !== undefined && { waitedSeconds: Number(f.waited) }), gpus: Number(f.gpus), tightest: tightestOf(f, 'tightest.')! };
  if ((f = match('waiting', text))) {
    const held = f['holding.holders'];
    return { kind: 'waiting', tightest: tightestOf(f, 'tightest.')!, moreShort: Number(f['moreShort.count'] ?? 0), waitedSeconds: Number(f.waited), timeoutSeconds: Number(f.timeout), ...(held !== undefined && { holders: holdersOf(held) }) };
  }
  const holding = match('stillHolding', text);
  if ((f = holding ? Object.fromEntries(Object.entries(holding).filter(([k]) => k.startsWith('gaveUp.')).map(([k, v]) => [k.slice('gaveUp.'.length), v])) : match('gaveUp', text))) {
    const why = match('tightestMore', f.why ?? '') ?? {};
    const listed = holding?.holders;
    const holders = listed === undefined ? undefined : holdersOf(listed);
    return {
      kind: 'gave-up',
      waitedSeconds: Number(f.waited),
      timeoutSeconds: Number(f.timeout),
      ...(tightestOf(why, 'tightest.') && { tightest: tightestOf(why, 'tightest.') }),
      moreShort: Number(why['moreShort.count'] ?? 0),
      ...(holders !== undefined && { holders }),
    };
  }
  if ((f = match('signal', text))) return { kind: 'signal', signal: f.signal! };
  if ((f = match('unchecked', text) ?? match('mig', text))) return { kind: 'unchecked', why: text };
  return { kind: 'other', text };
}
