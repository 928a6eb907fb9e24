/**
 * Seeded structural fuzzing: pods whose containers share text through
 * anchors, aliases and `<<` merge keys, repeat keys, spell keys with quotes or
 * explicit `?`, and mix flow and block lists. For every stream:
 * - on success: the output parses; every byte outside the wrapped containers
 *   is the input's; the argv after "--" is exactly the start Kubernetes would
 *   have run (read with merge keys and last-wins duplicates, as the cluster
 *   reads it); every container that is not wrapped keeps its command and args;
 *   a container whose start is unknown is never wrapped; feeding the output
 *   back returns it unchanged;
 * - on error: the output is empty.
 * CI runs FUZZ_RUNS (default 2000) from a fixed seed; locally, run longer with
 * FUZZ_RUNS=50000 FUZZ_SEED=<n>.
 */
import fc from 'fast-check';
import { isMap, isSeq, parseAllDocuments, type YAMLMap } from 'yaml';
import { describe, expect, it } from 'vitest';
import { DEFAULT_OPTIONS, type Options } from '../../src/config/sources.js';
import { transform } from '../../src/core/transform.js';
import type { Plain } from '../../src/core/values.js';

const RUNS = Number(process.env.FUZZ_RUNS ?? 2000);
const SEED = Number(process.env.FUZZ_SEED ?? 20261202);
const options: Options = { ...DEFAULT_OPTIONS, registryLookup: 'never' };
const READ = { uniqueKeys: false, merge: true } as const;

/** Images and what they run without a command; undefined: unknown (must be refused, never wrapped). */
const IMAGES: Record<string, string[] | undefined> = {
  'vllm/vllm-openai:v0.26.0': ['vllm', 'serve'],
  'lmcache/vllm-openai:latest': ['/opt/venv/bin/vllm', 'serve'],
  'vllm/vllm-openai:v0.12.0': undefined,
  'busybox:1.36': undefined,
};

const word = fc.constantFrom('m', 'Qwen/Qwen3-8B', '--port', '8000', '$(HOME)', "it's", 'a b', '# x', '- y', '0.9', '"q"');
const flow = (items: string[]) => `[${items.map((i) => JSON.stringify(i)).join(', ')}]`;
const block = (items: string[], indent: string) => items.map((i) => `\n${indent}  - ${JSON.stringify(i)}`).join('');

interface ContainerSpec {
  name: string;
  image: keyof typeof IMAGES;
  command?: string[];
  args?: string[] | null;
  gpu: boolean;
  anchor: boolean;
  mergeFrom?: number;
  explicitCommandKey: boolean;
  quotedKeys: boolean;
  flowLists: boolean;
  duplicateImage: boolean;
  anchoredArg: boolean;
}

const commands = fc.constantFrom<string[] | undefined>(undefined, ['vllm', 'serve', 'm'], ['python3', '-m', 'vllm.entrypoints.openai.api_server'], ['sh', '-c', 'echo hi'], ['/bin/sh', '-c', 'vllm serve m --gpu-memory-utilization 0.8']);
const argLists = fc.oneof(fc.constant(undefined), fc.constant(null), fc.array(word, { maxLength: 4 }), fc.array(word, { maxLength: 3 }).map((w) => [...w, '--gpu-memory-utilization', '0.85']));

const container = (i: number) =>
  fc
    .record({
      image: fc.constantFrom(...(Object.keys(IMAGES) as (keyof typeof IMAGES)[])),
      command: commands,
      args: argLists,
      gpu: fc.boolean(),
      anchor: fc.boolean(),
      merge: fc.option(fc.nat({ max: 3 }), { nil: undefined }),
      explicitCommandKey: fc.boolean(),
      quotedKeys: fc.boolean(),
      flowLists: fc.boolean(),
      duplicateImage: fc.boolean(),
      anchoredArg: fc.boolean(),
    })
    .map((r): ContainerSpec => ({ ...r, name: `c${i}`, mergeFrom: r.merge !== undefined && r.merge < i ? r.merge : undefined }));

const pod = fc.integer({ min: 1, max: 4 }).chain((n) => fc.tuple(...Array.from({ length: n }, (_, i) => container(i))));

function renderContainer(c: ContainerSpec, anchored: Set<number>, index: number): string {
  const ind = '      ';
  const key = (k: string) => (c.quotedKeys ? `'${k}'` : k);
  const lines: string[] = [];
  const first = `- ${c.anchor ? `&c${index} ` : ''}`;
  const merge = c.mergeFrom !== undefined && anchored.has(c.mergeFrom) ? `<<: *c${c.mergeFrom}` : undefined;
  const entries: string[] = [];
  if (merge) entries.push(merge);
  entries.push(`${key('name')}: ${c.name}`);
  if (c.duplicateImage) entries.push(`${key('image')}: busybox:0.1`);
  entries.push(`${key('image')}: ${c.image}`);
  if (c.command) {
    const list = c.flowLists ? ` ${flow(c.command)}` : block(c.command, ind);
    entries.push(c.explicitCommandKey ? `? ${key('command')}\n${ind}:${list}` : `${key('command')}:${list}`);
  }
  if (c.args === null) entries.push(`${key('args')}:`);
  else if (c.args) {
    const items = c.args.map((a, j) => (j === 0 && c.anchoredArg ? `&a${index} ${JSON.stringify(a)}` : JSON.stringify(a)));
    entries.push(c.flowLists ? `${key('args')}: [${items.join(', ')}]` : `${key('args')}:${items.map((i) => `\n${ind}  - ${i}`).join('')}`);
    if (c.anchoredArg && c.args.length) entries.push(`env:\n${ind}  - name: FIRST\n${ind}    value: *a${index}`);
  }
  if (c.gpu) entries.push(`resources:\n${ind}  limits:\n${ind}    nvidia.com/gpu: 1`);
  // An anchor before the first key would label the key: it goes on its own line to label the container.
  if (c.anchor) lines.push(`${ind.slice(2)}${first.trimEnd()}`, `${ind}${entries[0]}`);
  else lines.push(`${ind.slice(2)}${first}${entries[0]}`);
  for (const e of entries.slice(1)) lines.push(`${ind}${e}`);
  return lines.join('\n');
}

