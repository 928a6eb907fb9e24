/**
 * The rewrite: a surgical text edit of one container's `command` and `args`.
 * Only the bytes of those two entries change; every other byte of the
 * document, comments, quoting and Helm's odd indentation included, stays.
 */
import { isAlias, isScalar, isSeq, type Node, type Pair, type YAMLMap } from 'yaml';
import { goYamlPlainType, goYamlQuotedValue, hasYaml11Break } from './go-yaml.js';
import { PreflightError, type ErrorDetails } from '../errors.js';
import { effectivePair, keyName, resolveAlias, type ParsedDocument } from './nodes.js';
import { isLineTerminator } from '../char-classes.js';

export interface TextEdit {
  start: number;
  end: number;
  text: string;
}

/** Applies non-overlapping edits to a text in one pass (thousands of edits in one document stay linear). */
export function applyEdits(text: string, edits: readonly TextEdit[]): string {
  const sorted = [...edits].sort((a, b) => a.start - b.start || a.end - b.end);
  const parts: string[] = [];
  let at = 0;
  for (const edit of sorted) {
    parts.push(text.slice(at, edit.start), edit.text);
    at = edit.end;
  }
  parts.push(text.slice(at));
  return parts.join('');
}

/**
 * A YAML double-quoted string that any YAML 1.1 or 1.2 reader (go-yaml, the
 * `yaml` package, PyYAML) reads back as exactly `value`: every character that
 * is not printable, or that YAML 1.1 treats as a line break, is escaped.
 */
export function quoteYamlString(value: string): string {
  // Most items need no escape: a scan of the code units instead of a walk over the characters.
  if (nothingToEscape(value)) return `"${value}"`;
  let out = '"';
  for (const ch of value) {
    const code = ch.codePointAt(0)!;
    if (ch === '"') out += '\\"';
    else if (ch === '\\') out += '\\\\';
    else if (ch === '\n') out += '\\n';
    else if (ch === '\t') out += '\\t';
    else if (code < 0x20 || (code >= 0x7f && code <= 0x9f) || code === 0x2028 || code === 0x2029 || code === 0xfeff || (code >= 0xd800 && code <= 0xdfff) || code === 0xfffe || code === 0xffff) {
      out += `\\u${code.toString(16).padStart(4, '0')}`;
    } else out += ch;
  }
  return `${out}"`;
}

