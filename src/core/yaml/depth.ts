/**
 * How deep a document nests, read from its text before any parse: the `yaml` library composes
 * a document by recursion, and a JavaScript stack runs out near 800 levels of flow nesting,
 * where go-yaml (Helm, kubectl) reads 10,000. A document deeper than MAX_NESTING is refused
 * with that reason (NESTING_TOO_DEEP), never parsed into a stack overflow reported as a syntax
 * error. An upper bound, not a parse: block levels by indentation (each `- ` one more), flow
 * levels by brackets outside quotes and comments; it may count a level too many, never one
 * too few on the layouts charts render.
 */

/** The deepest nesting vram-preflight reads: far beyond any manifest (a pod spec nests ~15), well below the stack's limit. */
export const MAX_NESTING = 512;

const QUOTE_OPENERS = new Set([' ', '\t', ':', '[', '{', ',', '-', '?']);

/**
 * The depth of `text` when it nests deeper than `limit`, else undefined. Counted first: every
 * level nestingDepth counts is a line (its block stack holds at most one entry a line), a `-`
 * (an item's dash) or a `[` or `{` (a flow level), so a text with no more of those than `limit`
 * cannot nest deeper, and is not walked character by character (a candidate document is, on
 * every render: ~4 million instructions of the vLLM chart's ~50 million own, docs/benchmarks.md).
 */
export function depthBeyond(text: string, limit: number): number | undefined {
  let bound = 1;
  for (const mark of ['\n', '-', '[', '{']) {
    for (let at = text.indexOf(mark); at !== -1 && bound <= limit; at = text.indexOf(mark, at + 1)) bound++;
  }
  if (bound <= limit) return undefined;
  const depth = nestingDepth(text);
  return depth > limit ? depth : undefined;
}

export function nestingDepth(text: string): number {
  let max = 0;
  const stack: number[] = [];
  let flow = 0;
  let quote = '';
  let blockScalarIndent = -1;
  let lineStart = 0;
  while (lineStart <= text.length) {
    let lineEnd = text.indexOf('\n', lineStart);
    if (lineEnd === -1) lineEnd = text.length;
    const line = text.slice(lineStart, lineEnd);
    lineStart = lineEnd + 1;
    let indent = 0;
    while (line[indent] === ' ') indent++;
    const blank = indent === line.length || line[indent] === '\r' || line[indent] === '#';
    if (blockScalarIndent >= 0) {
      if (blank || indent > blockScalarIndent) continue;
      blockScalarIndent = -1;
    }
    let at = indent;
    let dashes = 0;
    if (quote === '' && flow === 0) {
      if (blank) continue;
      while (stack.length && stack[stack.length - 1]! >= indent) stack.pop();
      stack.push(indent);
      while (line[at] === '-' && (line[at + 1] === ' ' || at + 1 >= line.length || line[at + 1] === '\r')) {
        dashes++;
        at += 2;
        while (line[at] === ' ') at++;
      }
      max = Math.max(max, stack.length + dashes);
    }
    let sawContent = false;
    for (let i = at; i < line.length; i++) {
      const c = line[i]!;
      if (quote === '"') {
        if (c === '\\') i++;
        else if (c === '"') quote = '';
        continue;
      }
      if (quote === "'") {
        if (c === "'" && line[i + 1] === "'") i++;
        else if (c === "'") quote = '';
        continue;
      }
      if (c === '#' && (i === 0 || line[i - 1] === ' ' || line[i - 1] === '\t')) break;
      if ((c === '"' || c === "'") && (i === at || QUOTE_OPENERS.has(line[i - 1]!))) {
        quote = c;
        continue;
      }
      if (c === '[' || c === '{') {
        flow++;
        max = Math.max(max, stack.length + dashes + flow);
      } else if ((c === ']' || c === '}') && flow > 0) flow--;
      if (c !== ' ' && c !== '\t' && c !== '\r') sawContent = true;
    }
    // A block scalar's header (`key: |`, `- >-`, `|2+`): its lines are text, not structure.
    if (quote === '' && flow === 0 && sawContent && (line.includes('|') || line.includes('>'))) {
      const content = line.replace(/\s+#.*$/, '').trimEnd();
      if (/(^|[\s:-])[|>][-+0-9]*$/.test(content)) blockScalarIndent = indent;
    }
  }
  return max;
}