function renderPod(containers: ContainerSpec[]): string {
  const anchored = new Set(containers.flatMap((c, i) => (c.anchor ? [i] : [])));
  return `apiVersion: v1\nkind: Pod\nmetadata:\n  name: fuzz\n  labels:\n    app: a\n    app: b\nspec:\n  containers:\n${containers.map((c, i) => renderContainer(c, anchored, i)).join('\n')}\n`;
}


function containersOf(text: string): { values: Plain[]; nodes: YAMLMap[] } {
  const [doc] = parseAllDocuments(text, READ) as ReturnType<typeof parseAllDocuments> & unknown[];
  const d = doc as import('yaml').Document;
  const value = d.toJS() as Plain;
  const seq = (d.contents as YAMLMap).get("spec", true) as unknown as YAMLMap;
  const list = seq.get('containers', true);
  return { values: ((value.spec as Plain).containers as Plain[]) ?? [], nodes: isSeq(list) ? (list.items.filter((n) => isMap(n)) as YAMLMap[]) : [] };
}

/** The argv Kubernetes runs for a container read as the cluster reads it. */
function expectedStart(c: Plain): string[] | undefined {
  const command = Array.isArray(c.command) && c.command.length ? (c.command as unknown[]).map(String) : undefined;
  const args = Array.isArray(c.args) && c.args.length ? (c.args as unknown[]).map(String) : undefined;
  if (command) return [...command, ...(args ?? [])];
  const entrypoint = IMAGES[String(c.image)];
  if (!entrypoint) return undefined;
  return [...entrypoint, ...(args ?? [])];
}

describe('structural fuzzing (seeded)', () => {
  it(`${RUNS} generated pods keep every start and every byte they must`, () => {
    const seen = { runs: 0, wrapped: 0, wrappedThroughMerge: 0, refused: 0, unsafe: 0 };
    fc.assert(
      fc.property(pod, (containers) => {
        const input = renderPod(containers);
        const inputRead = containersOf(input);
        const result = transform(input, options);
        seen.runs++;
        if (result.errors.length) {
          seen.refused++;
          if (result.errors.some((e) => e.code === 'UNSAFE_EDIT')) seen.unsafe++;
          expect(result.output).toBe('');
          return;
        }
        const wraps = result.containers.filter((r) => r.action === 'wrap');
        if (wraps.length) seen.wrapped++;
        if (wraps.some((r) => containers.find((c) => c.name === r.container)?.mergeFrom !== undefined)) seen.wrappedThroughMerge++;
        const output = result.output;
        const outputRead = containersOf(output);
        expect(outputRead.values.length).toBe(inputRead.values.length);
        const wrappedNames = new Set(result.containers.filter((r) => ['wrap', 'rewrap', 'unchanged'].includes(r.action)).map((r) => r.container));
        // Bytes outside the edited containers are the input's, in order.
        let at = 0;
        let cursor = 0;
        const edited = inputRead.nodes.filter((n, i) => wrappedNames.has(String(inputRead.values[i]?.name))).map((n) => n.range!);
        for (const [start, end] of [...edited].sort((a, b) => a[0] - b[0])) {
          const piece = input.slice(cursor, start);
          const found = output.indexOf(piece, at);
          expect(found, `bytes before offset ${start} changed`).toBeGreaterThanOrEqual(0);
          at = found + piece.length;
          cursor = end;
        }
        expect(output.indexOf(input.slice(cursor), at)).toBeGreaterThanOrEqual(0);
        inputRead.values.forEach((before, i) => {
          const after = outputRead.values[i]!;
          if (wrappedNames.has(String(before.name))) {
            const start = expectedStart(before);
            expect(start, `${String(before.name)} was wrapped although its start is unknown`).toBeDefined();
            expect(after.command).toEqual(['/bin/sh', '-ec']);
            expect((after.args as string[]).slice(2)).toEqual(start);
            expect((after.args as string[])[1]).toBe('--');
          } else {
            expect(after.command ?? null, `${String(before.name)} changed its command`).toEqual(before.command ?? null);
            expect(after.args ?? null, `${String(before.name)} changed its args`).toEqual(before.args ?? null);
          }
          const rest = (v: Plain) => ({ ...v, command: undefined, args: undefined });
          expect(rest(after)).toEqual(rest(before));
        });
        const again = transform(output, options);
        expect(again.errors).toEqual([]);
        expect(again.output).toBe(output);
      }),
      { numRuns: RUNS, seed: SEED },
    );
    // The generator must reach the cases that matter, or passing proves little.
    expect(seen.wrapped / seen.runs).toBeGreaterThan(0.2);
    expect(seen.wrappedThroughMerge).toBeGreaterThan(RUNS / 100);
    expect(seen.refused / seen.runs).toBeGreaterThan(0.03);
    console.log(`fuzz: ${JSON.stringify(seen)}`);
  }, 120_000);
});
