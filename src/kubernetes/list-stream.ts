/**
 * A Kubernetes List answer (`{"kind": "PodList", "metadata": {...},
 * "items": [...]}`) read as it streams in, one item at a time: each item's
 * text is collected until the item is complete, parsed alone, and handed
 * out, so that the reader holds one item, never the page (a page of 500 pods
 * of 1.4 MB is 700 MB of JSON, and several times that parsed). The other
 * members of the object (kind, metadata with its `continue` token) are
 * parsed whole; they are small, and each is bounded too.
 *
 * The bytes are decoded as UTF-8 as they come (a character cut between two
 * chunks is joined), and strings, most of a pod's text, are skipped by
 * searching for their closing quote, not character by character. Sizes are
 * counted in characters of JSON (a byte each for the ASCII that Kubernetes
 * objects are mostly made of).
 *
 * Only what JSON allows is taken: an answer that is not one JSON object, an
 * `items` that is not an array (or null), or an item over the limit stops the
 * read with the reason.
 */
import { StringDecoder } from 'node:string_decoder';

const QUOTE = 0x22;
const OPEN_BRACE = 0x7b;
const CLOSE_BRACE = 0x7d;
const OPEN_BRACKET = 0x5b;
const CLOSE_BRACKET = 0x5d;
const COMMA = 0x2c;
const COLON = 0x3a;

const isSpace = (code: number): boolean => code === 0x20 || code === 0x0a || code === 0x0d || code === 0x09;

/** The answer is not a List as JSON writes one, or an item is over its limit. */
export class ListStreamError extends Error {}

/** Where the scanner is in the top-level object. */
type State =
  | 'start' // before the object's `{`
  | 'key-or-end' // after `{` or `,`: a member's key, or `}`
  | 'colon' // after a key
  | 'value' // after `:`: the member's value starts
  | 'next' // after a member: `,` or `}`
  | 'items-next' // inside `items`: an item, `,` or `]`
  | 'done'; // after the closing `}`

/** The text of one JSON value (or key) being collected, and where its nesting is. */
interface Value {
  parts: string[];
  size: number;
  /** Its first character was seen. */
  started: boolean;
  /** Open braces and brackets, outside strings. */
  depth: number;
  inString: boolean;
  /** The last character seen was a backslash inside a string. */
  escaped: boolean;
  /** A number, true, false or null: it ends at the first character that cannot be part of it. */
  scalar: boolean;
  /** A key of the top-level object. */
  key: boolean;
  /** An item of `items`, or the value of another member (by its key). */
  member: string | undefined;
  /** An `items` that is not an array, read as a value: it must be null. */
  itemsOtherwise: boolean;
  limit: number;
}

export class ListScanner {
  private readonly decoder = new StringDecoder('utf8');
  private state: State = 'start';
  private value: Value | undefined;
  private keyText = '';
  /** Members other than `items`, parsed. */
  readonly rest: Record<string, unknown> = {};
  private itemCount = 0;
  /** Which decoded chunk is being scanned (a count). */
  private textId = 0;
  /** The next backslash of that chunk, at or after where it was last looked for (-1: none left). */
  private backslash = { textId: -1, at: -1 };

  constructor(
    /** Largest item, in characters of JSON. */
    private readonly maxItemBytes: number,
    /** Largest other member (metadata), in characters of JSON. */
    private readonly maxOtherBytes = 1 << 20,
  ) {}

  /** Items completed by this chunk, parsed, in order. */
  push(chunk: Buffer): unknown[] {
    const items: unknown[] = [];
    const text = this.decoder.write(chunk);
    this.textId++;
    let i = 0;
    const n = text.length;
    while (i < n) {
      if (this.value) {
        i = this.collect(this.value, text, i);
        if (this.complete(this.value)) this.finish(this.value, items);
        continue;
      }
      const code = text.charCodeAt(i);
      if (isSpace(code)) {
        i++;
        continue;
      }
      switch (this.state) {
        case 'start':
          if (code !== OPEN_BRACE) throw new ListStreamError('the answer is not a JSON object');
          this.state = 'key-or-end';
          i++;
          break;
        case 'key-or-end':
          if (code === CLOSE_BRACE) {
            this.state = 'done';
            i++;
          } else if (code === QUOTE) {
            this.value = this.newValue(undefined, 4096, true);
          } else throw new ListStreamError('the answer is not valid JSON (a key was expected)');
          break;
        case 'colon':
          if (code !== COLON) throw new ListStreamError('the answer is not valid JSON (":" was expected)');
          this.state = 'value';
          i++;
          break;
        case 'value':
          if (this.keyText === 'items' && code === OPEN_BRACKET) {
            this.state = 'items-next';
            i++;
          } else {
            // `"items": null` (Go's empty slice that was never made) is read as a value, and must be null.
            const items = this.keyText === 'items';
            this.value = this.newValue(this.keyText, items ? 16 : this.maxOtherBytes);
            this.value.itemsOtherwise = items;
          }
          break;
        case 'next':
          if (code === COMMA) this.state = 'key-or-end';
          else if (code === CLOSE_BRACE) this.state = 'done';
          else throw new ListStreamError('the answer is not valid JSON ("," or "}" was expected)');
          i++;
          break;
        case 'items-next':
          if (code === CLOSE_BRACKET) {
            this.state = 'next';
            i++;
          } else if (code === COMMA && this.itemCount > 0) {
            i++;
          } else {
            this.value = this.newValue(undefined, this.maxItemBytes);
          }
          break;
        case 'done':
          throw new ListStreamError('the answer has more after its JSON object');
      }
    }
    return items;
  }

