import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { DEFAULT_OPTIONS, mergeOptions } from '../../src/config/sources.js';
import { validateConfig } from '../../src/config/validate.js';

// mergeOptions skips the schema check when no option was given (start-up time):
// that is only right while the defaults themselves pass it.
describe('defaults', () => {
  it('pass the schema', () => {
    expect(validateConfig({ ...DEFAULT_OPTIONS })).toEqual([]);
  });
  it('are what no option at all gives', () => {
    expect(mergeOptions({}, {}, {})).toEqual({ ...DEFAULT_OPTIONS });
  });
});

// mergeOptions checks only the given keys (a default's check would cost a render a regex's
// compilation): the same answers as checking the merged options, while the schema checks
// each top-level key on its own.
describe('checking the given keys alone', () => {
  it('the schema has no rule across top-level keys', () => {
    const schema = JSON.parse(readFileSync(join(import.meta.dirname, '../../src/config.schema.json'), 'utf8')) as Record<string, unknown>;
    expect(Object.keys(schema).sort()).toEqual(['$id', '$schema', 'additionalProperties', 'description', 'properties', 'title', 'type']);
  });

  it('finds what checking the merged options finds (seeded)', () => {
    const keys = [...Object.keys(DEFAULT_OPTIONS), 'unknownKey', 'images', '__proto__'];
    const values = [undefined, '', 'x', 'linux/amd64', 'linux', 'LINUX/amd64', 'on', 'off', 'warn', 0, 1, 0.9, -1, 1e9, true, false, null, [], ['a'], [{ repository: 'a/b' }], {}, { a: 1 }];
    const layer = fc.dictionary(fc.constantFrom(...keys), fc.constantFrom(...values), { maxKeys: 4 });
    fc.assert(
      fc.property(layer, layer, (a, b) => {
        const merged: Record<string, unknown> = { ...DEFAULT_OPTIONS };
        const given: Record<string, unknown> = {};
        for (const [key, value] of [...Object.entries(a), ...Object.entries(b)]) {
          if (value === undefined) continue;
          merged[key] = value;
          given[key] = value;
        }
        expect(validateConfig(given)).toEqual(validateConfig(merged));
        const answer = (f: () => unknown): unknown => {
          try {
            return f();
          } catch (e) {
            return (e as Error).message;
          }
        };
        const oracle = validateConfig(merged);
        const result = answer(() => mergeOptions(a as never, b as never));
        if (oracle.length === 0) expect(result).toEqual(merged);
        else expect(result).toMatch(/^invalid options: /);
      }),
      { numRuns: 3000, seed: 20261204 },
    );
  });
});
