/**
 * A narrow YAML parse path for the plain block YAML that Helm renders, with
 * the `yaml` library's own node classes and exactly the ranges, types and
 * values `yaml` gives (src/core/yaml/edit.ts edits text at those ranges).
 *
 * Why: a post-renderer runs once per `helm template`/install/upgrade and per
 * Argo CD refresh, and almost all of a short run's time went to composing
 * candidate documents with `yaml`'s general (and, in a fresh process, cold)
 * code. This parser reads only what rendered manifests are made of and
 * answers `undefined` for anything else, and the caller then parses with
 * `yaml` (`parseDocuments`). It never reports an error itself: a document it
 * cannot read fully goes to `yaml`, which says what is wrong.
 *
 * Read here: one document (an optional leading `---`, blank and comment lines
 * before it); block mappings and sequences (compact `- key: value` items,
 * sequences written at their key's indentation); single-line plain,
 * single-quoted and double-quoted (escapes \\ \" \/ \n \t) scalars; one-line
 * flow sequences of such scalars; `{}`; literal block scalars `|` and `|-`;
 * a comment at the end of a value's line.
 *
 * Everything else goes to `yaml`: tabs, CR, directives, several documents,
 * anchors, aliases, tags, merge keys, explicit `?` keys, duplicate keys, keys
 * that are not strings, a `__proto__` key, comment lines after the content
 * starts, multi-line plain and quoted scalars, folded and kept block
 * scalars, indentation indicators, flow mappings other than `{}`, nested
 * flow collections, empty sequence items. test/core/yaml-fast.test.ts checks it
 * against `yaml` on every fixture and on generated documents.
 *
 * `VRAM_PREFLIGHT_FAST_PARSE=off` (or `--no-fast-parse`) turns it off.
 */
import { Pair, parseAllDocuments, Scalar, YAMLMap, YAMLSeq, type Node } from 'yaml';
import { PARSE_OPTIONS, type ParsedDocument } from './nodes.js';
import { isAsciiDigit as isDigit, isLineTerminator } from '../char-classes.js';

/** All documents of `text`: the fast path's one document when it reads it fully, else `yaml`'s. */
export function parseDocuments(text: string, fast = true): ParsedDocument[] {
  const doc = fast ? parseSimpleDocument(text) : undefined;
  if (doc) return [doc];
  const docs = parseAllDocuments(text, PARSE_OPTIONS);
  return Array.isArray(docs) ? docs : [];
}

const NODE_TYPE = Symbol.for('yaml.node.type');

/**
 * `yaml` tells its nodes apart by a symbol its constructors define on every
 * instance (isScalar() and the others read it). Here it sits on a prototype
 * below the class's own: the nodes are instances of yaml's classes, read as
 * such by every yaml function, without a property definition per node.
 */
function tagged<T extends object>(proto: T, tag: string): T {
  return Object.create(proto, { [NODE_TYPE]: { value: Symbol.for(tag) } }) as T;
}
const SCALAR = tagged(Scalar.prototype, 'yaml.scalar');
const MAP = tagged(YAMLMap.prototype, 'yaml.map');
const SEQ = tagged(YAMLSeq.prototype, 'yaml.seq');
const PAIR = tagged(Pair.prototype, 'yaml.pair');

function newScalar(value: unknown): Scalar {
  const scalar = Object.create(SCALAR) as Scalar;
  scalar.value = value;
  return scalar;
}

function newMap(): YAMLMap<Scalar, unknown> {
  const map = Object.create(MAP) as YAMLMap<Scalar, unknown>;
  map.items = [];
  return map;
}

function newSeq(): YAMLSeq<unknown> {
  const seq = Object.create(SEQ) as YAMLSeq<unknown>;
  seq.items = [];
  return seq;
}

function newPair(key: Scalar, value: unknown): Pair<Scalar, unknown> {
  const pair = Object.create(PAIR) as Pair<Scalar, unknown>;
  pair.key = key;
  pair.value = value;
  return pair;
}

/** Thrown (one shared value, no stack) when the text leaves what this parser reads. */
const GIVE_UP: unique symbol = Symbol('fall back to yaml');

