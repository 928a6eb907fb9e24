/**
 * The one option table of every door, and the one parser that reads argv
 * with it. The post-renderer (`vram-preflight`, `explain`, `resolve`,
 * `admit`) and the webhook (`vram-preflight webhook`) take their flags from
 * this table, print their help from it, and refuse what is not in it the
 * same way: an unknown option names the close ones, an option of the other
 * door says where it belongs, an option without a value says so.
 *
 * A row says in which doors it means something (`doors`); a door's help lists
 * only those. The wrap's options (SCALAR_OPTIONS, also environment variables
 * and config keys) are rows here too, so a flag is never added to one door
 * and forgotten in the other.
 */
import { PreflightError } from '../core/index.js';
import { CONFIG_ENV, CONFIG_FLAG, SCALAR_OPTIONS } from './sources.js';
import { closest } from './suggest.js';

/** `render`: the post-renderer and its commands (src/cli); `webhook`: `vram-preflight webhook`; `admit`: `vram-preflight admit`, the webhook's answer without a cluster (both src/webhook). */
export type Door = 'render' | 'webhook' | 'admit' | 'audit' | 'verify';

export interface FlagRow {
  flag: string;
  /** Other spellings (`-h`). */
  aliases?: readonly string[];
  /** The value as the help shows it (`VALUE`, `text|json`); absent: a switch that takes none. */
  value?: string;
  help: string;
  /** Its environment variable, where it has one. */
  env?: string;
  /** Where the flag means something; elsewhere it is refused with where it belongs. */
  doors: readonly Door[];
  /** `wrap`: an option of the wrap (SCALAR_OPTIONS or --config), handed to src/config; `door`: the door's own. */
  kind: 'wrap' | 'door';
  /** A setting whose default the door fills into the help (`(default N)`), by this name. */
  defaultOf?: string;
  /** A switch without a value that does not stop parsing (`verify --yes`): the door's map holds it as "true". */
  switch?: boolean;
}

/** Wrap options that only a render uses: the webhook answers the API server, writes no files and reads no YAML. */
const RENDER_ONLY_KEYS: ReadonlySet<string> = new Set(['diagnosticsFile', 'reportFile', 'fastParse']);

/** Why a render-only option means nothing to the webhook (its messages say it). */
export const RENDER_ONLY_WHY = 'the webhook writes no diagnostics or report file (it logs JSON lines and answers the API server) and reads no YAML';

export function isRenderOnlyKey(key: string): boolean {
  return RENDER_ONLY_KEYS.has(key);
}

/** A render's option in the environment of a door that is not the render would be read and then do nothing: refused instead. */
export function refuseRenderOnlyEnv(env: Readonly<Record<string, string | undefined>>, door: Exclude<Door, 'render'>): void {
  const renderOnly = SCALAR_OPTIONS.find((o) => RENDER_ONLY_KEYS.has(o.key) && env[o.env] !== undefined);
  if (renderOnly) {
    const name = door === 'webhook' ? 'the webhook' : 'admit';
    throw new PreflightError('BAD_OPTION', `${renderOnly.env} is an option of the post-renderer, not of ${name}: ${RENDER_ONLY_WHY}`, { fix: `remove ${renderOnly.env} from the environment of ${name}` });
  }
}

const WRAP_ROWS: readonly FlagRow[] = [
  { flag: CONFIG_FLAG, value: 'FILE', env: CONFIG_ENV, help: 'YAML or JSON config file (schema: config.schema.json)', doors: ['render', 'webhook', 'admit', 'audit', 'verify'], kind: 'wrap' },
  ...SCALAR_OPTIONS.map((o): FlagRow => ({ flag: o.flag, value: 'VALUE', env: o.env, help: o.help, doors: RENDER_ONLY_KEYS.has(o.key) ? ['render'] : ['render', 'webhook', 'admit', 'audit', 'verify'], kind: 'wrap' })),
];

