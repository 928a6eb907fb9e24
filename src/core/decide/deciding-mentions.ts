/**
 * The render's sharper candidate test (issue 18 §7): in a document that has
 * containers, a mention of a target word makes it a candidate only where it
 * could decide a container. A Job named `fixture-vllm-seed`, labelled
 * `…/model: fixture-vllm`, mounting the claim `fixture-vllm-weights` and
 * running python:3.12-slim mentions vLLM only where no decision reads it:
 * parsing it would only add a "skip" to the report.
 *
 * The rule is a line test and errs towards counting. A mention does not count
 * only on a line that is, in block style, a simple `key: plain-scalar` (or
 * `- key: plain-scalar`, or `key:` alone) whose key is not `image`, `command`
 * or `args` and holds no target word itself; and only where that line is not
 * inside a block scalar, a quoted scalar or a flow collection that an earlier
 * line opened. Everything else counts: a sequence item (`- vllm`,
 * `- --backend=vllm`), a block scalar's lines, flow and JSON style, quotes,
 * anchors, aliases, tags, comments, tabs, an annotation key of ours
 * (`vram-preflight.io/…`), any line this test cannot read simply.
 *
 * What decides a container and where the text of it stands (each on a line
 * that counts): the image (`image:`), the start (`command:`/`args:` and their
 * items, block scalars included), an earlier wrap (its marker sits in the
 * script's first line or in a block scalar, `vram-preflight` in the argv),
 * our annotations (their keys hold `vram-preflight`), a configured image (its
 * repository is a word). The caller keeps the old rule (any mention) for
 * documents naming a kind that explain reports without containers, and for
 * documents that pass `--gpu-memory-utilization` (the warning for a flag on
 * an image that is not vLLM's needs no vLLM word in the start).
 *
 * Pure string work, no regex: it runs only on documents that mention a word
 * and have a `containers` key, and stops at the first mention that counts.
 */

const LF = 10;
const CR = 13;
const SPACE = 32;
const TAB = 9;
const DASH = 45;
const COLON = 58;
const HASH = 35;
const DOUBLE_QUOTE = 34;
const SINGLE_QUOTE = 39;
const BACKSLASH = 92;

/** Keys whose plain value decides a container, whatever it holds. */
const DECIDING_KEYS: ReadonlySet<string> = new Set(['image', 'command', 'args']);

const isLetterOrDigit = (c: number): boolean => (c >= 97 && c <= 122) || (c >= 48 && c <= 57);
/** A key this test reads simply: `app.kubernetes.io/name`, `claimName`; lowered. */
const isKeyStart = (c: number): boolean => isLetterOrDigit(c) || c === 95; // _
const isKeyChar = (c: number): boolean => isKeyStart(c) || c === 46 || c === 47 || c === DASH; // . / -
/** A plain scalar that starts with none of YAML's indicators and holds no quote, bracket, comma, `#`, `|` or `>`. */
const isValueStart = (c: number): boolean => isKeyStart(c) || c === 46 || c === 47; // . /
const isValueChar = (c: number): boolean => isKeyChar(c) || c === SPACE || c === 61 || c === 64 || c === 43; // space = @ +

/**
 * Where the key of a simple line lies ([start, end) of `lower`), or undefined
 * when the line [from, to) is not one: indentation, an optional `- `, a key,
 * a colon, and nothing or spaces and a plain scalar up to the line's end.
 */
function simpleLineKey(lower: string, from: number, to: number): [number, number] | undefined {
  let i = from;
  while (i < to && lower.charCodeAt(i) === SPACE) i++;
  if (lower.charCodeAt(i) === DASH && lower.charCodeAt(i + 1) === SPACE) {
    i += 2;
    while (i < to && lower.charCodeAt(i) === SPACE) i++;
  }
  const keyStart = i;
  if (i >= to || !isKeyStart(lower.charCodeAt(i))) return undefined;
  while (i < to && isKeyChar(lower.charCodeAt(i))) i++;
  const keyEnd = i;
  if (lower.charCodeAt(i) !== COLON) return undefined;
  i++;
  let end = to;
  if (end > i && lower.charCodeAt(end - 1) === CR) end--;
  while (end > i && lower.charCodeAt(end - 1) === SPACE) end--;
  if (i === end) return [keyStart, keyEnd];
  if (lower.charCodeAt(i) !== SPACE) return undefined;
  while (i < end && lower.charCodeAt(i) === SPACE) i++;
  if (!isValueStart(lower.charCodeAt(i))) return undefined;
  for (; i < end; i++) {
    const c = lower.charCodeAt(i);
    if (isValueChar(c)) continue;
    // A colon inside a plain scalar, never `: ` (a nested mapping) or one that ends it.
    if (c === COLON && i + 1 < end && lower.charCodeAt(i + 1) !== SPACE) continue;
    return undefined;
  }
  return [keyStart, keyEnd];
}

/** What the lines before tell about the next one. */
interface LineState {
  /** The quote (its character code) of a quoted scalar still open at the end of the line, or 0. */
  quote: number;
  /** Flow collections (`[`, `{`) still open. */
  depth: number;
  /** The line may start a block scalar (`|` or `>` outside quotes and brackets). */
  block: boolean;
}