const SPACE = 0x20;
const NEWLINE = 0x0a;
const HASH = 0x23;
const COLON = 0x3a;
const DASH = 0x2d;
const DOUBLE_QUOTE = 0x22;
const SINGLE_QUOTE = 0x27;
const BACKSLASH = 0x5c;
const PIPE = 0x7c;
const OPEN_BRACKET = 0x5b;
const CLOSE_BRACKET = 0x5d;
const OPEN_BRACE = 0x7b;
const CLOSE_BRACE = 0x7d;
const COMMA = 0x2c;

/** Characters that cannot start a plain scalar here, or start one only `yaml` reads (c-indicator, YAML 1.2 §5.3). */
const NOT_PLAIN_START = new Set([...',[]{}#&*!|>\'"%@`'].map((c) => c.charCodeAt(0)));

// The core schema's number shapes below are plain scans, not regexes: a render is a short-lived
// process, and V8 compiles each regex on its first runs (~50-250 us apiece; docs/benchmarks.md).
// test/core/cold-regexes.test.ts holds each scan to the regex it replaces.

/** Index after the ASCII digits from `i`. */
function digitsEnd(text: string, i: number): number {
  while (i < text.length && isDigit(text.charCodeAt(i))) i++;
  return i;
}

function isSign(c: number): boolean {
  return c === 0x2b || c === DASH;
}

/** `/^0o[0-7]+$/` */
export function isYamlOctal(text: string): boolean {
  if (text.length < 3 || text.charCodeAt(0) !== 0x30 || text.charCodeAt(1) !== 0x6f) return false;
  for (let i = 2; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 0x30 || c > 0x37) return false;
  }
  return true;
}

/** `/^[-+]?[0-9]+$/` */
export function isYamlInteger(text: string): boolean {
  const start = isSign(text.charCodeAt(0)) ? 1 : 0;
  return text.length > start && digitsEnd(text, start) === text.length;
}

/** `/^0x[0-9a-fA-F]+$/` */
export function isYamlHex(text: string): boolean {
  if (text.length < 3 || text.charCodeAt(0) !== 0x30 || text.charCodeAt(1) !== 0x78) return false;
  for (let i = 2; i < text.length; i++) {
    const c = text.charCodeAt(i);
    const lower = c | 0x20; // A-F to a-f; no other character lands there
    if (!isDigit(c) && !(lower >= 0x61 && lower <= 0x66)) return false;
  }
  return true;
}

/** `/^(?:[-+]?\.(?:inf|Inf|INF)|\.nan|\.NaN|\.NAN)$/`: a closed set of spellings. */
export const YAML_INF_NAN: ReadonlySet<string> = new Set(['.inf', '.Inf', '.INF', '+.inf', '+.Inf', '+.INF', '-.inf', '-.Inf', '-.INF', '.nan', '.NaN', '.NAN']);

/**
 * Where a float's mantissa `[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)` ends, and whether it
 * has a point; -1 when there is none. Shared by the two float shapes.
 */
function mantissaEnd(text: string): { end: number; point: boolean } {
  let i = isSign(text.charCodeAt(0)) ? 1 : 0;
  const intEnd = digitsEnd(text, i);
  const intDigits = intEnd - i;
  i = intEnd;
  if (text.charCodeAt(i) !== 0x2e) return { end: intDigits > 0 ? i : -1, point: false };
  const fractionEnd = digitsEnd(text, i + 1);
  return { end: intDigits > 0 || fractionEnd > i + 1 ? fractionEnd : -1, point: true };
}

/** `/^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)[eE][-+]?[0-9]+$/` */
export function isYamlExponentFloat(text: string): boolean {
  let { end: i } = mantissaEnd(text);
  if (i < 0 || (text.charCodeAt(i) | 0x20) !== 0x65) return false;
  i++;
  if (isSign(text.charCodeAt(i))) i++;
  return i < text.length && digitsEnd(text, i) === text.length;
}

/** `/^[-+]?(?:\.[0-9]+|[0-9]+\.[0-9]*)$/` */
export function isYamlPointFloat(text: string): boolean {
  const { end, point } = mantissaEnd(text);
  return point && end === text.length;
}

