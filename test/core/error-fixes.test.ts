/**
 * Every error the program can raise says how to fix it (docs/errors.md
 * promises a `fix:` line), and `explain` prints input text as error messages
 * do: control characters escaped.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { runCli } from './run-cli.js';

const SRC = path.resolve(import.meta.dirname, '../../src');

function filesUnder(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const full = path.join(dir, name);
    return statSync(full).isDirectory() ? filesUnder(full) : name.endsWith('.ts') ? [full] : [];
  });
}

/** The text of each `new PreflightError(...)` call, up to its closing parenthesis. */
function constructorCalls(text: string): { line: number; call: string }[] {
  const calls: { line: number; call: string }[] = [];
  for (let at = text.indexOf('new PreflightError('); at !== -1; at = text.indexOf('new PreflightError(', at + 1)) {
    let depth = 0;
    let end = at + 'new PreflightError'.length;
    for (; end < text.length; end++) {
      if (text[end] === '(') depth++;
      else if (text[end] === ')' && --depth === 0) break;
    }
    calls.push({ line: text.slice(0, at).split('\n').length, call: text.slice(at, end + 1) });
  }
  return calls;
}

const deployment = (annotations: string, container: string) => `apiVersion: apps/v1
kind: Deployment
metadata:
  name: m
spec:
  template:
    metadata:
      annotations:
${annotations}
    spec:
      containers:
${container}
`;
const VLLM = `        - name: vllm
          image: vllm/vllm-openai:v0.8.0
          command: ["vllm", "serve", "q"]
          resources:
            limits:
              nvidia.com/gpu: 1`;

function expectFix(stderr: string, code: string): void {
  expect(stderr).toContain(`error ${code}: `);
  expect(stderr).toMatch(/\n {2}fix: \S/);
}

describe('every PreflightError has a fix', () => {
  it('each `new PreflightError(` in src/ passes a fix', () => {
    const calls = filesUnder(SRC).flatMap((file) => constructorCalls(readFileSync(file, 'utf8')).map((c) => ({ ...c, file: path.relative(SRC, file) })));
    expect(calls.length).toBeGreaterThan(40);
    const withoutFix = calls.filter(({ call }) => !/\bfix\b/.test(call)).map(({ file, line }) => `${file}:${line}`);
    expect(withoutFix).toEqual([]);
  });

  it('BAD_ANNOTATION: a containers annotation that is not a string', async () => {
    const run = await runCli([], deployment('        vram-preflight.io/containers: [vllm]', VLLM));
    expect(run.code).toBe(1);
    expect(run.stdout).toBe('');
    expectFix(run.stderr, 'BAD_ANNOTATION');
  });

  it('BAD_ANNOTATION: a utilization annotation that is not a string', async () => {
    const run = await runCli([], deployment('        vram-preflight.io/gpu-memory-utilization: 0.9', VLLM));
    expect(run.code).toBe(1);
    expectFix(run.stderr, 'BAD_ANNOTATION');
    expect(run.stderr).toContain('fix: quote the value: vram-preflight.io/gpu-memory-utilization: "0.9"');
  });

  it('BAD_CONFIG: a config file that cannot be read, and one that is not YAML', async () => {
    const missing = await runCli(['--config', 'no-such-config.yaml'], 'a: 1\n', { cwd: import.meta.dirname });
    expect(missing.code).toBe(2);
    expectFix(missing.stderr, 'BAD_CONFIG');
    const broken = await runCli(['--config', 'error-fixes.test.ts'], 'a: 1\n', { cwd: import.meta.dirname });
    expect(broken.code).toBe(2);
    expect(broken.stderr).toContain('is not valid YAML');
    expectFix(broken.stderr, 'BAD_CONFIG');
  });

  it('an unresolved alias', async () => {
    const run = await runCli([], deployment('        a: b', VLLM.replace('command: ["vllm", "serve", "q"]', 'command: *start')));
    expect(run.code).toBe(1);
    expect(run.stderr).toContain('Unresolved alias');
    expectFix(run.stderr, 'YAML_SYNTAX');
    expect(run.stderr).toContain('fix: set the anchor (&name) before the alias (*name)');
  });

  it('resolve without a registry client', async () => {
    const run = await runCli(['resolve', 'vllm/vllm-openai:v0.8.0'], '');
    expect(run.stdout).toBe('');
    expectFix(run.stderr, 'IO');
  });

  it.each([
    ['unreachable', 'the registry cannot be reached from here: check the way to it (HTTPS_PROXY/NO_PROXY, --registry-ca-file'],
    ['denied', 'give credentials for this registry: `docker login <registry>` writes them into ~/.docker/config.json, which resolve reads'],
    ['not-found', 'check the repository and tag: the registry has no r.example/team/vllm:v1 (skopeo list-tags docker://r.example/team/vllm lists the tags)'],
    ['invalid', 'check the image reference and --registry-platform (docs/registry-lookup.md)'],
  ] as const)('resolve: a lookup that failed (%s) gets the fix for what failed', async (kind, fix) => {
    const { main } = await import('../../src/cli/main.js');
    let stdout = '';
    let stderr = '';
    const code = await main(['resolve', 'r.example/team/vllm:v1'], {
      stdin: (async function* () {})(),
      stdout: { write: (t: string) => (stdout += t) },
      stderr: { write: (t: string) => (stderr += t) },
      env: {},
      readFile: () => '',
      writeFile: () => undefined,
      lookupImageStarts: async (images) => new Map(images.map((image) => [image, { image, error: `${kind} (as the registry client says)`, kind }])),
    });
    expect(code).toBe(1);
    expect(stdout).toBe('');
    expect(stderr).toContain(`vram-preflight: error IO: image "r.example/team/vllm:v1": ${kind} (as the registry client says)\n  fix: ${fix}`);
  });
});

describe('explain escapes text from the input', () => {
  it('a container name with an escape sequence and a line break stays on its row, inert', async () => {
    const name = String.raw`"vllm\e[2J\nforged"`;
    const run = await runCli(['explain'], deployment('        a: b', VLLM.replace('name: vllm', `name: ${name}`)));
    expect(run.code).toBe(0);
    expect(run.stdout).not.toMatch(/[\u0000-\u0009\u000b-\u001f\u007f-\u009f]/);
    expect(run.stdout).not.toMatch(/^forged/m);
    const row = run.stdout.split('\n').find((line) => line.startsWith('Deployment/m'));
    expect(row).toContain(String.raw`vllm\x1b[2J\nforged`);
    expect(run.stdout).toContain(String.raw`Deployment/m vllm\x1b[2J\nforged: start from`);
  });
});
