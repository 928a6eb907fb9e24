/**
 * The YAML writer of objects written whole (src/core/yaml/emit.ts, admit's
 * pods): every reader reads back the value written. The `yaml` package (YAML
 * 1.2) and PyYAML (YAML 1.1, as go-yaml reads plain scalars and NEL/LS/PS)
 * read each of many generated values; a scalar written plain is one go-yaml
 * reads as a string; no raw NEL, LS or PS is ever written.
 */
import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { goYamlPlainType } from '../../src/core/yaml/go-yaml.js';
import { plainIsSafe, writeYaml } from '../../src/core/yaml/emit.js';

/** A small seeded generator (mulberry32): the same values on every run. */
function random(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Strings a manifest's argv, names and scripts hold, and those every YAML reader treats apart. */
const PIECES = ['vllm', 'serve', '--port', '8000', '0.9', 'yes', 'No', 'on', 'OFF', '~', 'null', 'true', '1_000', '0x1F', '0o17', '1e3', '.5', '-1', '+2', '.inf', '<<', '=', '?x', '!tag', '&a', '*a', '%x', '@x', '`x', '#c', 'a #b', 'a: b', 'a:b', '- x', '[x]', '{x}', '"q"', "'q'", '\\', 'é', '模型', '\u0085', '\u2028', '\u2029', '\ufeff', '\t', '\n', '\r', '\0', '\x7f', '\x9b', ' ', '  ', 'x ', ' x', '---', '...', '2001-12-14', '12:30', 'Qwen/Qwen3-8B', 'vllm/vllm-openai:v0.10.1', 'nvidia.com/gpu', 'exec "$@"\n', '#!/bin/sh\nset -e\n'];

function value(next: () => number, depth: number): unknown {
  const r = next();
  if (depth > 3 || r < 0.45) {
    const s = next();
    if (s < 0.08) return Math.floor(next() * 2000) - 1000;
    if (s < 0.12) return next() < 0.5;
    if (s < 0.15) return null;
    return Array.from({ length: 1 + Math.floor(next() * 3) }, () => PIECES[Math.floor(next() * PIECES.length)]!).join(next() < 0.3 ? '' : next() < 0.5 ? ' ' : '\n');
  }
  if (r < 0.7) return Array.from({ length: Math.floor(next() * 4) }, () => value(next, depth + 1));
  return Object.fromEntries(Array.from({ length: Math.floor(next() * 4) }, () => [String(value(next, 9) ?? 'k'), value(next, depth + 1)]));
}

const pyyaml = (texts: readonly string[]): unknown[] => {
  const r = spawnSync('/usr/bin/python3', ['-c', 'import json,sys,yaml\nprint(json.dumps([yaml.safe_load(t) for t in json.load(sys.stdin)]))'], { input: JSON.stringify(texts), encoding: 'utf8', maxBuffer: 1 << 26 });
  if (r.status !== 0) throw new Error(r.stderr);
  return JSON.parse(r.stdout) as unknown[];
};

describe('writeYaml: what it writes, every reader reads back', () => {
  const next = random(20261205);
  const values = Array.from({ length: 600 }, () => ({ doc: value(next, 0) }));
  const texts = values.map((v) => writeYaml(v));

  it('the yaml package (YAML 1.2) and PyYAML (YAML 1.1, as go-yaml) read the value written', () => {
    const read = pyyaml(texts);
    values.forEach((v, i) => {
      const json = JSON.parse(JSON.stringify(v));
      expect(parse(texts[i]!), texts[i]).toEqual(json);
      expect(read[i], texts[i]).toEqual(json);
    });
  });

  it('never a raw NEL, LS or PS (line breaks to go-yaml); plain only what go-yaml reads as a string', () => {
    for (const text of texts) expect(text).not.toMatch(/[\u0085\u2028\u2029]/);
    for (const piece of PIECES) if (plainIsSafe(piece, false)) expect(goYamlPlainType(piece), piece).toBe('str');
    for (const quoted of ['yes', 'on', '1_000', '0.9', '~', '-1', '<<', '=', '?x', 'a #b', 'a: b', '']) expect(plainIsSafe(quoted, false), quoted).toBe(false);
    for (const plain of ['vllm', '--port', 'Qwen/Qwen3-8B', 'vllm/vllm-openai:v0.10.1', 'nvidia.com/gpu']) expect(plainIsSafe(plain, false), plain).toBe(true);
  });

  it("a wrapped start's script is a literal block, as the post-renderer writes it", () => {
    expect(writeYaml({ args: ['# vram-preflight\nset -e\nexec "$@"\n', '--', 'vllm'] })).toBe('args:\n- |\n  # vram-preflight\n  set -e\n  exec "$@"\n- --\n- vllm\n');
  });
});