const RENDER_ROWS: readonly FlagRow[] = [{ flag: '--output', value: 'text|json', help: "explain's format (json: src/report.schema.json; admit's --output: vram-preflight admit --help)", doors: ['render'], kind: 'door' }];

const SWITCH_ROWS: readonly FlagRow[] = [
  { flag: '--help', aliases: ['-h'], help: 'show this help', doors: ['render', 'webhook', 'admit', 'audit', 'verify'], kind: 'door' },
  { flag: '--version', aliases: ['-v'], help: 'print the version', doors: ['render', 'webhook', 'admit', 'audit', 'verify'], kind: 'door' },
];

/**
 * The flags of the wrap and of the render, and the switches every door has.
 * A door adds its own rows (the webhook's, src/webhook/main.ts, kept out of
 * the render's bundle) where it parses: `parseCommandLine(argv, door, rows)`.
 */
export const FLAGS: readonly FlagRow[] = [...WRAP_ROWS, ...RENDER_ROWS, ...SWITCH_ROWS];

const rowsOf = (door: Door, own: readonly FlagRow[]): FlagRow[] => [...own, ...FLAGS].filter((row) => row.doors.includes(door));
const HELP_COMMAND: Record<Door, string> = { render: 'vram-preflight --help', webhook: 'vram-preflight webhook --help', admit: 'vram-preflight admit --help', audit: 'vram-preflight audit --help', verify: 'vram-preflight verify --help' };
const DOOR_NAME: Record<Door, string> = { render: 'the post-renderer', webhook: 'the webhook', admit: 'admit (the webhook\'s answer)', audit: 'the audit', verify: 'verify' };

/** Why a render-only option means nothing to the audit (its messages say it). */
export const AUDIT_RENDER_ONLY_WHY = 'the audit writes no diagnostics or report file and reads no YAML';

/** Why a render-only option means nothing to verify (its messages say it). */
export const VERIFY_RENDER_ONLY_WHY = 'verify writes no diagnostics or report file and reads no YAML';

/** What a command line says, read with the table. */
export interface ParsedCommandLine {
  /** The positional words, in order (a command, `resolve`'s images). */
  words: string[];
  /** Options of the wrap, as src/config takes them (`--name` and its value as given). */
  wrap: { flag: string; value: string }[];
  /** The door's own options that take a value, last one wins. */
  door: Map<string, string>;
  /** --help or --version, whichever came first (parsing stops there). */
  stop?: '--help' | '--version';
}

/**
 * Reads argv for `door`. Throws PreflightError USAGE for an unknown option
 * (with the close ones of this door), an option of the other door, an option
 * without its value, or an option and its value in one word.
 */
export function parseCommandLine(argv: readonly string[], door: Door, own: readonly FlagRow[] = []): ParsedCommandLine {
  const parsed: ParsedCommandLine = { words: [], wrap: [], door: new Map() };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (!arg.startsWith('-') || arg === '-') {
      parsed.words.push(arg);
      continue;
    }
    const eq = arg.indexOf('=');
    const flag = eq === -1 ? arg : arg.slice(0, eq);
    // Known before a value is taken: `--bogus 5` is an unknown option, not `--bogus` with the value 5.
    const row = findRow(flag, door, own);
    if (row.value === undefined) {
      if (eq !== -1) throw new PreflightError('USAGE', `option ${row.flag} takes no value (got "${arg}")`, { fix: `write ${row.flag} alone; see ${HELP_COMMAND[door]}` });
      if (row.switch) {
        parsed.door.set(row.flag, 'true');
        continue;
      }
      parsed.stop = row.flag as ParsedCommandLine['stop'];
      return parsed;
    }
    let value: string;
    if (eq !== -1) value = arg.slice(eq + 1);
    else if (i + 1 < argv.length) value = argv[++i]!;
    else throw new PreflightError('USAGE', `option ${row.flag} needs a value`, { fix: `${row.flag}=${row.value}; see ${HELP_COMMAND[door]}` });
    if (row.kind === 'wrap') parsed.wrap.push({ flag: row.flag, value });
    else parsed.door.set(row.flag, value);
  }
  return parsed;
}

