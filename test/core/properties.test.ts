/**
 * Property tests: streams assembled from varied documents.
 * - nothing to rewrite → byte-identical output;
 * - the transform is idempotent;
 * - in rewritten documents, input and output read with YAML 1.1 semantics are
 *   equal except the wrapped containers' command/args, and the argv after "--"
 *   is exactly the original start.
 */
import fc from 'fast-check';
import { parseAllDocuments } from 'yaml';
import { describe, expect, it } from 'vitest';
import { DEFAULT_OPTIONS, type Options } from '../../src/config/sources.js';
import { transform } from '../../src/core/transform.js';

const options: Options = { ...DEFAULT_OPTIONS };
export const RUNS = 300;

/** Strings that stress quoting and the shell: generated, plus known-hostile ones. */
const argText = fc.oneof(
  fc.string({ maxLength: 12 }),
  fc.string({ unit: 'grapheme', maxLength: 6 }),
  fc.constantFrom('$(reboot)', "'; rm -rf / #", 'a\nb', '"q"', '\\', '`id`', '$$', '$(HOME)', 'é ü', '\t', '--', '#', ': x', '- y', '0644', '1e3', 'null', 'yes', '~'),
);

/** A YAML scalar written in one of several styles, all meaning `text`. */
function scalar(text: string, style: number): string {
  if (style === 1 && /^[A-Za-z][A-Za-z0-9/_.-]*$/.test(text) && !/^(y|yes|n|no|on|off|true|false|null)$/i.test(text)) return text;
  if (style === 2 && !/[\n\r\t\\]/.test(text) && [...text].every((c) => c >= ' ' && c <= '~')) return `'${text.replace(/'/g, "''")}'`;
  return JSON.stringify(text).replace(/\u2028/g, '\\u2028').replace(/\u2029/g, '\\u2029');
}

const comment = fc.constantFrom('', '# a comment\n', '# Source: chart/templates/x.yaml\n', '#\n', '# ---\n');
const blockScalar = fc.constantFrom('  script: |\n    echo a\n    ---\n    echo b\n', '  folded: >-\n    one\n    --- two\n', '');

/** Documents that are never rewritten, some of which mention vLLM (so they are parsed). */
const passThroughDoc = fc
  .tuple(fc.constantFrom('ConfigMap', 'Service', 'Secret'), fc.string({ maxLength: 8 }), blockScalar, fc.boolean(), fc.boolean(), comment)
  .map(([kind, value, block, mentionVllm, anchors, lead]) =>
    `${lead}apiVersion: v1\nkind: ${kind}\nmetadata:\n  name: x   \n  labels: ${anchors ? '&l ' : ''}{app: ${mentionVllm ? 'vllm' : 'web'}}\ndata:\n  value: ${scalar(value, 0)}\n  mode: 0644\n  big: 12345678901234567890\n${block}${anchors ? '  copy: *l\n' : ''}`,
  );
const cpuVllmDeployment = fc.tuple(fc.array(argText, { maxLength: 4 })).map(
  ([args]) =>
    `apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: cpu\nspec:\n  template:\n    spec:\n      containers:\n      - name: model\n        image: vllm/vllm-openai:v0.26.0\n        args: [${[...args, '--device=cpu'].map((a) => scalar(a, 0)).join(', ')}]\n`,
);

interface Target {
  text: string;
  start: string[];
}

const utilizationArgs = fc
  .tuple(fc.constantFrom('--gpu-memory-utilization', '--gpu_memory_utilization'), fc.boolean(), fc.integer({ min: 1, max: 100 }))
  .map(([flag, joined, percent]) => {
    const value = String(percent / 100);
    return joined ? [`${flag}=${value}`] : [flag, value];
  });

/** A vLLM GPU container in one of the layouts charts produce, and the start it must keep. */
const targetDoc = fc
  .tuple(
    fc.constantFrom('args-only', 'command+args', 'command-only'),
    fc.array(argText, { maxLength: 5 }),
    utilizationArgs,
    fc.integer({ min: 0, max: 2 }),
    fc.boolean(),
  )
  .map(([layout, extra, util, style, helmStyle]): Target => {
    const args = [...extra, ...util];
    const list = (items: string[], indent: string) =>
      items.length === 0 ? ' []' : `\n${items.map((a) => `${indent}- ${scalar(a, style)}`).join('\n')}`;
    const ind = helmStyle ? '          ' : '        ';
    const first = helmStyle ? '        - ' : '      - ';
    let body: string;
    let start: string[];
    if (layout === 'args-only') {
      body = `${first}args:${list(args, ind)}\n${ind}image: vllm/vllm-openai:v0.26.0\n${ind}name: model\n`;
      start = ['vllm', 'serve', ...args];
    } else if (layout === 'command+args') {
      body = `${first}name: model\n${ind}image: vllm/vllm-openai:v0.26.0\n${ind}command: ["vllm", "serve"]\n${ind}args:${list(args, ind)}\n`;
      start = ['vllm', 'serve', ...args];
    } else {
      body = `${first}name: model\n${ind}image: vllm/vllm-openai:v0.26.0\n${ind}command:${list(['vllm', 'serve', ...args], ind)}\n`;
      start = ['vllm', 'serve', ...args];
    }
    body += `${ind}resources:\n${ind}  limits:\n${ind}    nvidia.com/gpu: 1\n`;
    const text = `apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: model\nspec:\n  template:\n    metadata:\n      labels: {app: model}\n    spec:\n      volumes:\n      - name: cfg\n        configMap: {name: c, defaultMode: 0644}\n      containers:${helmStyle ? ' ' : ''}\n${body}`;
    return { text, start };
  });