/** `yaml`'s core schema, in its order: what a plain scalar's text means. */
function resolvePlain(text: string): unknown {
  switch (text) {
    case '':
    case '~':
    case 'null':
    case 'Null':
    case 'NULL':
      return null;
    case 'true':
    case 'True':
    case 'TRUE':
      return true;
    case 'false':
    case 'False':
    case 'FALSE':
      return false;
  }
  // Every number starts with a digit, a sign or a dot: most scalars are strings, decided here.
  const first = text.charCodeAt(0);
  if (!((first >= 0x30 && first <= 0x39) || first === 0x2b || first === DASH || first === 0x2e)) return text;
  if (isYamlOctal(text)) return parseInt(text.slice(2), 8);
  if (isYamlInteger(text)) return parseInt(text, 10);
  if (isYamlHex(text)) return parseInt(text.slice(2), 16);
  if (YAML_INF_NAN.has(text)) return text.endsWith('nan') || text.endsWith('NaN') || text.endsWith('NAN') ? NaN : text[0] === '-' ? Number.NEGATIVE_INFINITY : Number.POSITIVE_INFINITY;
  if (isYamlExponentFloat(text) || isYamlPointFloat(text)) return parseFloat(text);
  return text;
}

/** `yaml` keeps a float's written fraction digits (`1.50`) for output; the node should be the same. */
function plainScalar(text: string, start: number, end: number, after: number): Scalar {
  const value = resolvePlain(text);
  const scalar = newScalar(value);
  if (typeof value === 'number') {
    if (isYamlOctal(text)) scalar.format = 'OCT';
    else if (isYamlHex(text)) scalar.format = 'HEX';
    else if (isYamlExponentFloat(text)) scalar.format = 'EXP';
    else if (isYamlPointFloat(text) && text.endsWith('0')) scalar.minFractionDigits = text.length - text.indexOf('.') - 1;
  }
  return finish(scalar, text, 'PLAIN', start, end, after);
}

function finish(scalar: Scalar, source: string, type: Scalar.Type, start: number, end: number, after: number): Scalar {
  scalar.range = [start, end, after];
  scalar.source = source;
  scalar.type = type;
  return scalar;
}

/**
 * The next occurrence of a string at or after a position. Most lines hold no
 * comment (or escape), and a plain search would run to the end of the text
 * from every line: the last answer is kept, valid for every position between
 * the search's start and its result, so the text is searched once.
 */
class Finder {
  private from = Number.MAX_SAFE_INTEGER;
  private at = -1;

  constructor(
    private readonly text: string,
    private readonly needle: string,
  ) {}

  next(from: number): number {
    if (!(this.from <= from && (from <= this.at || this.at === -1))) {
      this.from = from;
      this.at = this.text.indexOf(this.needle, from);
    }
    return this.at;
  }
}

/**
 * One pass over the text, line by line. Positions that a step finds besides
 * its result (where the next line starts, where a key ends) go to fields
 * rather than to small result objects: a short run must stay below the
 * first garbage collection (the same holds for the 10,000-document stream).
 */
class Reader {
  /** Where the line after the last node read starts. */
  private next = 0;
  /** The line found by nextContent: its start. */
  private contentLine = 0;
  /** After a key: the offset just past its `:`. */
  private afterColon = 0;
  /** After a quoted scalar or a plain one: the offset past it. */
  private scalarEnd = 0;
  private readonly comments: Finder;
  private readonly colons: Finder;
  private readonly backslashes: Finder;

  constructor(private readonly text: string) {
    this.comments = new Finder(text, ' #');
    this.colons = new Finder(text, ':');
    this.backslashes = new Finder(text, '\\');
  }

  /** Offset of the newline ending the line that holds `at`, or the text's length. */
  private lineEnd(at: number): number {
    const newline = this.text.indexOf('\n', at);
    return newline === -1 ? this.text.length : newline;
  }

  /** Offset of the next line's start (the text's length on the last line). */
  private nextLine(at: number): number {
    const newline = this.text.indexOf('\n', at);
    return newline === -1 ? this.text.length : newline + 1;
  }

  /** Runs in the interpreter in a short run: native string search beats a loop over characters. */
  private skipSpaces(at: number): number {
    if (this.text.charCodeAt(at) !== SPACE) return at;
    SPACES.lastIndex = at;
    SPACES.test(this.text);
    return SPACES.lastIndex;
  }

  /** True at the end of the line or at a space, the end of the text: what may follow a `:` or `-` indicator. */
  private isBreakOrSpace(at: number): boolean {
    const c = this.text.charCodeAt(at);
    return c === SPACE || c === NEWLINE || at >= this.text.length;
  }