const NOTHING_TO_ESCAPE = /^[^"\\\x00-\x1f\x7f-\x9f\u2028\u2029\ufeff\ud800-\udfff\ufffe\uffff]*$/;
const LONG_VALUE = 512;

/**
 * `/^[^"\\\x00-\x1f\x7f-\x9f\u2028\u2029\ufeff\ud800-\udfff\ufffe\uffff]*$/.test(value)`:
 * no code unit quoteYamlString escapes. A loop, not the regex: a render runs it in a fresh
 * process, where each regex costs its compilation on the first runs (docs/benchmarks.md).
 */
export function nothingToEscape(value: string): boolean {
  // A long value (a shell script) is left to the regex: a loop of thousands of steps gets
  // compiled by TurboFan (on-stack replacement: ~5 ms of CPU in a fresh process), the regex ~0.2 ms.
  if (value.length > LONG_VALUE) return NOTHING_TO_ESCAPE.test(value);
  for (let i = 0; i < value.length; i++) {
    const c = value.charCodeAt(i);
    if (c < 0x20 || c === 0x22 || c === 0x5c || (c >= 0x7f && c <= 0x9f)) return false;
    if (c >= 0x2028 && (c === 0x2028 || c === 0x2029 || c === 0xfeff || (c >= 0xd800 && c <= 0xdfff) || c === 0xfffe || c === 0xffff)) return false;
  }
  return true;
}

/** An anchor (`&name `) kept on the item it labelled, so aliases elsewhere still resolve to the same value. */
function anchorOf(anchors: readonly (string | undefined)[] | undefined, i: number): string {
  const name = anchors?.[i];
  return name === undefined ? '' : `&${name} `;
}

/** `/^[ \t]/.test(text)`, without a regex's cold-start cost in a render (docs/benchmarks.md). */
export function startsWithSpaceOrTab(text: string): boolean {
  const c = text.charCodeAt(0);
  return c === 0x20 || c === 0x09;
}

/** A literal block scalar item, so the script reads as a script in the rendered manifest. */
function blockScalarItem(value: string, itemIndent: string): string[] {
  const body = value.endsWith('\n') ? value.slice(0, -1) : value;
  // A literal block cannot hold a CR, nor start with indentation it would take as its own.
  if (body === '' || body.includes('\r') || startsWithSpaceOrTab(body)) return [`${itemIndent}- ${quoteYamlString(value)}`];
  const chomp = !value.endsWith('\n') ? '-' : value.endsWith('\n\n') ? '+' : '';
  const indent = `${itemIndent}  `;
  const lines = body.split('\n');
  for (let i = 0; i < lines.length; i++) if (lines[i] !== '') lines[i] = `${indent}${lines[i]}`;
  lines.unshift(`${itemIndent}- |${chomp}`);
  return lines;
}

/** Anchors to keep, by item index, for the new `command` and `args`. */
export interface KeptAnchors {
  command?: readonly (string | undefined)[];
  args?: readonly (string | undefined)[];
}

/** `command:` and `args:` entries (no args entry when `args` is null), one line per item, at the container's key indentation. */
function renderStart(command: readonly string[], args: readonly string[] | null, keyIndent: string, nl: string, anchors: KeptAnchors = {}): string {
  const itemIndent = `${keyIndent}  `;
  const lines = ['command:', ...command.map((item, i) => `${itemIndent}- ${anchorOf(anchors.command, i)}${quoteYamlString(item)}`)];
  if (args !== null) lines.push(`${keyIndent}args:`);
  (args ?? []).forEach((item, i) => {
    if (i === 0 && item.includes('\n') && anchors.args?.[0] === undefined) lines.push(...blockScalarItem(item, itemIndent));
    else lines.push(`${itemIndent}- ${anchorOf(anchors.args, i)}${quoteYamlString(item)}`);
  });
  return lines.join(nl);
}

function lineStart(text: string, offset: number): number {
  return text.lastIndexOf('\n', offset - 1) + 1;
}

/** Just past the end of the line holding `offset` (its newline included), or `offset` if a line starts there. */
function pastLineEnd(text: string, offset: number): number {
  if (offset > 0 && text[offset - 1] === '\n') return offset;
  const newline = text.indexOf('\n', offset);
  return newline === -1 ? text.length : newline + 1;
}

/**
 * Where a pair starts in the text: its key, or the `?` of an explicit key
 * (`? command` / `: [...]`), which belongs to the pair too.
 */
function pairStart(text: string, pair: Pair): number {
  const keyStart = (pair.key as Node).range![0];
  const before = text.slice(lineStart(text, keyStart), keyStart);
  const explicit = explicitKeyMark(before);
  return explicit === -1 ? keyStart : keyStart - before.length + explicit;
}

/**
 * `/\?[ \t]*$/.exec(before)?.index ?? -1`: the `?` that only spaces and tabs follow. A scan,
 * not the regex (cold-start cost of a regex in a render's fresh process; docs/benchmarks.md).
 */
export function explicitKeyMark(before: string): number {
  let i = before.length;
  while (i > 0 && (before.charCodeAt(i - 1) === 0x20 || before.charCodeAt(i - 1) === 0x09)) i--;
  return before.charCodeAt(i - 1) === 0x3f ? i - 1 : -1;
}

/**
 * `/^[ \t]*(#.*)?\r?\n?$/.test(rest)`: the rest of a line holds nothing but spaces, tabs and
 * a comment. A scan, not the regex (cold-start cost; docs/benchmarks.md).
 */
export function onlyCommentToLineEnd(rest: string): boolean {
  let i = 0;
  while (rest.charCodeAt(i) === 0x20 || rest.charCodeAt(i) === 0x09) i++;
  // `.` stops at any line terminator.
  if (rest.charCodeAt(i) === 0x23) while (i < rest.length && !isLineTerminator(rest.charCodeAt(i))) i++;
  if (rest.charCodeAt(i) === 0x0d) i++;
  if (rest.charCodeAt(i) === 0x0a) i++;
  return i === rest.length;
}

function valueEnd(pair: Pair): number {
  const value = pair.value as Node | null;
  if (value?.range) return value.range[1];
  return (pair.key as Node).range![1];
}

/**
 * Edits that replace the container's `command`/`args` (or add them) with the
 * given lists. `text` is the text the node ranges refer to.
 */
export function startEdits(
  text: string,
  container: YAMLMap,
  command: readonly string[],
  args: readonly string[] | null,
  nl: string,
  context: ErrorDetails,
  anchors: KeptAnchors = {},
): TextEdit[] {
  const first = container.items[0];
  if (container.flow || !first || !(first.key as Node | null)?.range) {
    throw new PreflightError('UNSUPPORTED_LAYOUT', 'the container is written as a flow mapping ({...}), which vram-preflight does not edit', {
      ...context,
      fix: 'write the container as a block mapping (one key per line), as helm and kubectl do',
    });
  }
  const firstStart = pairStart(text, first);
  const keyIndent = ' '.repeat(firstStart - lineStart(text, firstStart));
  const rendered = renderStart(command, args, keyIndent, nl, anchors);
  const existing = container.items
    .filter((pair) => keyName(pair) === 'command' || keyName(pair) === 'args')
    .sort((a, b) => (a.key as Node).range![0] - (b.key as Node).range![0]);

  if (existing.length === 0) {
    return [{ start: firstStart, end: firstStart, text: `${rendered}${nl}${keyIndent}` }];
  }
  return existing.map((pair, i) => {
    const keyStart = pairStart(text, pair);
    const end = pastLineEnd(text, valueEnd(pair));
    const rest = text.slice(valueEnd(pair), end);
    if (!onlyCommentToLineEnd(rest)) {
      throw new PreflightError('UNSUPPORTED_LAYOUT', `the container's ${keyName(pair)} is followed by other content on its last line`, {
        ...context,
        fix: 'put command and args on lines of their own',
      });
    }
    const endsWithNewline = text[end - 1] === '\n';
    if (i === 0) return { start: keyStart, end, text: endsWithNewline ? `${rendered}${nl}` : rendered };
    const start = lineStart(text, keyStart);
    if (text.slice(start, keyStart).trim() !== '') {
      throw new PreflightError('UNSUPPORTED_LAYOUT', `the container's ${keyName(pair)} does not start a line of its own`, { ...context, fix: 'put command and args on lines of their own' });
    }
    return { start, end, text: '' };
  });
}

export interface ReadArgv {
  items: string[] | null;
  /** Anchors on the items, when the list is written in this container (its text is what the edit replaces). */
  anchors?: (string | undefined)[];
}

/**
 * A container's `command` or `args` as the cluster reads them (last duplicate
 * wins, merge keys and aliases followed); null when absent, null or empty
 * (Kubernetes: not given).
 */
export function readArgv(container: YAMLMap, key: 'command' | 'args', doc: ParsedDocument, text: string, context: ErrorDetails): ReadArgv {
  const found = effectivePair(container, key, doc);
  const node = found ? (resolveAlias(found.pair.value, doc) as Node | null | undefined) : undefined;
  if (node === undefined || node === null) return { items: null };
  if (isScalar(node) && node.value === null) return { items: null };
  if (!isSeq(node)) {
    throw new PreflightError('BAD_CONTAINER', `the container's ${key} is not a list`, { ...context, fix: `write ${key} as a list of strings` });
  }
  const anchors = found!.own && !isAlias(found!.pair.value) ? node.items.map((item) => (item as Node).anchor ?? undefined) : undefined;
  const items = node.items.map((raw, i) => {
    const item = resolveAlias(raw, doc);
    if (isScalar(item)) {
      // go-yaml (Helm, kubectl, the API server) decodes !!binary and reads !!int, !!float… as what they
      // name, not as the text we hold: only !!str (or no tag) is the string a reader of the text sees.
      if (item.tag && item.tag !== STRING_TAG) {
        throw new PreflightError('BAD_CONTAINER', `${key}[${i}] of the container is tagged ${shortTag(item.tag)}, so it is not the string written there`, {
          ...context,
          fix: `drop the tag and write ${key}[${i}] as a quoted string`,
        });
      }
      // In a flow sequence go-yaml and libyaml read `?x` as an explicit key (the mapping {x: null});
      // yaml 1.2 and our reader read the string "?x". Helm's reading is the one that runs.
      if (item.type === 'PLAIN' && item.range && text[item.range[0]] === '?' && (node.flow || raw !== item)) {
        throw new PreflightError('BAD_CONTAINER', `${key}[${i}] of the container is not a string: in a flow sequence go-yaml (Helm, kubectl) reads ${quoteText(text.slice(item.range[0], item.range[1]))} as a mapping (? starts an explicit key)`, {
          ...context,
          fix: `quote ${key}[${i}]`,
        });
      }
      const source = item.range ? text.slice(item.range[0], item.range[1]) : undefined;
      // NEL, LS and PS are line breaks to go-yaml (Helm, kubectl), text to YAML 1.2.
      if (source !== undefined && hasYaml11Break(source)) {
        const quoted = item.type === 'QUOTE_DOUBLE' || item.type === 'QUOTE_SINGLE' ? goYamlQuotedValue(source) : undefined;
        if (quoted !== undefined) return quoted;
        throw new PreflightError('BAD_CONTAINER', `${key}[${i}] of the container holds a raw NEL, LS or PS (U+0085, U+2028, U+2029), which go-yaml (Helm, kubectl) reads as a line break${item.type === 'PLAIN' ? ' that ends the scalar there' : ''}`, {
          ...context,
          fix: `write ${key}[${i}] as a double-quoted string with the character escaped (\\N, \\L, \\P), or without it`,
        });
      }
      if (item.type === 'PLAIN' && !item.tag) {
        // go-yaml resolves a plain scalar by YAML 1.1's rules (sigs.k8s.io/yaml's goyaml.v2):
        // 8000, true, yes, 0x10, 1e3, ~ are no strings there, and the API server refuses them in a string list.
        const plain = typeof item.value === 'string' ? item.value : (source ?? '');
        const type = goYamlPlainType(plain);
        if (type !== 'str') {
          throw new PreflightError('BAD_CONTAINER', `${key}[${i}] of the container is the plain ${JSON.stringify(plain)}, which go-yaml (Helm, kubectl) reads as ${type === 'int' ? 'an integer' : type === 'float' ? 'a float' : type === 'bool' ? 'a boolean' : 'null'}, not a string: Kubernetes refuses it in ${key}`, {
            ...context,
            fix: `quote ${key}[${i}] ("${plain}")`,
          });
        }
        return plain;
      }
      if (typeof item.value === 'string') return item.value;
    }
    throw new PreflightError('BAD_CONTAINER', `${key}[${i}] of the container is not a string`, { ...context, fix: `quote ${key}[${i}]` });
  });
  return items.length === 0 ? { items: null } : { items, anchors };
}

const STRING_TAG = 'tag:yaml.org,2002:str';

/** `!!binary` for yaml.org's own tags, the tag as written otherwise. */
function shortTag(tag: string): string {
  return tag.startsWith('tag:yaml.org,2002:') ? `!!${tag.slice('tag:yaml.org,2002:'.length)}` : tag;
}

function quoteText(text: string): string {
  return `"${text}"`;
}
