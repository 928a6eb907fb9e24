/**
 * What Python's float() reads (vLLM's argparse type for --gpu-memory-utilization), in ASCII:
 * a sign, digits with an optional point, an optional exponent; `_` between two digits; ASCII
 * whitespace around it (" \t\n\v\f\r"). float() also reads non-ASCII digits and spaces,
 * "inf" and "nan": none of them is taken here.
 *
 * Read by a scan instead of a regex: a render
 * is a fresh process, where each regex costs its compilation on its first runs
 * (~100-250 us for these; docs/benchmarks.md). test/core/cold-regexes.test.ts
 * holds the scan to the regexes it replaces:
 *   /^([+-]?)((?:\d+(?:_\d+)*)?\.\d+(?:_\d+)*|\d+(?:_\d+)*\.?)(?:[eE]([+-]?\d+(?:_\d+)*))?$/
 * (the preflight settings' reader) and, for a sign other than `-`,
 *   /^\+?(?:\d+(?:_\d+)*(?:\.(?:\d+(?:_\d+)*)?)?|\.\d+(?:_\d+)*)(?:[eE][+-]?\d+(?:_\d+)*)?$/
 * (the flag's reader): the same mantissas, in two spellings.
 */
import { isAsciiDigit as isDigit } from './char-classes.js';

export interface PythonFloatParts {
  sign: '' | '+' | '-';
  /** Digits with their `_` and point, as written. */
  mantissa: string;
  /** The exponent with its sign, as written; undefined without one. */
  exponent?: string;
}

export function readPythonFloat(text: string): PythonFloatParts | undefined {
  let i = 0;
  const first = text.charCodeAt(0);
  const sign = first === 0x2b ? '+' : first === 0x2d ? '-' : '';
  if (sign !== '') i++;
  const mantissaStart = i;
  const integerEnd = digitGroupsEnd(text, i);
  let mantissaEnd = integerEnd;
  if (text.charCodeAt(integerEnd) === 0x2e) {
    mantissaEnd = digitGroupsEnd(text, integerEnd + 1);
    if (integerEnd === mantissaStart && mantissaEnd === integerEnd + 1) return undefined; // a point alone
  } else if (integerEnd === mantissaStart) return undefined;
  const mantissa = text.slice(mantissaStart, mantissaEnd);
  if (mantissaEnd === text.length) return { sign, mantissa };
  const e = text.charCodeAt(mantissaEnd);
  if (e !== 0x65 && e !== 0x45) return undefined;
  let exponentDigits = mantissaEnd + 1;
  const exponentSign = text.charCodeAt(exponentDigits);
  if (exponentSign === 0x2b || exponentSign === 0x2d) exponentDigits++;
  const end = digitGroupsEnd(text, exponentDigits);
  if (end === exponentDigits || end !== text.length) return undefined;
  return { sign, mantissa, exponent: text.slice(mantissaEnd + 1) };
}

/** `\d+(?:_\d+)*` from `i`: where it ends (`i` when there is none). */
function digitGroupsEnd(text: string, i: number): number {
  if (!isDigit(text.charCodeAt(i))) return i;
  for (;;) {
    while (isDigit(text.charCodeAt(i))) i++;
    if (text.charCodeAt(i) !== 0x5f || !isDigit(text.charCodeAt(i + 1))) return i;
    i++;
  }
}

/** `text.replace(/^[ \t\n\v\f\r]+|[ \t\n\v\f\r]+$/g, '')`: the ASCII whitespace float() skips around a number. */
export function trimPythonSpace(text: string): string {
  let start = 0;
  let end = text.length;
  while (start < end && isPythonSpace(text.charCodeAt(start))) start++;
  while (end > start && isPythonSpace(text.charCodeAt(end - 1))) end--;
  return text.slice(start, end);
}

function isPythonSpace(c: number): boolean {
  return c === 0x20 || (c >= 0x09 && c <= 0x0d);
}