  /**
   * The indentation of the first line at or after `lineStart` that holds
   * content (its start goes to `contentLine`); -1 at the end of the text.
   * Blank lines are skipped; a comment line or a document marker ends what
   * this parser reads.
   */
  private nextContent(lineStart: number): number {
    let at = lineStart;
    while (at < this.text.length) {
      const first = this.skipSpaces(at);
      if ((first >= this.text.length || this.text.charCodeAt(first) === NEWLINE)) {
        at = first + 1;
        continue;
      }
      const c = this.text.charCodeAt(first);
      if (c === HASH) throw GIVE_UP;
      if (first === at && (c === DASH || c === 0x2e) && (this.text.startsWith('---', at) || this.text.startsWith('...', at))) throw GIVE_UP;
      this.contentLine = at;
      return first - at;
    }
    return -1;
  }

  /** After a value on its line: spaces, an optional comment, the line's end. Returns the next line's start. */
  private endOfValueLine(at: number): number {
    const next = this.skipSpaces(at);
    if ((next >= this.text.length || this.text.charCodeAt(next) === NEWLINE)) return next >= this.text.length ? next : next + 1;
    if (this.text.charCodeAt(next) === HASH && next > at) return this.nextLine(next);
    throw GIVE_UP;
  }

  parseDocument(): ParsedDocument {
    const text = this.text;
    if (text.includes('\t') || text.includes('\r') || text.charCodeAt(0) === 0xfeff) throw GIVE_UP;
    // Before the content: blank lines, comment lines and at most one `---` line.
    let at = 0;
    let marker = -1;
    for (;;) {
      if (at >= text.length) throw GIVE_UP; // no content: yaml's empty document
      const first = this.skipSpaces(at);
      if ((first >= this.text.length || this.text.charCodeAt(first) === NEWLINE) || this.text.charCodeAt(first) === HASH) {
        at = this.nextLine(first);
        continue;
      }
      if (first === at && text.startsWith('---', at)) {
        if (marker !== -1 || this.text.charCodeAt(at + 3) !== NEWLINE) throw GIVE_UP;
        marker = at;
        at += 4;
        continue;
      }
      if (first === at && (this.text.charCodeAt(at) === 0x25 || text.startsWith('...', at))) throw GIVE_UP;
      break;
    }
    const start = this.skipSpaces(at);
    const node = this.blockNode(start, start - at);
    if (this.nextContent(this.next) !== -1) throw GIVE_UP;
    const end = node.range![2];
    // An empty value last leaves its line's end outside every node, where yaml's document range differs: rare, handed over.
    if (end < text.length && this.text.charCodeAt(end - 1) !== NEWLINE) throw GIVE_UP;
    return {
      contents: node,
      // yaml's document starts at its `---`, else at the line of its content.
      range: [marker === -1 ? at : marker, end, text.length],
      errors: [],
      uniqueKeys: true,
      toJS: () => toJS(node),
    };
  }

  private isSeqItem(at: number): boolean {
    return this.text.charCodeAt(at) === DASH && this.isBreakOrSpace(at + 1);
  }

  /** A block node starting at `start` (the first content of a line, `indent` spaces in). */
  private blockNode(start: number, indent: number): Node {
    if (this.isSeqItem(start)) return this.blockSeq(start, indent);
    const key = this.key(start);
    if (key === undefined) throw GIVE_UP;
    return this.blockMap(start, indent, key);
  }

  /** A block mapping whose first key (already read) starts at `start`. */
  private blockMap(start: number, indent: number, firstKey: Scalar): YAMLMap {
    const map = newMap();
    let key: Scalar | undefined = firstKey;
    for (;;) {
      if (this.repeats(map, key.value as string)) throw GIVE_UP;
      const value = this.pairValue(this.afterColon, indent);
      map.items.push(newPair(key, value));
      const following = this.nextContent(this.next);
      if (following < indent) {
        const end = value.range![2];
        map.range = [start, end, end];
        return map;
      }
      // A deeper line here continues a scalar over lines; a `-` is not a key: yaml reads (or rejects) both.
      const keyStart = this.contentLine + indent;
      if (following > indent || this.isSeqItem(keyStart)) throw GIVE_UP;
      key = this.key(keyStart);
      if (key === undefined) throw GIVE_UP;
    }
  }

