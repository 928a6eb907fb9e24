/**
 * How go-yaml reads a scalar where it differs from the `yaml` library's YAML 1.2: Helm (3 and 4)
 * and kubectl read manifests through sigs.k8s.io/yaml, whose go-yaml v2 fork resolves plain
 * scalars by YAML 1.1's rules (`goyaml.v2/resolve.go`) and takes NEL, LS and PS for line breaks
 * (`goyaml.v2/scannerc.go`: `is_break`, `read_line`). A command/args item the cluster reads
 * otherwise than we do would make the wrapped start run another argv, or make a manifest the
 * cluster refuses install once wrapped.
 * Plain scans, no regexes on the hot path: a render calls these for every argv item.
 */
import { Lexer } from 'yaml';
import { isAsciiDigit } from '../char-classes.js';

export type GoYamlType = 'str' | 'int' | 'float' | 'bool' | 'null';

/** goyaml.v2's resolveMap: the plain scalars it reads as a bool, null or special float (`<<`, the merge key, stays a string here). */
const RESOLVE_MAP = new Map<string, GoYamlType>([
  ...['y', 'Y', 'yes', 'Yes', 'YES', 'true', 'True', 'TRUE', 'on', 'On', 'ON', 'n', 'N', 'no', 'No', 'NO', 'false', 'False', 'FALSE', 'off', 'Off', 'OFF'].map((s) => [s, 'bool'] as [string, GoYamlType]),
  ...['', '~', 'null', 'Null', 'NULL'].map((s) => [s, 'null'] as [string, GoYamlType]),
  ...['.nan', '.NaN', '.NAN', '.inf', '.Inf', '.INF', '+.inf', '+.Inf', '+.INF', '-.inf', '-.Inf', '-.INF'].map((s) => [s, 'float'] as [string, GoYamlType]),
]);

/**
 * The type go-yaml v2 resolves an untagged plain scalar to (`resolve("", in)`): a string unless
 * it is in the map above, or starts with a digit, sign or dot and parses as Go's
 * `strconv.ParseInt(plain, 0, 64)` syntax (0x, 0o, 0b, leading-0 octal; `_` removed first;
 * any size), or as a float of `yamlStyleFloat` shape that is finite. (A timestamp-shaped one is
 * decoded back to its text: a string.)
 */
export function goYamlPlainType(text: string): GoYamlType {
  const mapped = RESOLVE_MAP.get(text);
  if (mapped) return mapped;
  const first = text.charCodeAt(0);
  if (first === 0x2e) return isDotFloat(text) ? 'float' : 'str';
  if (!(isAsciiDigit(first) || first === 0x2b || first === 0x2d)) return 'str';
  const plain = text.replaceAll('_', '');
  if (isGoInteger(plain)) return 'int';
  if (isYamlStyleFloat(plain) && Number.isFinite(Number(plain))) return 'float';
  return 'str';
}

/** Go's ParseInt base-0 syntax: `[+-]?(0[xX]hex+|0[oO]oct+|0[bB]bin+|0oct*|[1-9]dec*)`. */
function isGoInteger(s: string): boolean {
  let i = s.charCodeAt(0) === 0x2b || s.charCodeAt(0) === 0x2d ? 1 : 0;
  if (i >= s.length) return false;
  const digitsFrom = (from: number, ok: (c: number) => boolean): boolean => {
    if (from >= s.length) return false;
    for (let k = from; k < s.length; k++) if (!ok(s.charCodeAt(k))) return false;
    return true;
  };
  if (s.charCodeAt(i) !== 0x30) return digitsFrom(i, isAsciiDigit);
  const prefix = s[i + 1];
  if (prefix === 'x' || prefix === 'X') return digitsFrom(i + 2, (c) => isAsciiDigit(c) || (c >= 0x41 && c <= 0x46) || (c >= 0x61 && c <= 0x66));
  if (prefix === 'o' || prefix === 'O') return digitsFrom(i + 2, (c) => c >= 0x30 && c <= 0x37);
  if (prefix === 'b' || prefix === 'B') return digitsFrom(i + 2, (c) => c === 0x30 || c === 0x31);
  i++;
  return i === s.length || digitsFrom(i, (c) => c >= 0x30 && c <= 0x37);
}

