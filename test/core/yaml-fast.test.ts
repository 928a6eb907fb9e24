/**
 * The fast parse path (src/core/yaml/fast-parse.ts) against the `yaml` library: whenever
 * the fast path reads a text, `yaml` must read the same nodes (ranges, types,
 * values) and the same value; and the transform's results must not depend on
 * the switch. Texts: every YAML file of the repository, cut as the stream is
 * cut; generated documents of the shapes charts render, tricky scalars
 * included; and real documents with random small edits (most of which leave
 * YAML the fast path must hand over). Seeded: YAML_FAST_RUNS (default 12000
 * per generator) and YAML_FAST_SEED change them locally.
 */
import fc from 'fast-check';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { generate } from '../../scripts/bench/generate.mjs';
import { DEFAULT_OPTIONS, type Options } from '../../src/config/sources.js';
import { splitStream } from '../../src/core/yaml/stream.js';
import { transform } from '../../src/core/transform.js';
import { parseDocuments, parseSimpleDocument } from '../../src/core/yaml/fast-parse.js';
import { compareWithYaml } from '../support/yaml-compare.js';

const RUNS = Number(process.env.YAML_FAST_RUNS ?? 12000);
const SEED = Number(process.env.YAML_FAST_SEED ?? 20261203);
const root = fileURLToPath(new URL('../..', import.meta.url));

function yamlFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (name === 'node_modules' || name.startsWith('.')) return [];
    if (statSync(path).isDirectory()) return yamlFiles(path);
    return /\.ya?ml$/.test(name) ? [path] : [];
  });
}

const files = ['fixtures', 'test', 'docs', 'examples'].flatMap((dir) => {
  try {
    return yamlFiles(join(root, dir));
  } catch {
    return [];
  }
});
const chunks = files.flatMap((file) => splitStream(readFileSync(file, 'utf8')).map((chunk) => ({ file: relative(root, file), ...chunk })));

describe('fast parse path: every YAML file of the repository', () => {
  it('reads what it reads exactly as yaml does', () => {
    let read = 0;
    for (const chunk of chunks) {
      const comparison = compareWithYaml(chunk.text);
      expect(comparison.difference, `${chunk.file} at offset ${chunk.offset}`).toBeUndefined();
      if (comparison.read) read++;
    }
    // Most rendered documents are plain block YAML: the fast path must actually take them.
    expect(files.length).toBeGreaterThan(100);
    expect(read / chunks.length).toBeGreaterThan(0.5);
  });

  it('reads the real vLLM render and its output (the run this exists for)', () => {
    for (const name of ['vllm.input.yaml', 'vllm.expected.yaml']) {
      const docs = splitStream(readFileSync(join(root, 'fixtures/real', name), 'utf8')).filter((c) => /containers:/.test(c.text));
      expect(docs.length).toBeGreaterThan(0);
      for (const doc of docs) expect(parseSimpleDocument(doc.text), `${name} at ${doc.offset}`).toBeDefined();
    }
  });

  it('hands over what it does not read (the switch, and text yaml must judge)', () => {
    const plain = 'a: 1\nb:\n  - x\n';
    expect(parseDocuments(plain)[0]).not.toHaveProperty('schema');
    expect(parseDocuments(plain, false)[0]).toHaveProperty('schema');
    for (const text of ['a: &x 1\nb: *x\n', 'a: !!str 1\n', '<<: {a: 1}\n', 'a: 1\na: 2\n', 'a: >\n  x\n', 'a: "x\n  y"\n', 'a: b\n  c\n', 'a:\n# c\n  b: 1\n', '? a\n: b\n', 'a:\tb\n', 'a: 1\r\n', 'a: 1\n---\nb: 2\n', '%YAML 1.2\n---\na: 1\n', 'a: [b, [c]]\n', 'a: {b: c}\n', '1: a\n', '__proto__: x\n', 'a: |+\n  x\n\n', 'a: |2\n   x\n', '- \n- a\n', 'a: b: c\n', 'x\n']) {
      expect(parseSimpleDocument(text), JSON.stringify(text)).toBeUndefined();
    }
  });
});

