/**
 * The AdmissionReview's `patch`: the JSON Patch's bytes, base64. Written so
 * that a wrapped pod's answer costs little more than any other's.
 *
 * A wrapped container's operations carry the preflight script (~10 KB), the
 * same string for every pod with the same settings. Escaping it into JSON
 * and encoding it into base64 afresh for each admission made ~25 KB of
 * garbage per answer (measured in process: 104 -> 80 KB per wrapped
 * admission), and the young-generation collections that garbage brings are
 * what a webhook's p99 latency is made of (docs/webhook.md, "Speed").
 *
 * Base64 turns each 3 bytes into 4 characters on its own, so the base64 of a
 * text cut into pieces whose lengths are multiples of 3 bytes is the
 * concatenation of the pieces' base64. JSON allows whitespace between tokens;
 * so the patch is written as JSON text in pieces, each padded with spaces to
 * a multiple of 3 bytes, and a long string's piece (its JSON text and its
 * base64) is kept for the next answer. The bytes decode to the same patch as
 * JSON.stringify's, with some spaces more.
 */
import { Buffer } from 'node:buffer';

/** Strings at least this long (a preflight script; never a name or a path) are kept, encoded. */
const KEPT_FROM_LENGTH = 512;
/** Distinct long strings kept: one per set of preflight settings, and a few in KubeRay's bash-word form. */
const KEPT_AT_MOST = 64;

const kept = new Map<string, string>();

/** Base64 of `text` followed by the spaces that make its UTF-8 length a multiple of 3. */
function paddedBase64(text: string): string {
  const extra = (3 - (Buffer.byteLength(text) % 3)) % 3;
  return Buffer.from(extra === 0 ? text : text + '  '.slice(0, extra)).toString('base64');
}

function keptBase64(long: string): string {
  let encoded = kept.get(long);
  if (encoded === undefined) {
    encoded = paddedBase64(JSON.stringify(long));
    if (kept.size >= KEPT_AT_MOST) kept.clear();
    kept.set(long, encoded);
  }
  return encoded;
}

/**
 * Base64 of the JSON text of `value` (a JSON value: what JSON.stringify
 * accepts), in pieces to be joined: long strings' pieces come from the cache.
 */
export function base64Json(value: unknown): string[] {
  const encoded: string[] = [];
  let text = '';
  const write = (item: unknown): void => {
    if (typeof item === 'string' && item.length >= KEPT_FROM_LENGTH) {
      encoded.push(paddedBase64(text));
      text = '';
      encoded.push(keptBase64(item));
    } else if (Array.isArray(item)) {
      text += '[';
      item.forEach((element, i) => {
        if (i > 0) text += ',';
        write(element);
      });
      text += ']';
    } else if (item !== null && typeof item === 'object') {
      text += '{';
      let first = true;
      for (const [key, member] of Object.entries(item)) {
        if (member === undefined) continue;
        if (!first) text += ',';
        first = false;
        text += `${JSON.stringify(key)}:`;
        write(member);
      }
      text += '}';
    } else text += JSON.stringify(item) ?? 'null';
  };
  write(value);
  encoded.push(paddedBase64(text));
  return encoded.filter((piece) => piece !== '');
}
