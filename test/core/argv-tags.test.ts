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
