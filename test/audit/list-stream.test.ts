/**
 * A List answer read as it streams in (src/kubernetes/list-stream.ts): each
 * item handed out alone, whatever the chunks the network cut the answer
 * into; the other members (metadata, its continue token) kept; an item over
 * the limit, or an answer that is not one JSON object, refused with the
 * reason.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ListScanner, ListStreamError } from '../../src/kubernetes/list-stream.js';

/** Feeds `text` in chunks cut at `cuts` (byte offsets) and returns the items and the rest. */
function scan(text: string, cuts: readonly number[] = [], limit = 1 << 20): { items: unknown[]; rest: Record<string, unknown> } {
  const bytes = Buffer.from(text, 'utf8');
  const scanner = new ListScanner(limit);
  const items: unknown[] = [];
  let from = 0;
  for (const cut of [...new Set(cuts)].filter((c) => c > 0 && c < bytes.length).sort((a, b) => a - b)) {
    items.push(...scanner.push(bytes.subarray(from, cut)));
    from = cut;
  }
  items.push(...scanner.push(bytes.subarray(from)));
  return { items, rest: scanner.end() };
}

const pod = (i: number) => ({ metadata: { name: `p${i}`, uid: `u${i}`, annotations: { tricky: 'a "quoted" } ] { [ \\ value, with: colons', ünï: 'çødé ✓ 𝄞' } }, spec: { containers: [{ name: 'c', args: ['--x', '{"json":[1,2]}'] }] }, status: { phase: 'Running' } });

describe('a List read item by item', () => {
  it('the items and the metadata, as JSON.parse reads them, fed whole, byte by byte, or metadata after the items', () => {
    const list = { kind: 'PodList', apiVersion: 'v1', metadata: { resourceVersion: '42', continue: 'abc', remainingItemCount: 3 }, items: [pod(1), pod(2), pod(3)] };
    const text = JSON.stringify(list, null, 1);
    const whole = scan(text);
    expect(whole.items).toEqual(list.items);
    expect(whole.rest).toEqual({ kind: 'PodList', apiVersion: 'v1', metadata: list.metadata });
    const byByte = scan(text, Array.from({ length: Buffer.byteLength(text) }, (_, i) => i));
    expect(byByte).toEqual(whole);
    const after = scan(JSON.stringify({ items: list.items, metadata: list.metadata, kind: 'PodList' }));
    expect(after.items).toEqual(list.items);
    expect(after.rest.metadata).toEqual(list.metadata);
  });

  it('an empty list, `items: null` (Go\'s nil slice) and no items at all', () => {
    expect(scan('{"kind":"PodList","metadata":{},"items":[]}').items).toEqual([]);
    expect(scan('{"kind":"PodList","metadata":{},"items":null}')).toEqual({ items: [], rest: { kind: 'PodList', metadata: {} } });
    expect(scan(' {"metadata":{"continue":""}} \n')).toEqual({ items: [], rest: { metadata: { continue: '' } } });
  });

  it('any list, cut anywhere: the same items and rest as JSON.parse', () => {
    const value = fc.jsonValue({ maxDepth: 4 });
    fc.assert(
      fc.property(fc.array(fc.dictionary(fc.string(), value, { maxKeys: 4 }), { maxLength: 6 }), fc.dictionary(fc.string(), value, { maxKeys: 3 }), fc.array(fc.nat(400), { maxLength: 12 }), (items, meta, cuts) => {
        const text = JSON.stringify({ metadata: meta, items });
        const read = scan(text, cuts);
        expect(read.items).toEqual(JSON.parse(text).items);
        expect(read.rest).toEqual({ metadata: JSON.parse(text).metadata });
      }),
      { numRuns: 300 },
    );
  });

  it('refuses an item over the limit (naming which), an answer that is not one object, and one cut short', () => {
    const big = JSON.stringify({ metadata: {}, items: [pod(1), { pad: 'x'.repeat(5000) }] });
    expect(() => scan(big, [100, 2000], 4096)).toThrow(new ListStreamError('item 2 of the list is larger than 4 KiB'));
    expect(() => scan('[1,2,3]')).toThrow('the answer is not a JSON object');
    expect(() => scan('<html>login</html>')).toThrow('the answer is not a JSON object');
    expect(() => scan('{"items":[{"a":1}]} trailing')).toThrow('the answer has more after its JSON object');
    expect(() => scan('{"items":[{"a":1},{"b":')).toThrow('the answer ended before its JSON object did');
    expect(() => scan('{"items":{"a":1}}')).toThrow('the answer\'s "items" is not an array');
    expect(() => scan('{"items":[{"a":tru}]}')).toThrow('item 1 of the list is not valid JSON');
    expect(() => scan(`{"metadata":${JSON.stringify({ x: 'y'.repeat(2 << 20) })}}`)).toThrow('the answer\'s "metadata" is larger than 1 MiB');
  });
});
