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
