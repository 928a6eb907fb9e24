/**
 * A plain value (what JSON holds) written whole as block YAML that go-yaml
 * (Helm, kubectl, the API server), the `yaml` package and PyYAML all read back
 * as exactly that value. For an object a door writes anew (`vram-preflight
 * admit`'s pod as the webhook lets it in), not for a render, which edits the
 * text it was given (./edit.ts).
 *
 * A string is written plain only where every one of those readers takes it
 * for that string (not `yes`, `on`, `1_000`, `0.9` or `~`, which go-yaml
 * reads as a bool, a number or null); a text of several lines as a literal
 * block when it needs no escape (a wrapped start's script reads as a script);
 * anything else double-quoted with every character a reader could take for a
 * line break or drop escaped (quoteYamlString: NEL, LS and PS are line breaks
 * to go-yaml). Sequences sit at their key's indentation, as kubectl writes them.
 */
import { goYamlPlainType } from './go-yaml.js';
import { quoteYamlString } from './edit.js';
import { isAsciiDigit } from '../char-classes.js';

export function writeYaml(value: unknown): string {
  if (isBlock(value)) return `${blockLines(value, 0).join('\n')}\n`;
  const literal = literalBlock(value);
  return literal ? `${literal.header}\n${literal.lines.map((line) => (line === '' ? '' : `  ${line}`)).join('\n')}\n` : `${scalar(value)}\n`;
}

/** A non-empty list or mapping: written over lines of its own. */
function isBlock(value: unknown): value is object {
  if (Array.isArray(value)) return value.length > 0;
  return typeof value === 'object' && value !== null && Object.keys(value).length > 0;
}

function blockLines(value: object, indent: number): string[] {
  const pad = ' '.repeat(indent);
  const out: string[] = [];
  const entries: [string | undefined, unknown][] = Array.isArray(value) ? value.map((item) => [undefined, item]) : Object.entries(value);
  for (const [key, item] of entries) {
    // A list item's `- ` stands where a mapping's key would; what follows it is indented past it.
    const head = key === undefined ? `${pad}- ` : `${pad}${text(key, true)}:`;
    if (isBlock(item)) {
      if (key === undefined) {
        const inner = blockLines(item, indent + 2);
        out.push(`${head}${inner[0]!.slice(indent + 2)}`, ...inner.slice(1));
      } else out.push(head, ...blockLines(item, Array.isArray(item) ? indent : indent + 2));
      continue;
    }
    const literal = literalBlock(item);
    const space = key === undefined ? '' : ' ';
    if (literal) out.push(`${head}${space}${literal.header}`, ...literal.lines.map((line) => (line === '' ? '' : `${pad}  ${line}`)));
    else out.push(`${head}${space}${scalar(item)}`);
  }
  return out;
}

function scalar(value: unknown): string {
  if (value === null || value === undefined) return 'null';
  if (typeof value === 'string') return text(value, false);
  if (typeof value === 'number') return Number.isNaN(value) ? '.nan' : value === Infinity ? '.inf' : value === -Infinity ? '-.inf' : String(value);
  if (typeof value === 'boolean' || typeof value === 'bigint') return String(value);
  if (Array.isArray(value)) return '[]';
  return '{}';
}

function text(value: string, isKey: boolean): string {
  return plainIsSafe(value, isKey) ? value : quoteYamlString(value);
}

/**
 * Whether every reader takes `value` written plain for this string: letters,
 * digits and `._/@%+=,~-` (and `:` inside a value, and single spaces between
 * words), starting with a letter, `_` or `/` (or `-` before a letter or `-`:
 * a flag), never what go-yaml resolves to another type. Anything else is
 * quoted: quoting more than needed costs nothing.
 */
export function plainIsSafe(value: string, isKey: boolean): boolean {
  if (value === '' || value.endsWith(' ') || value.includes('  ')) return false;
  const first = value.charCodeAt(0);
  const second = value.charCodeAt(1);
  const letter = (c: number): boolean => (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a);
  if (!(letter(first) || first === 0x5f || first === 0x2f || (first === 0x2d && (letter(second) || second === 0x2d)))) return false;
  for (let i = 0; i < value.length; i++) {
    const c = value.charCodeAt(i);
    if (letter(c) || isAsciiDigit(c) || '._/@%+=,~-'.includes(value[i]!) || c === 0x20) continue;
    if (c === 0x3a && !isKey && value.charCodeAt(i + 1) !== 0x20 && i + 1 < value.length) continue;
    return false;
  }
  return goYamlPlainType(value) === 'str';
}

/** No character a block scalar cannot hold as it is: the control characters but tab and line feed, C1 (NEL), LS, PS, BOM, lone surrogates, U+FFFE/U+FFFF. */
function printableInBlock(body: string): boolean {
  for (let i = 0; i < body.length; i++) {
    const c = body.charCodeAt(i);
    if (c === 0x0a || c === 0x09) continue;
    if (c < 0x20 || (c >= 0x7f && c <= 0x9f) || c === 0x2028 || c === 0x2029 || c === 0xfeff || c === 0xfffe || c === 0xffff) return false;
    if (c >= 0xd800 && c <= 0xdbff && i + 1 < body.length && body.charCodeAt(i + 1) >= 0xdc00 && body.charCodeAt(i + 1) <= 0xdfff) {
      i++;
      continue;
    }
    if (c >= 0xd800 && c <= 0xdfff) return false;
  }
  return true;
}

/** A text of several lines that reads back exactly from a literal block (no escape needed, no leading blank that would set the indentation). */
function literalBlock(value: unknown): { header: string; lines: string[] } | undefined {
  if (typeof value !== 'string' || !value.includes('\n')) return undefined;
  const body = value.replace(/\n+$/, '');
  if (body === '' || body.startsWith(' ') || body.startsWith('\t') || body.startsWith('\n') || !printableInBlock(body)) return undefined;
  const trailing = value.length - body.length;
  const chomp = trailing === 0 ? '-' : trailing === 1 ? '' : '+';
  const lines = body.split('\n');
  // Kept newlines past the first are empty lines of the block.
  for (let i = 1; i < trailing; i++) lines.push('');
  return { header: `|${chomp}`, lines };
}
