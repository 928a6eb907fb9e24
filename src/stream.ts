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

export function splitStream(stream: string): Chunk[] {
  const chunks: Chunk[] = [];
  let chunkStart = 0;
  for (let at = stream.indexOf('\n---'); at !== -1; at = stream.indexOf('\n---', at + 1)) {
    const after = stream.charCodeAt(at + 4);
    // NaN: the stream ends right after `---`.
    if (!(Number.isNaN(after) || after === 0x20 || after === 0x09 || after === 0x0d || after === 0x0a)) continue;
    const lineStart = at + 1;
    chunks.push({ text: stream.slice(chunkStart, lineStart), offset: chunkStart });
    chunkStart = lineStart;
  }
  chunks.push({ text: stream.slice(chunkStart), offset: chunkStart });
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

  constructor(private readonly text: string) {}

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
    for (let i = this.text.indexOf('\n'); i !== -1; i = this.text.indexOf('\n', i + 1)) starts.push(i + 1);
    return starts;
  }
}