/** goyaml.v2's yamlStyleFloat: `^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`. */
function isYamlStyleFloat(s: string): boolean {
  let i = s.charCodeAt(0) === 0x2b || s.charCodeAt(0) === 0x2d ? 1 : 0;
  const digits = (): number => {
    const from = i;
    while (isAsciiDigit(s.charCodeAt(i))) i++;
    return i - from;
  };
  if (s.charCodeAt(i) === 0x2e) {
    i++;
    if (digits() === 0) return false;
  } else {
    if (digits() === 0) return false;
    if (s.charCodeAt(i) === 0x2e) {
      i++;
      digits();
    }
  }
  if (s.charCodeAt(i) === 0x65 || s.charCodeAt(i) === 0x45) {
    i++;
    if (s.charCodeAt(i) === 0x2b || s.charCodeAt(i) === 0x2d) i++;
    if (digits() === 0) return false;
  }
  return i === s.length;
}

/** A plain scalar starting with `.` that Go's ParseFloat reads (`.5`, `.5e3`). */
function isDotFloat(s: string): boolean {
  return isYamlStyleFloat(s) && Number.isFinite(Number(s));
}

/**
 * NEL, LS and PS: line breaks to go-yaml, text to YAML 1.2. Three native searches, not a loop
 * over the code units: the render runs this on every candidate document's whole text, and a
 * loop that long is compiled by TurboFan (on-stack replacement) on another thread: on the vLLM
 * chart, 4.8 million instructions there and 2 million on the main thread, of the render's ~50
 * million own (docs/benchmarks.md). On one-byte text (ASCII: nearly every render) the searches
 * for LS and PS end at once.
 */
export function hasYaml11Break(text: string): boolean {
  return text.includes('\u0085') || text.includes('\u2028') || text.includes('\u2029');
}

const BLANK = (c: string | undefined): boolean => c === ' ' || c === '\t';
const BREAK = (c: string | undefined): boolean => c === '\n' || c === '\r' || c === '\u0085' || c === '\u2028' || c === '\u2029';

/** The `yaml` lexer's marks, which stand for no source text. */
const LEXER_MARKS = new Set(['\x02', '\x18', '\x1f']);

/**
 * Where go-yaml would read a line that YAML 1.2 does not see: the offset of the first raw NEL,
 * LS or PS outside a quoted scalar (in a comment, a plain or a block scalar) with more than
 * blanks after it on its line; -1 when there is none. go-yaml ends a comment there, and the
 * text after it is a line of its own to the cluster: `- a # note<NEL>  - b` is two items to
 * Helm and kubectl, one to vram-preflight, and the wrapped start would drop `b`. The same text
 * in a plain or block scalar ends or splits the scalar. (In a quoted scalar a break only folds:
 * command/args items are read as go-yaml reads them, edit.ts.) Lexed only when the text holds
 * one of the three at all.
 */
export function yaml11BreakOutsideQuotes(text: string): number {
  if (!hasYaml11Break(text)) return -1;
  let offset = 0;
  for (const token of new Lexer().lex(text)) {
    if (LEXER_MARKS.has(token)) continue;
    // A quoted scalar's token starts with its quote (the lexer's own test, CST.tokenType).
    if (token[0] !== '"' && token[0] !== "'") {
      for (let i = 0; i < token.length; i++) {
        const c = token.charCodeAt(i);
        if (c !== 0x85 && c !== 0x2028 && c !== 0x2029) continue;
        let j = i + 1;
        while (BLANK(token[j]) || (BREAK(token[j]) && token[j] !== '\n')) j++;
        if (j < token.length && token[j] !== '\n') return offset + i;
      }
    }
    offset += token.length;
  }
  return -1;
}