  /** The value after a key's `:` (at `at`), in a mapping `indent` spaces in. */
  private pairValue(at: number, indent: number): Node {
    const start = this.skipSpaces(at);
    if (!(start >= this.text.length || this.text.charCodeAt(start) === NEWLINE)) return this.inlineValue(start, indent);
    // Nothing on the key's line: the value is the block below, or empty.
    const lineAfter = start >= this.text.length ? start : start + 1;
    const below = this.nextContent(lineAfter);
    if (below !== -1) {
      const first = this.contentLine + below;
      if (below > indent) return this.blockNode(first, below);
      // A sequence may sit at its key's indentation.
      if (below === indent && this.isSeqItem(first)) return this.blockSeq(first, indent);
    }
    // yaml's empty value: a null plain scalar just after the `:`.
    if (start !== at) throw GIVE_UP; // spaces after the `:`: where yaml puts the empty node was not checked
    this.next = lineAfter;
    return finish(newScalar(null), '', 'PLAIN', at, at, at);
  }

  /** `name` is a key of `map` already. Mappings are small: a scan, not a Set per mapping (garbage in a short run). */
  private repeats(map: YAMLMap<Scalar, unknown>, name: string): boolean {
    const items = map.items;
    for (let i = 0; i < items.length; i++) if (items[i]!.key.value === name) return true;
    return false;
  }

  /** A value that starts on the current line at `start`; `indent`: that of the collection holding it. */
  private inlineValue(start: number, indent: number): Node {
    const c = this.text.charCodeAt(start);
    if (c === DOUBLE_QUOTE || c === SINGLE_QUOTE) {
      const value = this.quoted(start);
      const end = this.scalarEnd;
      const next = this.endOfValueLine(end);
      this.noContinuation(next, indent);
      return finish(newScalar(value), value, c === DOUBLE_QUOTE ? 'QUOTE_DOUBLE' : 'QUOTE_SINGLE', start, end, next);
    }
    if (c === PIPE) return this.literal(start, indent);
    if (c === OPEN_BRACKET) return this.flowSeq(start, indent);
    if (c === OPEN_BRACE) {
      if (this.text.charCodeAt(start + 1) !== CLOSE_BRACE) throw GIVE_UP;
      const next = this.endOfValueLine(start + 2);
      this.noContinuation(next, indent);
      const map = newMap();
      map.flow = true;
      map.range = [start, start + 2, next];
      return map;
    }
    const text = this.plainOnLine(start);
    const end = this.scalarEnd;
    const next = this.endOfValueLine(end);
    this.noContinuation(next, indent);
    return plainScalar(text, start, end, next);
  }

  /** A following line deeper than the collection would continue the scalar over lines: yaml's to read. */
  private noContinuation(next: number, indent: number): void {
    if (this.nextContent(next) > indent) throw GIVE_UP;
    this.next = next;
  }

  /** A plain scalar that ends on its line: its text (its end, before trailing spaces and a comment, to `scalarEnd`). */
  private plainOnLine(start: number): string {
    const c = this.text.charCodeAt(start);
    if (NOT_PLAIN_START.has(c) || ((c === DASH || c === 0x3f || c === COLON) && this.isBreakOrSpace(start + 1))) throw GIVE_UP;
    let end = this.lineEnd(start);
    const comment = this.comments.next(start);
    if (comment !== -1 && comment < end) end = comment;
    // `: ` inside a value starts a mapping yaml rejects here; `:` at the end is a key.
    if (this.indicatorColon(start, end) !== -1) throw GIVE_UP;
    while (this.text.charCodeAt(end - 1) === SPACE) end--;
    this.scalarEnd = end;
    return this.text.slice(start, end);
  }

