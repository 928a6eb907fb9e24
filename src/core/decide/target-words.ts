/**
 * The words a document that may hold a target mentions: vLLM itself, an
 * earlier wrap or an annotation of ours, llm-d, KServe's Hugging Face server.
 * Every repository of the built-in image table holds one of them (a unit test
 * checks), so they decide alone, when no configured images add words, that
 * a stream has nothing to rewrite: the launcher then passes it through
 * without loading the application (src/cli/launcher.ts). The transform's
 * candidate test (src/core/transform.ts) starts from the same words.
 */
export const TARGET_WORDS: readonly string[] = ['vllm', 'vram-preflight', 'llm-d', 'huggingfaceserver'];

/**
 * Whether `text` holds one of `lowerWords` (lower case), ignoring case: a
 * plain search of the lowered text instead of a case-insensitive regex (no
 * regex to compile at start, no per-position alternation). Never false where
 * `new RegExp(words.join('|'), 'i')` (escaped) is true: that regex folds
 * only ASCII letters to ASCII, which lowering does too; lowering also folds
 * the Kelvin sign to `k`, which only makes a document a candidate that the
 * regex would not (a unit test compares both on generated text).
 */
export function mentionsAny(text: string, lowerWords: readonly string[]): boolean {
  return mentionsAnyLowered(text.toLowerCase(), lowerWords);
}

/** mentionsAny of a text already lowered (the transform's candidate test reads the lowered text again). */
export function mentionsAnyLowered(lower: string, lowerWords: readonly string[]): boolean {
  for (const word of lowerWords) if (lower.includes(word)) return true;
  return false;
}

/**
 * A text that may hold something to rewrite: it mentions a target word
 * (case-insensitively), or holds a backslash, which may spell any of them in
 * a double-quoted escape. False only where the transform's candidate test is
 * false for every document of the text (given no configured images).
 */
export function mayHoldTarget(text: string): boolean {
  return text.includes('\\') || mentionsAny(text, TARGET_WORDS);
}

/** The longest target word: a word cut by a piece boundary lies within this many characters less one on each side. */
const LONGEST = Math.max(...TARGET_WORDS.map((word) => word.length));

/**
 * mayHoldTarget of the text the pieces make together, without joining them:
 * each piece, and across each boundary the last LONGEST - 1 characters before
 * it with the first LONGEST - 1 after it, where a word cut in two lies (stdin
 * is read in pieces of 1 MiB, and a longer line is cut wherever the piece ends).
 */
export function mayHoldTargetInPieces(pieces: readonly string[]): boolean {
  let before = '';
  for (const piece of pieces) {
    if (mayHoldTarget(piece) || (before !== '' && mayHoldTarget(before + piece.slice(0, LONGEST - 1)))) return true;
    before = piece.length >= LONGEST - 1 ? piece.slice(1 - LONGEST) : (before + piece).slice(1 - LONGEST);
  }
  return false;
}