  /** The object without its items, once the whole answer was read. */
  end(): Record<string, unknown> {
    const tail = this.decoder.end();
    if (tail !== '') this.push(Buffer.from(tail, 'utf8'));
    // A number at the very end of the answer ends with it.
    if (this.value?.scalar && this.value.depth === 0) {
      this.value.scalar = false;
      this.finish(this.value, []);
    }
    if (this.state !== 'done' || this.value) throw new ListStreamError('the answer ended before its JSON object did');
    return this.rest;
  }

  private newValue(member: string | undefined, limit: number, key = false): Value {
    return { parts: [], size: 0, started: false, depth: 0, inString: false, escaped: false, scalar: false, key, member, itemsOtherwise: false, limit };
  }

  /** Text of a value up to where it ends (or the text does). Returns where it stopped. */
  private collect(value: Value, text: string, from: number): number {
    let i = from;
    const n = text.length;
    if (!value.started) {
      value.started = true;
      const first = text.charCodeAt(i);
      if (first === OPEN_BRACE || first === OPEN_BRACKET) value.depth = 1;
      else if (first === QUOTE) value.inString = true;
      else value.scalar = true;
      i++;
    }
    while (i < n && !this.complete(value)) {
      if (value.inString) {
        if (value.escaped) {
          value.escaped = false;
          i++;
          continue;
        }
        const quote = text.indexOf('"', i);
        const backslash = this.nextBackslash(text, i);
        if (backslash !== -1 && (quote === -1 || backslash < quote)) {
          // An escape: the character after it is taken as it is, whatever it is.
          value.escaped = true;
          i = backslash + 1;
          continue;
        }
        if (quote === -1) {
          i = n;
          break;
        }
        value.inString = false;
        i = quote + 1;
        continue;
      }
      const code = text.charCodeAt(i);
      if (value.scalar) {
        if (isSpace(code) || code === COMMA || code === CLOSE_BRACE || code === CLOSE_BRACKET) {
          value.scalar = false;
          break;
        }
        i++;
        continue;
      }
      if (code === QUOTE) value.inString = true;
      else if (code === OPEN_BRACE || code === OPEN_BRACKET) value.depth++;
      else if (code === CLOSE_BRACE || code === CLOSE_BRACKET) value.depth--;
      i++;
    }
    this.append(value, text, from, i);
    return i;
  }

  /** The first backslash at or after `from`, remembered per text so that a text without one is searched once. */
  private nextBackslash(text: string, from: number): number {
    const b = this.backslash;
    if (b.textId !== this.textId || (b.at !== -1 && b.at < from)) {
      b.textId = this.textId;
      b.at = text.indexOf('\\', from);
    }
    return b.at;
  }

  private complete(value: Value): boolean {
    return value.started && value.depth === 0 && !value.inString && !value.scalar;
  }

  private append(value: Value, text: string, from: number, to: number): void {
    if (to === from) return;
    value.size += to - from;
    if (value.size > value.limit) {
      throw new ListStreamError(value.key ? `a key of the answer is longer than ${describeBytes(value.limit)}` : value.member === undefined ? `item ${this.itemCount + 1} of the list is larger than ${describeBytes(value.limit)}` : `the answer's "${value.member}" is larger than ${describeBytes(value.limit)}`);
    }
    value.parts.push(from === 0 && to === text.length ? text : text.slice(from, to));
  }

  private finish(value: Value, items: unknown[]): void {
    this.value = undefined;
    const text = value.parts.length === 1 ? value.parts[0]! : value.parts.join('');
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      throw new ListStreamError(value.key ? 'a key of the answer is not valid JSON' : value.member === undefined ? `item ${this.itemCount + 1} of the list is not valid JSON` : `the answer's "${value.member}" is not valid JSON`);
    }
    if (value.key) {
      this.keyText = parsed as string;
      this.state = 'colon';
    } else if (value.member === undefined) {
      this.itemCount++;
      items.push(parsed);
      this.state = 'items-next';
    } else {
      if (value.itemsOtherwise) {
        if (parsed !== null) throw new ListStreamError('the answer\'s "items" is not an array');
      } else this.rest[value.member] = parsed;
      this.state = 'next';
    }
  }
}

export function describeBytes(bytes: number): string {
  return bytes >= 1 << 20 ? `${Math.round((bytes / (1 << 20)) * 10) / 10} MiB` : `${Math.round(bytes / 1024)} KiB`;
}