  /**
   * A key at `start` followed by `:` and a space or the line's end (the
   * offset after the `:` goes to `afterColon`); undefined when the line
   * holds no key there.
   */
  private key(start: number): Scalar | undefined {
    const c = this.text.charCodeAt(start);
    if (c === DOUBLE_QUOTE || c === SINGLE_QUOTE) {
      const value = this.quoted(start);
      const end = this.scalarEnd;
      if (this.text.charCodeAt(end) !== COLON) {
        if (this.text.charCodeAt(this.skipSpaces(end)) === COLON) throw GIVE_UP;
        return undefined;
      }
      if (!this.isBreakOrSpace(end + 1)) return undefined;
      this.checkKey(value, end - start);
      this.afterColon = end + 1;
      return finish(newScalar(value), value, c === DOUBLE_QUOTE ? 'QUOTE_DOUBLE' : 'QUOTE_SINGLE', start, end, end);
    }
    if (NOT_PLAIN_START.has(c) || ((c === DASH || c === 0x3f || c === COLON) && this.isBreakOrSpace(start + 1))) return undefined;
    const lineEnd = this.lineEnd(start);
    const colon = this.indicatorColon(start, lineEnd);
    if (colon === -1) return undefined;
    const comment = this.comments.next(start);
    if (comment !== -1 && comment < colon) return undefined;
    let end = colon;
    while (this.text.charCodeAt(end - 1) === SPACE) end--;
    const text = this.text.slice(start, end);
    if (resolvePlain(text) !== text) throw GIVE_UP; // null, bool or number keys: yaml's to read
    this.checkKey(text, colon - start);
    this.afterColon = colon + 1;
    return finish(newScalar(text), text, 'PLAIN', start, end, end);
  }

  /** The first `:` in [from, to) followed by a space or the line's end (a mapping indicator); -1 if none. */
  private indicatorColon(from: number, to: number): number {
    for (let colon = this.colons.next(from); colon !== -1 && colon < to; colon = this.colons.next(colon + 1)) {
      if (this.isBreakOrSpace(colon + 1)) return colon;
    }
    return -1;
  }

  private checkKey(name: string, length: number): void {
    if (name === '<<' || name === '__proto__' || length > 1024) throw GIVE_UP;
  }

  /** A quoted scalar that closes on its line: its value (the offset after the closing quote goes to `scalarEnd`). */
  private quoted(start: number): string {
    const quote = this.text.charCodeAt(start);
    const lineEnd = this.lineEnd(start);
    // Most quoted scalars hold no escape: one search finds the end.
    const close = this.text.indexOf(quote === SINGLE_QUOTE ? "'" : '"', start + 1);
    if (close !== -1 && close < lineEnd && this.text.charCodeAt(close + 1) !== SINGLE_QUOTE) {
      const backslash = quote === DOUBLE_QUOTE ? this.backslashes.next(start + 1) : -1;
      if (backslash === -1 || backslash > close) {
        this.scalarEnd = close + 1;
        return this.text.slice(start + 1, close);
      }
    }
    let value = '';
    let from = start + 1;
    for (let at = start + 1; at < lineEnd; at++) {
      const ch = this.text.charCodeAt(at);
      if (quote === SINGLE_QUOTE) {
        if (ch !== SINGLE_QUOTE) continue;
        value += this.text.slice(from, at);
        if (this.text.charCodeAt(at + 1) === SINGLE_QUOTE) {
          value += "'";
          from = ++at + 1;
          continue;
        }
        this.scalarEnd = at + 1;
        return value;
      }
      if (ch === DOUBLE_QUOTE) {
        this.scalarEnd = at + 1;
        return value + this.text.slice(from, at);
      }
      if (ch === BACKSLASH) {
        const escaped = this.text.charCodeAt(at + 1);
        const meaning = escaped === BACKSLASH ? '\\' : escaped === DOUBLE_QUOTE ? '"' : escaped === 0x2f ? '/' : escaped === 0x6e ? '\n' : escaped === 0x74 ? '\t' : undefined;
        if (meaning === undefined) throw GIVE_UP;
        value += this.text.slice(from, at) + meaning;
        from = ++at + 1;
      }
    }
    throw GIVE_UP; // continues on the next line
  }

