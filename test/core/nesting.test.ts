/**
 * A field nested ~820 levels deep made the render fail with
 * `YAML_SYNTAX … Maximum call stack size exceeded`, a JavaScript error dressed as a syntax
 * error. Now a document deeper than MAX_NESTING is refused with NESTING_TOO_DEEP, naming the
 * limit, before any parse; a layout the bound undercounts gets the same error, never a stack
 * overflow (docs/errors.md, error-nesting-too-deep).
 */
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { depthBeyond, MAX_NESTING, nestingDepth } from '../../src/core/yaml/depth.js';
import { runCli } from './run-cli.js';

const pod = (annotation: string) => `apiVersion: v1
kind: Pod
metadata:
  name: p
  annotations:
    x: ${annotation}
spec:
  containers:
    - name: vllm
      image: vllm/vllm-openai:v0.8.0
      command: [vllm, serve, --gpu-memory-utilization, "0.9"]
      resources:
        limits:
          nvidia.com/gpu: 1
`;

describe('documents nested deeper than vram-preflight reads', () => {
  it.each([820, 10_000])('%i levels of flow sequences: NESTING_TOO_DEEP, naming the limit, nothing on stdout', async (n) => {
    const run = await runCli([], pod('['.repeat(n) + ']'.repeat(n)));
    expect(run.code).toBe(1);
    expect(run.stdout).toBe('');
    expect(run.stderr).toContain(`error NESTING_TOO_DEEP: Pod/p (document 1, line 1): the document nests ${n + 3} levels deep; vram-preflight reads documents up to ${MAX_NESTING} levels deep (go-yaml, which Helm and kubectl use, up to 10,000)`);
    expect(run.stderr).not.toMatch(/call stack|YAML_SYNTAX|INTERNAL/);
  });

  it('400 levels: read and wrapped as usual', async () => {
    const run = await runCli([], pod('['.repeat(400) + ']'.repeat(400)));
    expect(run.stderr).toBe('');
    expect(run.code).toBe(0);
    expect(run.stdout).toContain('# vram-preflight ');
  });

  it('a layout the bound does not count (3,000 explicit keys on one line) gets the same error, not a stack overflow', async () => {
    const run = await runCli([], pod('\n      ' + '? '.repeat(3000) + 'x'));
    expect(run.code).toBe(1);
    expect(run.stderr).toContain('error NESTING_TOO_DEEP: Pod/p (document 1, line 1): the document nests deeper than its reader can follow (the JavaScript call stack ran out)');
  });

  it('nestingDepth counts block levels, dashes and flow brackets, not what is inside quotes, comments or block scalars', () => {
    expect(nestingDepth('a:\n  b:\n    c: 1\n')).toBe(3);
    expect(nestingDepth('- - - x\n')).toBe(4);
    expect(nestingDepth('a: [[1], {b: [2]}]\n')).toBe(4);
    expect(nestingDepth('a: "[[[[" # [[[[\nb: \'[{\'\n')).toBe(1);
    expect(nestingDepth('a: |\n  [[[[[[\n    - - - -\nb: 1\n')).toBe(1);
    expect(nestingDepth("a: don't [x]\n")).toBe(2);
  });

  it('depthBeyond answers as nestingDepth does against any limit: the count it starts with never hides a deeper text', () => {
    const beyond = (text: string, limit: number) => (nestingDepth(text) > limit ? nestingDepth(text) : undefined);
    // Texts of the characters the two read: lines, indentation, dashes, brackets, quotes, comments, block scalar headers.
    const text = fc.array(fc.constantFrom('\n', ' ', '  ', '- ', '-', '[', ']', '{', '}', 'a', 'b: ', '"', "'", ' #', '|', '>'), { maxLength: 60 }).map((parts) => parts.join(''));
    fc.assert(
      fc.property(text, fc.integer({ min: 0, max: 12 }), (t, limit) => {
        expect(depthBeyond(t, limit)).toBe(beyond(t, limit));
      }),
      { numRuns: 3000 },
    );
    const fixtures = path.resolve(__dirname, '../../fixtures');
    const files = readdirSync(fixtures, { recursive: true, encoding: 'utf8' }).filter((f) => f.endsWith('.yaml'));
    expect(files.length).toBeGreaterThan(20);
    for (const file of files) {
      const t = readFileSync(path.join(fixtures, file), 'utf8');
      for (const limit of [0, 3, 10, nestingDepth(t) - 1, nestingDepth(t), MAX_NESTING]) expect(depthBeyond(t, limit), `${file} limit ${limit}`).toBe(beyond(t, limit));
    }
  });
});
