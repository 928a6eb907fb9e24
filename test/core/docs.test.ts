/**
 * docs/ must say what the tables say: every built-in image row, workload kind,
 * operator kind and option appears in the operator docs.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { SCALAR_OPTIONS } from '../../src/config/sources.js';
import { KNOWN_IMAGES } from '../../src/core/tables/images.js';
import { OPERATOR_KINDS, WORKLOAD_KINDS } from '../../src/core/tables/workloads.js';

const doc = (name: string) => readFileSync(join(import.meta.dirname, '../../docs', name), 'utf8');

describe('docs agree with the tables', () => {
  const detection = doc('detection.md');
  it.each(KNOWN_IMAGES.map((row) => [row.repository, row.entrypoint.join(' ')] as const))('detection.md lists %s → %s', (repository, entrypoint) => {
    expect(detection).toContain(`\`${repository}\``);
    expect(detection).toContain(`\`${entrypoint}\``);
  });
  it.each([...WORKLOAD_KINDS, ...OPERATOR_KINDS].map((k) => [k.kind, k.group] as const))('detection.md names %s (%s)', (kind, group) => {
    expect(detection).toContain(kind);
    if (group) expect(detection).toContain(group);
  });
  it.each(SCALAR_OPTIONS.map((o) => [o.key, o.flag, o.env] as const))('configuration.md documents %s', (key, flag, env) => {
    const configuration = doc('configuration.md');
    for (const name of [key, flag, env]) expect(configuration).toContain(`\`${name}\``);
  });
});