  /** `[a, "b", 'c']` on one line, of scalars only. */
  private flowSeq(start: number, indent: number): YAMLSeq {
    const seq = newSeq();
    seq.flow = true;
    let at = this.skipSpaces(start + 1);
    if (this.text.charCodeAt(at) === CLOSE_BRACKET) {
      at += 1;
    } else {
      for (;;) {
        const itemStart = at;
        const c = this.text.charCodeAt(itemStart);
        let item: Scalar;
        let itemEnd: number;
        if (c === DOUBLE_QUOTE || c === SINGLE_QUOTE) {
          const value = this.quoted(itemStart);
          itemEnd = this.scalarEnd;
          item = finish(newScalar(value), value, c === DOUBLE_QUOTE ? 'QUOTE_DOUBLE' : 'QUOTE_SINGLE', itemStart, itemEnd, itemEnd);
        } else {
          // In a flow collection `-` and `?` start a plain scalar only before a character that is neither space nor flow indicator.
          const second = this.text.charCodeAt(itemStart + 1);
          if (NOT_PLAIN_START.has(c) || (itemStart >= this.text.length || this.text.charCodeAt(itemStart) === NEWLINE) || ((c === DASH || c === 0x3f) && (this.isBreakOrSpace(itemStart + 1) || second === COMMA || second === OPEN_BRACKET || second === CLOSE_BRACKET || second === OPEN_BRACE || second === CLOSE_BRACE))) throw GIVE_UP;
          itemEnd = itemStart;
          let p = itemStart;
          for (; !(p >= this.text.length || this.text.charCodeAt(p) === NEWLINE); p++) {
            const ch = this.text.charCodeAt(p);
            if (ch === COMMA || ch === CLOSE_BRACKET) break;
            if (ch === COLON || ch === HASH || ch === OPEN_BRACKET || ch === OPEN_BRACE || ch === CLOSE_BRACE) throw GIVE_UP;
            if (ch !== SPACE) itemEnd = p + 1;
          }
          item = plainScalar(this.text.slice(itemStart, itemEnd), itemStart, itemEnd, itemEnd);
        }
        const after = this.skipSpaces(itemEnd);
        item.range![2] = after;
        seq.items.push(item);
        const sep = this.text.charCodeAt(after);
        if (sep === CLOSE_BRACKET) {
          at = after + 1;
          break;
        }
        if (sep !== COMMA) throw GIVE_UP;
        at = this.skipSpaces(after + 1);
        if (this.text.charCodeAt(at) === CLOSE_BRACKET) throw GIVE_UP; // a trailing comma
      }
    }
    const next = this.endOfValueLine(at);
    this.noContinuation(next, indent);
    seq.range = [start, at, next];
    return seq;
  }

  /** `|` or `|-` and the lines below, deeper than `indent`. */
  private literal(start: number, indent: number): Scalar {
    const text = this.text;
    let at = start + 1;
    const strip = this.text.charCodeAt(at) === DASH;
    if (strip) at++;
    const headerEnd = this.skipSpaces(at);
    if (!(headerEnd >= this.text.length || this.text.charCodeAt(headerEnd) === NEWLINE) || headerEnd >= text.length) throw GIVE_UP;
    const first = headerEnd + 1;
    // The content's indentation: that of its first non-blank line.
    let contentIndent = -1;
    let longestLeadingBlank = 0;
    for (let line = first; line < text.length; ) {
      const lineFirst = this.skipSpaces(line);
      if ((lineFirst >= this.text.length || this.text.charCodeAt(lineFirst) === NEWLINE)) {
        longestLeadingBlank = Math.max(longestLeadingBlank, lineFirst - line);
        line = lineFirst + 1;
        continue;
      }
      contentIndent = lineFirst - line;
      break;
    }
    if (contentIndent <= indent || longestLeadingBlank > contentIndent) throw GIVE_UP;
    // The block ends before the first line indented less than its content (blank lines aside).
    let end = first; // after the last content line's newline
    let line = first;
    while (line < text.length) {
      const lineFirst = this.skipSpaces(line);
      if ((lineFirst >= this.text.length || this.text.charCodeAt(lineFirst) === NEWLINE)) {
        // More spaces than the indentation on a blank line are content yaml reads by rules not copied here.
        if (lineFirst - line > contentIndent) throw GIVE_UP;
        line = lineFirst + 1;
        continue;
      }
      if (lineFirst - line < contentIndent) break;
      const lineEnd = this.lineEnd(lineFirst);
      if (lineEnd === text.length) throw GIVE_UP; // no final newline
      end = line = lineEnd + 1;
    }
    // Every line loses the content's indentation; a blank line (no deeper than it) all of its spaces.
    const body = dropLineIndent(text.slice(first, end), contentIndent);
    const value = strip ? body.slice(0, -1) : body;
    this.next = end;
    return finish(newScalar(value), value, 'BLOCK_LITERAL', start, end, end);
  }

