/**
 * The character classes of JS regexes, for the scans that replace regexes on a
 * render's path (a render is a fresh process, where each regex costs its
 * compilation on its first runs; docs/benchmarks.md).
 */

/** What ends a line for a regex's `^` and `$` under `m`, and what `.` does not match: LF, CR, U+2028, U+2029. */
export function isLineTerminator(c: number): boolean {
  return c === 0x0a || c === 0x0d || c === 0x2028 || c === 0x2029;
}

/** What a regex's `\s` matches: JS's WhiteSpace and LineTerminator characters. */
export function isJsWhitespace(c: number): boolean {
  if (c < 0x80) return c === 0x20 || (c >= 0x09 && c <= 0x0d);
  return c === 0xa0 || c === 0x1680 || (c >= 0x2000 && c <= 0x200a) || c === 0x2028 || c === 0x2029 || c === 0x202f || c === 0x205f || c === 0x3000 || c === 0xfeff;
}

/** `\d`: ASCII digits only (NaN, past either end, is none). */
export function isAsciiDigit(c: number): boolean {
  return c >= 0x30 && c <= 0x39;
}