// Generated documents: the shapes charts render, with scalars chosen to sit on
// the boundaries of the core schema and of plain scalars.
const TRICKY = ['a', 'nginx:1.25', 'http://x:80/p', 'a#b', 'a #b', '0', '-1', '+1', '007', '0o17', '0o8', '0x1F', '0xG', '1.0', '1.50', '.5', '1.', '1e3', '1.5E-3', '1e', '.inf', '-.Inf', '+.INF', '.nan', 'NaN', 'true', 'True', 'TRUE', 'tRue', 'yes', 'off', 'null', 'Null', '~', 'NULL', 'nULL', '-', '--port', '-x', '?a', ':a', 'a:b', 'a,b', 'a]b', "it's", 'a  b', '1_000', '12:30', '2026-12-03', '0.9', '$(HOME)', '*', '&a', '!t', '%p', '@x', '`x', '|', '>', 'a:', 'a: b', '[a]', '{a}', '"q"', "'q'", '#x', '', ' lead', 'trail ', 'back\\slash', 'tab\there', 'new\nline', 'ü', '---', '...', '- y', '? z', '<<', '__proto__'];
const tricky = fc.constantFrom(...TRICKY);
const scalarText = fc.oneof(
  { weight: 8, arbitrary: fc.constantFrom('nginx', 'vllm/vllm-openai:v0.9.1', '8000', '0.9', 'true', '--port=8000', 'Qwen/Qwen3-8B', 'a b c', 'http://x:80/p', 'IfNotPresent', '"2"', "'x'") },
  { weight: 5, arbitrary: tricky },
  { weight: 3, arbitrary: tricky.map((t) => JSON.stringify(t)) },
  { weight: 2, arbitrary: tricky.map((t) => `'${t.replace(/'/g, "''")}'`) },
  { weight: 1, arbitrary: fc.constantFrom('"a\\/b"', '"\\u0041"', '"\\x41"', '"a\\ b"', "'a'b'", '"a"b"', '"unterminated', "'open") },
);
const keyText = fc.oneof(
  { weight: 8, arbitrary: fc.constantFrom('name', 'image', 'args', 'command', 'env', 'value', 'app.kubernetes.io/name', 'a b', 'x-y', 'k') },
  { weight: 2, arbitrary: scalarText },
);
const comment = fc.constantFrom('', '', '', '', '', '', ' # c', '  #c', '#x');
const blank = fc.constantFrom('', '', '', '', '', '', '', '', '', '', '\n', '\n  \n', '\n# line comment\n', '\n    \n');

interface Tree {
  kind: 'scalar' | 'map' | 'seq' | 'flow' | 'literal' | 'empty' | 'emptyMap';
  text?: string;
  pairs?: [string, Tree][];
  items?: Tree[];
  header?: string;
  lines?: string[];
  indentless?: boolean;
  compact?: boolean;
  comment?: string;
  blankAfter?: string;
}

const { tree } = fc.letrec<{ tree: Tree; map: Tree; seq: Tree; leaf: Tree }>((tie) => ({
  leaf: fc.oneof(
    { weight: 6, arbitrary: fc.record({ kind: fc.constant('scalar' as const), text: scalarText, comment, blankAfter: blank }) },
    { weight: 1, arbitrary: fc.record({ kind: fc.constant('flow' as const), items: fc.array(fc.record({ kind: fc.constant('scalar' as const), text: scalarText }), { maxLength: 4 }), comment, blankAfter: blank }) },
    {
      weight: 1,
      arbitrary: fc.record({
        kind: fc.constant('literal' as const),
        header: fc.constantFrom('|', '|', '|-', '|+', '>', '|2', '| # h', '|  '),
        lines: fc.array(fc.constantFrom('echo a', '  indented', '', '   ', '# not a comment', 'x: y', '- z', 'tab\tin', '---', 'end'), { minLength: 0, maxLength: 5 }),
        blankAfter: blank,
      }),
    },
    { weight: 1, arbitrary: fc.record({ kind: fc.constantFrom('empty' as const, 'emptyMap' as const), comment, blankAfter: blank }) },
  ),
  map: fc.record({ kind: fc.constant('map' as const), pairs: fc.array(fc.tuple(keyText, tie('tree')), { minLength: 1, maxLength: 4 }), blankAfter: blank }),
  seq: fc.record({ kind: fc.constant('seq' as const), items: fc.array(tie('tree'), { minLength: 1, maxLength: 3 }), indentless: fc.boolean(), compact: fc.boolean(), blankAfter: blank }),
  tree: fc.oneof({ maxDepth: 4, depthIdentifier: 'tree' }, tie('leaf'), tie('map'), tie('seq')),
}));

/** Lines of `node` as the value of a key (or item) at `indent`. */
function renderValue(node: Tree, indent: number, inSeqItem: boolean): { inline: string; below: string[] } {
  const pad = (n: number) => ' '.repeat(n);
  const after = (node.comment ?? '') + (node.blankAfter ?? '');
  switch (node.kind) {
    case 'scalar':
      return { inline: ` ${node.text}${after}`, below: [] };
    case 'flow':
      return { inline: ` [${node.items!.map((i) => i.text).join(', ')}]${after}`, below: [] };
    case 'empty':
      return { inline: `${after}`, below: [] };
    case 'emptyMap':
      return { inline: ` {}${after}`, below: [] };
    case 'literal':
      return { inline: ` ${node.header}`, below: [...node.lines!.map((l) => (l.trim() === '' ? l : `${pad(indent + 2)}${l}`)), ...(node.blankAfter ? [node.blankAfter.replace(/^\n|\n$/g, '')] : [])] };
    case 'map':
      return { inline: node.blankAfter ?? '', below: renderMap(node, indent + 2) };
    case 'seq': {
      const at = node.indentless && !inSeqItem ? indent : indent + 2;
      return { inline: node.blankAfter ?? '', below: renderSeq(node, at) };
    }
  }
}

