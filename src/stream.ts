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

/** 1-based line and column of an offset in the stream (used for messages only). */
export function lineAndColumn(stream: string, offset: number): { line: number; col: number } {
  let line = 1;
  let lineStart = 0;
  for (let i = stream.indexOf('\n'); i !== -1 && i < offset; i = stream.indexOf('\n', i + 1)) {
    line += 1;
    lineStart = i + 1;
  }
  return { line, col: offset - lineStart + 1 };
}