function findRow(flag: string, door: Door, own: readonly FlagRow[]): FlagRow {
  const row = [...own, ...FLAGS].find((r) => r.flag === flag || r.aliases?.includes(flag));
  if (row && row.doors.includes(door)) return row;
  if (row) {
    const owner = row.doors[0]!;
    const where = `${DOOR_NAME[owner]} (${HELP_COMMAND[owner]})`;
    const why = door !== 'render' && row.kind === 'wrap' ? `: ${door === 'audit' ? AUDIT_RENDER_ONLY_WHY : door === 'verify' ? VERIFY_RENDER_ONLY_WHY : RENDER_ONLY_WHY}` : '';
    throw new PreflightError('USAGE', `option ${flag} belongs to ${where}, not to ${DOOR_NAME[door]}${why}`, {
      fix: `leave ${flag} out here; see ${HELP_COMMAND[door]}`,
    });
  }
  // `--post-renderer-args '--timeout-seconds 900'` hands over one word with a space in it.
  const space = flag.search(/\s/);
  const first = space === -1 ? undefined : rowsOf(door, own).find((r) => r.flag === flag.slice(0, space));
  if (first) {
    const written = `${first.flag}=${flag.slice(space).trim()}`;
    throw new PreflightError('USAGE', `"${flag}" came as one argument, the option and its value with a space between them inside it (quoting, or one --post-renderer-args holding both, does that)`, {
      fix: `write it as ${written} (one word, with =)${door === 'render' ? `, e.g. helm ... --post-renderer-args=${written}` : ''}`,
    });
  }
  const names = rowsOf(door, own).map((r) => r.flag);
  const close = closest(flag, names, (name) => name.replace(/^-+/, ''));
  throw new PreflightError('USAGE', `unknown option ${flag}`, {
    fix: close.length ? `did you mean ${close.join(' or ')}? (all options: ${HELP_COMMAND[door]})` : `valid options: ${names.join(', ')}`,
  });
}

/** The wrap's options of a command line as src/config takes them: the config file apart, the other flags as given. */
export function wrapOptions(line: ParsedCommandLine): { configPath?: string; flags: { flag: string; value: string }[] } {
  const flags = line.wrap.filter((f) => f.flag !== CONFIG_FLAG);
  // The last --config wins, as for every other option.
  const configPath = line.wrap.reduce<string | undefined>((last, f) => (f.flag === CONFIG_FLAG ? f.value : last), undefined);
  return configPath === undefined ? { flags } : { configPath, flags };
}

/** A render-only option set in the environment, which another door would read and then do nothing with (said at start instead). */
export function renderOnlyVariable(env: Readonly<Record<string, string | undefined>>): string | undefined {
  return SCALAR_OPTIONS.find((o) => RENDER_ONLY_KEYS.has(o.key) && env[o.env] !== undefined)?.env;
}

/**
 * A door's options as help lines: flag and value, what it does, its
 * environment variable. `defaults` fills `(default N)` for rows that name one.
 */
export function optionHelp(door: Door, kind: FlagRow['kind'] | 'all', own: readonly FlagRow[] = [], defaults: Readonly<Record<string, unknown>> = {}): string {
  return rowsOf(door, own)
    .filter((row) => kind === 'all' || row.kind === kind)
    .map((row) => {
      const names = [...(row.aliases ?? []), row.flag].join(', ');
      const head = `  ${`${names}${row.value ? ` ${row.value}` : ''}`.padEnd(36)}`;
      const fallback = row.defaultOf !== undefined && defaults[row.defaultOf] !== undefined ? ` (default ${String(defaults[row.defaultOf])})` : '';
      const env = row.env ? `\n  ${''.padEnd(36)}env ${row.env}` : '';
      return `${head}${row.help}${fallback}${env}`;
    })
    .join('\n');
}
