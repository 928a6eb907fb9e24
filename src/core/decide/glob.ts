/**
 * `*` matches any run of characters; everything else is literal.
 *
 * Matched without a regular expression: `*a*a*a*…b` compiled to `.*a.*a…`
 * backtracks exponentially (a 63-character name took minutes). This greedy
 * scan remembers only the last `*`, so it costs at most
 * pattern length × text length steps.
 */
export function globMatches(pattern: string, text: string): boolean {
  let p = 0;
  let t = 0;
  let star = -1;
  let resume = 0;
  while (t < text.length) {
    if (p < pattern.length && pattern[p] !== '*' && pattern[p] === text[t]) {
      p++;
      t++;
    } else if (p < pattern.length && pattern[p] === '*') {
      star = p++;
      resume = t;
    } else if (star !== -1) {
      // Let the last `*` swallow one more character and retry what follows it.
      p = star + 1;
      t = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.length && pattern[p] === '*') p++;
  return p === pattern.length;
}