/** Follows quotes, brackets and block indicators along one line that is not simple; stops at a comment. */
function scanLine(lower: string, from: number, to: number, state: LineState): void {
  for (let i = from; i < to; i++) {
    const c = lower.charCodeAt(i);
    if (state.quote !== 0) {
      if (c === state.quote) state.quote = 0;
      else if (c === BACKSLASH && state.quote === DOUBLE_QUOTE) i++;
      continue;
    }
    if (c === DOUBLE_QUOTE || c === SINGLE_QUOTE) state.quote = c;
    else if (c === HASH && (i === from || lower.charCodeAt(i - 1) === SPACE || lower.charCodeAt(i - 1) === TAB)) return;
    else if (c === 91 || c === 123) state.depth++; // [ {
    else if ((c === 93 || c === 125) && state.depth > 0) state.depth--; // ] }
    else if ((c === 124 || c === 62) && state.depth === 0) state.block = true; // | >
  }
}

/** What makes a line change how the lines below are read: a quote, a flow bracket, a block scalar's indicator. */
const LINE_STATE_CHARACTERS = ['"', "'", '[', '{', '|', '>'];

/**
 * The offset of the first of LINE_STATE_CHARACTERS at or after `from` (Infinity when none), for
 * `from` that only grows: each character's next place is searched for once and kept until passed,
 * so the text is searched once in all, however many lines ask.
 */
function lineStateFinder(lower: string): (from: number) => number {
  const next = LINE_STATE_CHARACTERS.map((c) => lower.indexOf(c));
  return (from) => {
    let first = Infinity;
    for (let k = 0; k < next.length; k++) {
      if (next[k] !== -1 && next[k]! < from) next[k] = lower.indexOf(LINE_STATE_CHARACTERS[k]!, from);
      if (next[k] !== -1 && next[k]! < first) first = next[k]!;
    }
    return first;
  };
}

/** The start of every mention of `words` in `lower`, in order. */
function mentionStarts(lower: string, words: readonly string[]): number[] {
  const starts: number[] = [];
  for (const word of words) {
    for (let at = lower.indexOf(word); at !== -1; at = lower.indexOf(word, at + 1)) starts.push(at);
  }
  return starts.sort((a, b) => a - b);
}

/**
 * Whether a mention of `words` (lower case) in `lower` (a document's text,
 * lowered) sits on a line where it could decide a container (see above).
 * False when the document mentions no word at all.
 */
export function mentionMayDecide(lower: string, words: readonly string[]): boolean {
  const mentions = mentionStarts(lower, words);
  const nextStateCharacter = lineStateFinder(lower);
  const state: LineState = { quote: 0, depth: 0, block: false };
  /** Lines indented more than this belong to a block scalar an earlier line may have opened; -1: none. */
  let blockIndent = -1;
  /** The indentation of the line that opened the quote or bracket still open. */
  let flowIndent = 0;
  let next = 0;
  for (let from = 0; from < lower.length && next < mentions.length; ) {
    let to = lower.indexOf('\n', from);
    if (to === -1) to = lower.length;
    const mentioned = mentions[next]! < to;
    while (next < mentions.length && mentions[next]! < to) next++;
    // A line that mentions no word, outside any block scalar, quote or flow collection, and holds no
    // quote, bracket or block indicator, changes nothing the lines below are read by: skipped
    // unread (read, it would be a simple line, or one whose scan leaves the state as it is).
    if (!mentioned && blockIndent < 0 && state.quote === 0 && state.depth === 0 && nextStateCharacter(from) >= to) {
      from = to + 1;
      continue;
    }
    let indent = from;
    while (indent < to && lower.charCodeAt(indent) === SPACE) indent++;
    const blank = indent === to || (indent === to - 1 && lower.charCodeAt(indent) === CR);
    indent -= from;
    const line = from;
    from = to + 1;
    if (blank) continue;
    if (blockIndent >= 0) {
      // Inside (maybe) a block scalar: its lines are text of a value, whatever they look like.
      if (indent > blockIndent) {
        if (mentioned) return true;
        continue;
      }
      blockIndent = -1;
    }
    if (state.quote !== 0 || state.depth > 0) {
      // Inside a quoted scalar or a flow collection that spans lines.
      if (mentioned) return true;
      state.block = false;
      scanLine(lower, line, to, state);
      if (state.quote === 0 && state.depth === 0 && state.block) blockIndent = Math.min(flowIndent, indent);
      continue;
    }
    const key = simpleLineKey(lower, line, to);
    if (key) {
      if (mentioned) {
        const name = lower.slice(key[0], key[1]);
        if (DECIDING_KEYS.has(name) || words.some((word) => name.includes(word))) return true;
      }
      continue;
    }
    if (mentioned) return true;
    state.block = false;
    scanLine(lower, line, to, state);
    if (state.quote !== 0 || state.depth > 0) flowIndent = indent;
    else if (state.block) blockIndent = indent;
  }
  return false;
}
