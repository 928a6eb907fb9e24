/**
 * Stream splicing. A manifest stream is cut into document chunks on the text
 * alone, so that a document that needs no rewrite is never parsed and comes
 * back as the very same characters.
 *
 * YAML forbids a line that starts with `---` followed by a space or the end of
 * the line inside any scalar (the spec's c-forbidden), so such a line always
 * begins a new document: cutting there is exact, block scalars included.
 */

export interface Chunk {
  /** The chunk's text: its `---` line (if any), comments, the document(s). */
  text: string;
  /** Offset of the chunk in the stream. */
  offset: number;
}

/**
 * The stream as read: one string, or the pieces it was read in. src/cli/bin.ts
 * hands a large input over in pieces, never joined: joining 50 MB costs as
 * much CPU time as reading it, and holds the input twice.
 */
export type StreamText = string | readonly string[];

/**
 * Pieces that each end a line (but the last): a document marker can then
 * never straddle two of them. Pieces that end mid-line are joined with the
 * next (src/cli/bin.ts cuts its pieces after a newline, so they never are).
 */
function linePieces(pieces: readonly string[]): string[] {
  const out: string[] = [];
  let pending = '';
  for (const piece of pieces) {
    pending = pending === '' ? piece : pending + piece;
    if (pending.endsWith('\n')) {
      out.push(pending);
      pending = '';
    }
  }
  if (pending !== '' || out.length === 0) out.push(pending);
  return out;
}

/** A document starts at `at` (a line start) of `text`: `---` and then a space, a tab, a line end or the end of the stream. */
function startsDocument(text: string, at: number, last: boolean): boolean {
  if (!text.startsWith('---', at)) return false;
  const after = text.charCodeAt(at + 3);
  // NaN: the piece ends right after `---`; only the last one can (the others end a line).
  return Number.isNaN(after) ? last : after === 0x20 || after === 0x09 || after === 0x0d || after === 0x0a;
}

/**
 * The stream's document chunks: the same over its pieces as over their join;
 * only a chunk that spans pieces is joined.
 */
export function splitStream(stream: StreamText): Chunk[] {
  const pieces = linePieces(typeof stream === 'string' ? [stream] : stream);
  const chunks: Chunk[] = [];
  let open: string[] = []; // the current chunk's text in earlier pieces
  let openOffset = 0;
  let base = 0;
  for (const [k, piece] of pieces.entries()) {
    const last = k === pieces.length - 1;
    let from = 0; // where the current chunk's text starts in this piece
    const cut = (at: number): void => {
      open.push(piece.slice(from, at));
      chunks.push({ text: open.length === 1 ? open[0]! : open.join(''), offset: openOffset });
      open = [];
      openOffset = base + at;
      from = at;
    };
    // The piece before ended a line: this one starts one.
    if (base > 0 && startsDocument(piece, 0, last)) cut(0);
    for (let at = piece.indexOf('\n---'); at !== -1; at = piece.indexOf('\n---', at + 1)) {
      if (startsDocument(piece, at + 1, last)) cut(at + 1);
    }
    if (from < piece.length) open.push(from === 0 ? piece : piece.slice(from));
    base += piece.length;
  }
  chunks.push({ text: open.length === 1 ? open[0]! : open.join(''), offset: openOffset });
  return chunks;
}

/** The chunk's line ending, so that inserted lines match their neighbours. */
export function lineEnding(text: string): '\n' | '\r\n' {
  const newline = text.indexOf('\n');
  return newline > 0 && text[newline - 1] === '\r' ? '\r\n' : '\n';
}

/**
 * Line and column of offsets in one text, for messages. The newline table is
 * built on first use, once, so a run that reports nothing never pays for it
 * and a run that reports many positions scans the stream once.
 */
export class LineIndex {
  private lineStarts: number[] | undefined;

  constructor(private readonly text: StreamText) {}

  /** 1-based line and column of `offset`. */
  position(offset: number): { line: number; col: number } {
    const starts = (this.lineStarts ??= this.build());
    let low = 0;
    let high = starts.length - 1;
    while (low < high) {
      const mid = (low + high + 1) >> 1;
      if (starts[mid]! <= offset) low = mid;
      else high = mid - 1;
    }
    return { line: low + 1, col: offset - starts[low]! + 1 };
  }

  private build(): number[] {
    const starts = [0];
    let base = 0;
    for (const text of typeof this.text === 'string' ? [this.text] : this.text) {
      for (let i = text.indexOf('\n'); i !== -1; i = text.indexOf('\n', i + 1)) starts.push(base + i + 1);
      base += text.length;
    }
    return starts;
  }
}