/** Joins documents into a stream with the separators and decorations Helm and users produce. */
const streamOf = (docs: fc.Arbitrary<string[]>) =>
  fc.tuple(docs, fc.boolean(), fc.boolean(), fc.boolean(), fc.array(fc.constantFrom('---\n', '---\n# Source: c/t.yaml\n', '--- \n', '...\n---\n', '---\n---\n'), { minLength: 8, maxLength: 8 })).map(
    ([parts, bom, crlf, dropFinalNewline, separators]) => {
      let text = parts.map((doc, i) => `${separators[i % separators.length]}${doc}`).join('');
      if (crlf) text = text.replace(/\n/g, '\r\n');
      if (dropFinalNewline) text = text.replace(/\r?\n$/, '');
      return (bom ? '\ufeff' : '') + text;
    },
  );

function readAll(text: string): unknown[] {
  const docs = parseAllDocuments(text, { version: '1.1', intAsBigInt: true });
  return (Array.isArray(docs) ? docs : []).map((doc) => {
    expect(doc.errors).toEqual([]);
    return doc.toJS({ maxAliasCount: -1 });
  });
}

describe('properties', () => {
  it(`streams with nothing to rewrite come out byte-identical (${RUNS} runs)`, () => {
    fc.assert(
      fc.property(streamOf(fc.array(fc.oneof(passThroughDoc, cpuVllmDeployment), { minLength: 0, maxLength: 6 })), (stream) => {
        const result = transform(stream, options);
        expect(result.errors).toEqual([]);
        expect(result.output).toBe(stream);
      }),
      { numRuns: RUNS },
    );
  });

  it(`the transform is idempotent (${RUNS} runs)`, () => {
    fc.assert(
      fc.property(streamOf(fc.array(fc.oneof(passThroughDoc, targetDoc.map((t) => t.text)), { minLength: 1, maxLength: 5 })), (stream) => {
        const once = transform(stream, options);
        expect(once.errors).toEqual([]);
        const twice = transform(once.output, options);
        expect(twice.errors).toEqual([]);
        expect(twice.output).toBe(once.output);
      }),
      { numRuns: RUNS },
    );
  });

  it(`rewritten documents differ only in command/args, and keep the start after "--" (${RUNS} runs)`, () => {
    fc.assert(
      fc.property(fc.array(fc.oneof(passThroughDoc.map((text) => ({ text, start: null as string[] | null })), targetDoc), { minLength: 1, maxLength: 4 }), fc.boolean(), (docs, crlf) => {
        let stream = docs.map((d) => `---\n${d.text}`).join('');
        if (crlf) stream = stream.replace(/\n/g, '\r\n');
        const result = transform(stream, options);
        expect(result.errors).toEqual([]);
        const before = readAll(stream) as any[];
        const after = readAll(result.output) as any[];
        expect(after.length).toBe(before.length);
        docs.forEach((doc, i) => {
          if (doc.start === null) {
            expect(after[i]).toEqual(before[i]);
            return;
          }
          const inContainer = before[i].spec.template.spec.containers[0];
          const outContainer = after[i].spec.template.spec.containers[0];
          expect(outContainer.command).toEqual(['/bin/sh', '-ec']);
          expect(outContainer.args[1]).toBe('--');
          expect(outContainer.args.slice(2)).toEqual(doc.start);
          const strip = (o: any) => {
            const copy = structuredClone(o);
            delete copy.spec.template.spec.containers[0].command;
            delete copy.spec.template.spec.containers[0].args;
            return copy;
          };
          expect(strip(after[i])).toEqual(strip(before[i]));
          expect(inContainer.name).toBe(outContainer.name);
        });
      }),
      { numRuns: RUNS },
    );
  });
});