/** goyaml's read_line: a break as it goes into the value (CR LF, CR, LF and NEL as LF; LS and PS as themselves), and its length. */
function readLine(s: string, i: number): [string, number] {
  if (s[i] === '\r' && s[i + 1] === '\n') return ['\n', 2];
  if (s[i] === '\r' || s[i] === '\n' || s[i] === '\u0085') return ['\n', 1];
  return [s[i]!, 1];
}

/** Double-quoted escapes (goyaml.v2 scannerc.go, yaml_parser_scan_flow_scalar). */
const ESCAPES: Record<string, string> = {
  '0': '\0', a: '\x07', b: '\b', t: '\t', '\t': '\t', n: '\n', v: '\v', f: '\f', r: '\r', e: '\x1b', ' ': ' ', '"': '"', "'": "'", '\\': '\\', N: '\u0085', _: '\u00a0', L: '\u2028', P: '\u2029',
};

/**
 * A quoted scalar's value as go-yaml reads it, from its source (quotes included):
 * `yaml_parser_scan_flow_scalar`, with NEL, LS and PS as line breaks. A line break and the
 * blanks around it fold to a space, one more break each to a line feed (a NEL is a line feed;
 * an LS or PS that starts a fold is kept as it is); undefined where go-yaml would stop with an
 * error (an unknown escape, a document marker at a line's start, no closing quote).
 */
export function goYamlQuotedValue(source: string): string | undefined {
  const single = source[0] === "'";
  let i = 1;
  let out = '';
  for (;;) {
    if (i >= source.length) return undefined;
    const lineStart = i === 0 || BREAK(source[i - 1]);
    if (lineStart && (source.startsWith('---', i) || source.startsWith('...', i)) && (BLANK(source[i + 3]) || BREAK(source[i + 3]) || i + 3 >= source.length)) return undefined;
    let leadingBlanks = false;
    while (i < source.length && !BLANK(source[i]) && !BREAK(source[i])) {
      const c = source[i]!;
      if (single && c === "'" && source[i + 1] === "'") {
        out += "'";
        i += 2;
      } else if (single && c === "'") break;
      else if (!single && c === '"') break;
      else if (!single && c === '\\' && BREAK(source[i + 1])) {
        i += 1 + readLine(source, i + 1)[1];
        leadingBlanks = true;
        break;
      } else if (!single && c === '\\') {
        const e = source[i + 1];
        const width = e === 'x' ? 2 : e === 'u' ? 4 : e === 'U' ? 8 : 0;
        if (width) {
          const hex = source.slice(i + 2, i + 2 + width);
          if (hex.length !== width || !/^[0-9A-Fa-f]+$/.test(hex)) return undefined;
          const code = parseInt(hex, 16);
          if ((code >= 0xd800 && code <= 0xdfff) || code > 0x10ffff) return undefined;
          out += String.fromCodePoint(code);
          i += 2 + width;
        } else if (e !== undefined && e in ESCAPES) {
          out += ESCAPES[e];
          i += 2;
        } else return undefined;
      } else {
        out += c;
        i++;
      }
    }
    if (i >= source.length) return undefined;
    if (source[i] === (single ? "'" : '"')) return out;
    let whitespace = '';
    let leadingBreak = '';
    let trailingBreaks = '';
    while (BLANK(source[i]) || BREAK(source[i])) {
      if (BLANK(source[i])) {
        if (!leadingBlanks) whitespace += source[i];
        i++;
      } else {
        const [text, width] = readLine(source, i);
        if (!leadingBlanks) {
          whitespace = '';
          leadingBreak = text;
          leadingBlanks = true;
        } else trailingBreaks += text;
        i += width;
      }
    }
    if (leadingBlanks) {
      // (after an escaped line break there is no leading break: nothing joins the lines)
      if (leadingBreak === '\n') out += trailingBreaks === '' ? ' ' : trailingBreaks;
      else out += leadingBreak + trailingBreaks;
    } else out += whitespace;
  }
}
