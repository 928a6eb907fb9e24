/**
 * command/args items as go-yaml (Helm, kubectl, the API server) reads them:
 * only an untagged or `!!str` scalar is the string written there; `?x` in a
 * flow sequence is an explicit key (the mapping {x: null}), in a block
 * sequence the string "?x".
 */
import { describe, expect, it } from 'vitest';
import { runCli } from './run-cli.js';

const pod = (command: string, args = '["--model", "q"]') => `apiVersion: v1
kind: Pod
metadata:
  name: p
spec:
  containers:
    - name: vllm
      image: vllm/vllm-openai:v0.8.0
      command: ${command}
      args: ${args}
      resources:
        limits:
          nvidia.com/gpu: 1
`;

describe('tagged command/args items', () => {
  for (const tagged of ['!!int 8000', '!!float 8000', '!!binary ODAwMA==', '!!bool true', '!!null ~', '!!timestamp 2001-12-14', '!local 8000', '!<tag:example.com,2000:x> 8000']) {
    it(`${tagged} is refused, naming the item`, async () => {
      const run = await runCli([], pod('["vllm", "serve"]', `["--port", ${tagged}]`));
      expect(run.code).toBe(1);
      expect(run.stdout).toBe('');
      expect(run.stderr).toContain('error BAD_CONTAINER: ');
      expect(run.stderr).toContain('args[1] of the container is tagged');
      expect(run.stderr).toContain('fix: drop the tag and write args[1] as a quoted string');
    });
  }

  it('!!str and no tag are the strings written there', async () => {
    const run = await runCli([], pod('[vllm, !!str serve]', '["--port", !!str 8000, --gpu-memory-utilization, "0.9"]'));
    expect(run.stderr).toBe('');
    expect(run.code).toBe(0);
    expect(run.stdout).toContain('- "serve"\n');
    expect(run.stdout).toContain('- "8000"\n');
  });

  it('a tag reached through an alias is refused as well', async () => {
    const run = await runCli([], pod('[vllm, serve]', '[&port !!binary ODAwMA==, *port]'));
    expect(run.code).toBe(1);
    expect(run.stderr).toContain('args[0] of the container is tagged !!binary');
  });
});

describe('? in command/args items', () => {
  it('[?x, vllm, serve] is refused: go-yaml reads ?x as a mapping', async () => {
    const run = await runCli([], pod('[?x, vllm, serve]'));
    expect(run.code).toBe(1);
    expect(run.stderr).toContain('command[0] of the container is not a string: in a flow sequence go-yaml');
    expect(run.stderr).toContain('fix: quote command[0]');
  });

  it('an alias of a flow ?x is refused as well', async () => {
    const run = await runCli([], pod('[vllm, serve]', '[--model, &m ?x, *m]'));
    expect(run.code).toBe(1);
    expect(run.stderr).toContain('args[1] of the container is not a string');
  });

  it('"?x" quoted, and ?x in a block sequence, are the string ?x (as for go-yaml)', async () => {
    const quoted = await runCli([], pod('[vllm, serve]', '["--served-model-name", "?x", --gpu-memory-utilization, "0.9"]'));
    expect(quoted.code).toBe(0);
    expect(quoted.stdout).toContain('- "?x"\n');
    const block = await runCli([], pod('[vllm, serve]', '\n        - --served-model-name\n        - ?x\n        - --gpu-memory-utilization=0.9'));
    expect(block.stderr).toBe('');
    expect(block.code).toBe(0);
    expect(block.stdout).toContain('- "?x"\n');
  });
});

// Command/args items as sigs.k8s.io/yaml's go-yaml v2 reads them (docs/detection.md §2).
describe('plain command/args items go-yaml reads as no string', () => {
  // goyaml.v2/resolve.go: YAML 1.1 booleans and nulls, Go integers (0x, 0o, 0b, leading-0 octal, `_`), yamlStyleFloat.
  for (const plain of ['8000', 'true', 'yes', 'on', 'Off', 'n', '0x10', '0o17', '017', '0b101', '1e3', '1_000', '+12', '-1', '.5', '0.9', '08', '~', 'null', '.inf', '-.Inf', '.NaN', '99999999999999999999999']) {
    it(`${plain} is refused (BAD_CONTAINER), as the API server refuses it in a string list`, async () => {
      const run = await runCli([], pod('["vllm", "serve"]', `["--port", ${plain}]`));
      expect(run.code).toBe(1);
      expect(run.stdout).toBe('');
      expect(run.stderr).toContain(`error BAD_CONTAINER: `);
      expect(run.stderr).toContain(`args[1] of the container is the plain ${JSON.stringify(plain)}, which go-yaml (Helm, kubectl) reads as`);
      expect(run.stderr).toContain(`fix: quote args[1] ("${plain}")`);
    });
  }

  // Strings to go-yaml: a timestamp shape decodes back to its text, `<<` is the merge key's text, 1e999 overflows Go's ParseFloat.
  for (const plain of ['x8000', '2001-12-14', '1e999', '<<', '0x', '--1', '1.2.3', 'v1', '.x', 'yes-no', 'True1', '0b102']) {
    it(`${plain} is the string written there`, async () => {
      const run = await runCli([], pod('["vllm", "serve"]', `["--x", ${plain}, "--gpu-memory-utilization", "0.9"]`));
      expect(run.stderr).toBe('');
      expect(run.code).toBe(0);
      expect(run.stdout).toContain(`- ${JSON.stringify(plain)}\n`);
    });
  }

  it('in block style too, and quoted they are strings', async () => {
    const block = `apiVersion: v1
kind: Pod
metadata:
  name: p
spec:
  containers:
    - name: vllm
      image: vllm/vllm-openai:v0.8.0
      command:
        - vllm
        - serve
      args:
        - --port
        - PORT
      resources:
        limits:
          nvidia.com/gpu: 1
`;
    expect((await runCli([], block.replace('PORT', '8000'))).stderr).toContain('args[1] of the container is the plain "8000"');
    const quoted = await runCli([], block.replace('PORT', '"8000"').replace('- --port', '- --gpu-memory-utilization\n        - "0.9"\n        - --port'));
    expect(quoted.code).toBe(0);
  });
});