function renderMap(node: Tree, indent: number): string[] {
  return node.pairs!.flatMap(([key, value]) => {
    const { inline, below } = renderValue(value, indent, false);
    return [`${' '.repeat(indent)}${key}:${inline}`, ...below];
  });
}

function renderSeq(node: Tree, indent: number): string[] {
  return node.items!.flatMap((item) => {
    if (item.kind === 'map' && node.compact) {
      // `- key: value` with the other keys under the first.
      const lines = renderMap(item, indent + 2);
      return [`${' '.repeat(indent)}- ${lines[0]!.slice(indent + 2)}`, ...lines.slice(1)];
    }
    const { inline, below } = renderValue(item, indent, true);
    return [`${' '.repeat(indent)}-${inline}`, ...below];
  });
}

const documentText = fc
  .tuple(fc.constantFrom('', '---\n', '---\n# Source: chart/templates/a.yaml\n', '# c\n\n', '--- \n'), tree.filter((t) => t.kind === 'map' || t.kind === 'seq'), fc.constantFrom('', '\n', '\n\n'))
  .map(([head, root, tail]) => `${head}${(root.kind === 'map' ? renderMap(root, 0) : renderSeq(root, 0)).join('\n').replace(/\n+/g, (m) => m)}\n${tail}`);

describe('fast parse path: generated documents (seeded)', () => {
  it(`${RUNS} documents of rendered shapes: what it reads, it reads as yaml does`, () => {
    const seen = { runs: 0, read: 0 };
    // Each shape must be among the documents read, or passing proves little about it.
    const shapes: Record<string, RegExp> = {
      literal: /: \|-?\n/,
      flow: /: \[/,
      indentless: /^( *)[^ \n-][^\n]*:\n\1- /m,
      compact: /^ *- [a-z]+:/m,
      quoted: /: ["']/,
      comment: / #/,
      number: /: [0-9.]+\n/,
    };
    const readShapes = Object.fromEntries(Object.keys(shapes).map((k) => [k, 0]));
    fc.assert(
      fc.property(documentText, (text) => {
        const comparison = compareWithYaml(text);
        seen.runs++;
        if (comparison.read) {
          seen.read++;
          for (const [name, pattern] of Object.entries(shapes)) if (pattern.test(text)) readShapes[name]!++;
        }
        expect(comparison.difference, JSON.stringify(text)).toBeUndefined();
      }),
      { numRuns: RUNS, seed: SEED },
    );
    // Both sides must be reached: documents it reads, and documents it hands over.
    expect(seen.read / seen.runs).toBeGreaterThan(0.1);
    expect(seen.read / seen.runs).toBeLessThan(0.95);
    for (const [name, count] of Object.entries(readShapes)) expect(count, name).toBeGreaterThan(RUNS / 500);
  }, 120_000);

  const small = chunks.filter((c) => c.text.length < 4000 && parseSimpleDocument(c.text) !== undefined);
  const EDITS = ['', ' ', '  ', '\n', '\n  ', ':', ': ', '#', ' #', '-', '- ', '"', "'", '|', '>', '[', ']', '{', '}', ',', '&a ', '*a', '!', '?', '\t', '\r', 'x', '---\n', '\\', '0', '.', 'e'];
  const edit = fc.record({ at: fc.nat(), remove: fc.nat({ max: 3 }), insert: fc.constantFrom(...EDITS) });

  it(`${RUNS} real documents with random edits: what it reads, it reads as yaml does`, () => {
    expect(small.length).toBeGreaterThan(20);
    const seen = { runs: 0, read: 0 };
    fc.assert(
      fc.property(fc.nat({ max: small.length - 1 }), fc.array(edit, { minLength: 1, maxLength: 3 }), (which, edits) => {
        let text = small[which]!.text;
        for (const e of edits) {
          const at = e.at % (text.length + 1);
          text = text.slice(0, at) + e.insert + text.slice(at + e.remove);
        }
        const comparison = compareWithYaml(text);
        seen.runs++;
        if (comparison.read) seen.read++;
        expect(comparison.difference, JSON.stringify(text)).toBeUndefined();
      }),
      { numRuns: RUNS, seed: SEED },
    );
    expect(seen.read / seen.runs).toBeGreaterThan(0.2);
  }, 120_000);
});

describe('fast parse path: the transform decides the same either way', () => {
  const on: Options = { ...DEFAULT_OPTIONS, registryLookup: 'never' };
  const off: Options = { ...on, fastParse: 'off' };
  const outcome = (stream: string, options: Options) => {
    const result = transform(stream, options);
    return { output: result.output, errors: result.errors.map((e) => e.format()), warnings: result.warnings, containers: JSON.stringify(result.containers) };
  };

  it('on every fixture stream and on a generated 300-document stream', () => {
    const streams = files.filter((f) => f.includes(`${join('fixtures', '')}`) && /input\.ya?ml$/.test(f)).map((f) => readFileSync(f, 'utf8'));
    expect(streams.length).toBeGreaterThan(20);
    streams.push(generate(300));
    for (const stream of streams) expect(outcome(stream, on)).toEqual(outcome(stream, off));
  });
});