  /** A block sequence: items start with `-` at `indent`. */
  private blockSeq(start: number, indent: number): YAMLSeq {
    const seq = newSeq();
    let dash = start;
    for (;;) {
      const itemStart = this.skipSpaces(dash + 1);
      let item: Node;
      let key: Scalar | undefined;
      if ((itemStart >= this.text.length || this.text.charCodeAt(itemStart) === NEWLINE)) {
        const below = this.nextContent(itemStart >= this.text.length ? itemStart : itemStart + 1);
        if (below <= indent) throw GIVE_UP; // an empty item
        item = this.blockNode(this.contentLine + below, below);
      } else if (this.isSeqItem(itemStart) || this.text.charCodeAt(itemStart) === HASH) {
        throw GIVE_UP;
      } else if ((key = this.key(itemStart)) !== undefined) {
        // `- name: x`: a mapping whose keys sit at the first key's column.
        item = this.blockMap(itemStart, itemStart - (this.text.lastIndexOf('\n', itemStart) + 1), key);
      } else {
        item = this.inlineValue(itemStart, indent);
      }
      seq.items.push(item);
      const following = this.nextContent(this.next);
      const nextDash = this.contentLine + indent;
      if (following < indent || (following === indent && !this.isSeqItem(nextDash))) {
        const end = item.range![2];
        seq.range = [start, end, end];
        return seq;
      }
      if (following > indent) throw GIVE_UP;
      dash = nextDash;
    }
  }
}

/**
 * `text.replace(new RegExp(`^ {0,${max}}`, 'gm'), '')`: up to `max` spaces off the start of
 * every line, a line starting after any of JS's line terminators as `^` does under `m`.
 * Not the regex: it was built and compiled per block scalar (cold-start cost, docs/benchmarks.md).
 * Line by line with native searches, not character by character: a loop of thousands of
 * steps gets compiled by TurboFan (on-stack replacement), which cost the real render ~10 ms of CPU.
 */
export function dropLineIndent(text: string, max: number): string {
  // Lines end at LF in rendered YAML; CR, U+2028 and U+2029 end lines for `^` too, and are looked for only when present.
  const otherTerminators = text.includes('\r') || text.includes('\u2028') || text.includes('\u2029');
  const indent = ' '.repeat(max);
  const parts: string[] = [];
  let line = 0;
  for (;;) {
    // A content line starts with the whole indentation: one native comparison; a blank or shallower line is counted.
    let from = line;
    if (text.startsWith(indent, line)) from += max;
    else while (from - line < max && text.charCodeAt(from) === 0x20) from++;
    const next = otherTerminators ? nextLineTerminator(text, from) : text.indexOf('\n', from);
    if (next === -1) {
      parts.push(text.slice(from));
      return parts.join('');
    }
    parts.push(text.slice(from, next + 1));
    line = next + 1;
  }
}

/** The first of JS's line terminators at or after `from`; -1 when none. */
function nextLineTerminator(text: string, from: number): number {
  let first = -1;
  for (const terminator of ['\n', '\r', '\u2028', '\u2029']) {
    const at = text.indexOf(terminator, from);
    if (at !== -1 && (first === -1 || at < first)) first = at;
  }
  return first;
}

const SPACES = / */y;

/** The value of a node this parser built, as `yaml`'s toJS() gives it (no aliases, no merges, string keys). */
function toJS(node: unknown): unknown {
  if (node instanceof Scalar) return node.value;
  if (node instanceof YAMLSeq) return node.items.map(toJS);
  // Indexed loops: a short run is interpreted, where for-of allocates an iterator result per step.
  const items = (node as YAMLMap<Scalar, unknown>).items;
  const object: Record<string, unknown> = {};
  for (let i = 0; i < items.length; i++) object[items[i]!.key.value as string] = toJS(items[i]!.value);
  return object;
}

/** The document of `text` when this parser reads all of it, else undefined (then `yaml` must). */
export function parseSimpleDocument(text: string): ParsedDocument | undefined {
  try {
    return new Reader(text).parseDocument();
  } catch (error) {
    if (error === GIVE_UP) return undefined;
    throw error;
  }
}