describe('NEL, LS and PS in command/args items: line breaks to go-yaml', () => {
  it.each([
    ['"qwen\u0085chat"', 'qwen chat'],
    ["'qwen\u0085chat'", 'qwen chat'],
    ['"qwen \u0085  chat"', 'qwen chat'],
    ['"qwen\u0085\u0085chat"', 'qwen\nchat'],
    ['"qwen\u2028chat"', 'qwen\u2028chat'],
    ['"qwen \u2029 chat"', 'qwen\u2029chat'],
  ])('%j reads as %j (a NEL folds like a line feed; LS and PS are kept, the blanks around them dropped)', async (item, value) => {
    const run = await runCli([], pod('["vllm", "serve"]', `["--served-model-name", ${item}, "--gpu-memory-utilization", "0.9"]`));
    expect(run.stderr).toBe('');
    expect(run.code).toBe(0);
    const args = /- "--served-model-name"\n\s*- (".*")\n/.exec(run.stdout)?.[1];
    expect(JSON.parse(args!)).toBe(value);
  });

  it.each([['qwen\u0085chat'], ['qwen\u2028chat']])('plain %j: refused, go-yaml ends the scalar at the break', async (item) => {
    const run = await runCli([], pod('["vllm", "serve"]', `["--served-model-name", ${item}]`));
    expect(run.code).toBe(1);
    expect(run.stderr).toContain('holds a raw NEL, LS or PS (U+0085, U+2028, U+2029), which go-yaml (Helm, kubectl) reads as a line break that ends the scalar there');
  });

  // The rule, not only command/args items: go-yaml ends a comment, a plain or a block scalar at the
  // break, so the text after it is a line the cluster reads and YAML 1.2 does not.
  const block = (line: string, meta = '') => `apiVersion: v1
kind: Pod
metadata:
  name: p${meta}
spec:
  containers:
    - name: vllm
      image: vllm/vllm-openai:v0.8.0
      command: ["vllm", "serve"]
      args:
        - --gpu-memory-utilization=0.9${line}
      resources:
        limits:
          nvidia.com/gpu: 1
`;

  it.each([
    ['NEL', ' # note\u0085        - --gpu-memory-utilization=0.5', 'NEL (U+0085)'],
    ['LS', ' # note\u2028        - --gpu-memory-utilization=0.5', 'LS (U+2028)'],
    ['PS, in metadata,', '', 'PS (U+2029)', ' # x\u2029  annotations: {vram-preflight.io/skip: "true"}'],
  ])('%s in a comment with text after it: refused (YAML_SYNTAX, line and column), as that text is a line to Helm and kubectl', async (_what, line, name, meta = '') => {
    const run = await runCli([], block(line, meta));
    expect(run.code).toBe(1);
    expect(run.stdout).toBe('');
    expect(run.stderr).toContain(`error YAML_SYNTAX: Pod/p (document 1, line 1), line ${meta ? 4 : 11}, column `);
    expect(run.stderr).toContain(`a raw ${name} outside a quoted string, with text after it on its line: go-yaml (Helm, kubectl) reads it as a line break`);
  });

  it('in a block scalar outside command/args (an annotation), with text after it: refused as well', async () => {
    const run = await runCli([], block('', '\n  annotations:\n    note: |\n      a\u0085b: c'));
    expect(run.code).toBe(1);
    expect(run.stderr).toContain('error YAML_SYNTAX: ');
  });

  it('at a line end (only blanks after it), or in a quoted string outside command/args: read and wrapped, nothing changes for go-yaml', async () => {
    for (const text of [block(' # note\u0085  '), block('', '\n  annotations:\n    note: "a\u0085b"')]) {
      const run = await runCli([], text);
      expect(run.stderr).toBe('');
      expect(run.code).toBe(0);
      expect(run.stdout).toContain('# vram-preflight ');
    }
  });
});
