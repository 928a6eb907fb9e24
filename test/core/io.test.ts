/**
 * The process around the CLI, through the built bundle (scripts/build.mjs into
 * a temp dir): stdin/stdout on fds (blocking or not), write failures (exit 74,
 * one line on stderr), the V8 code cache of the launcher (src/cli/launcher.ts),
 * and, for every fixture case, the same stdout, stderr and exit code as the
 * CLI run in-process from source: the bundle (yaml's ES module build,
 * minified, compiled through the launcher with or without its cache) behaves
 * exactly as the code the other tests test.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generate } from '../../scripts/bench/generate.mjs';
import { runCli } from './run-cli.js';

const ROOT = path.resolve(import.meta.dirname, '../..');
const REAL = path.join(ROOT, 'fixtures/real');
const CASES = path.join(ROOT, 'fixtures/cases');
const vllm = readFileSync(path.join(REAL, 'vllm.input.yaml'));
const vllmExpected = readFileSync(path.join(REAL, 'vllm.expected.yaml'), 'utf8');
const isLinux = process.platform === 'linux';

let dir: string;
let bundle: string;
/** The environment of every run: no VRAM_PREFLIGHT_* or NODE_OPTIONS of the machine running the tests. */
const env = { PATH: process.env.PATH ?? '/usr/bin:/bin' };

beforeAll(() => {
  dir = mkdtempSync(path.join(tmpdir(), 'vram-preflight-io-'));
  bundle = path.join(dir, 'vram-preflight.cjs');
  execFileSync(process.execPath, [path.join(ROOT, 'scripts/build.mjs'), '--outfile', bundle], { stdio: ['ignore', 'ignore', 'inherit'] });
});

afterAll(() => {
  if (dir) {
    chmodSync(dir, 0o755);
    rmSync(dir, { recursive: true, force: true });
  }
});

/**
 * A vLLM Deployment whose `command` is one line longer than the launcher's
 * 1 MiB read piece (src/cli/process-io.ts), its only `word` cut after `cut`
 * characters by the piece's end: the launcher reads the lines before it as
 * one piece, then the long line from its start (shared reproducer
 * launcher-word-across-read-piece).
 */
function wordAcrossReadPiece(word: string, cut: number): string {
  const head = 'apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: m\nspec:\n  template:\n    spec:\n      containers:\n        - name: server\n          image: docker.io/library/python:3.12\n';
  const line = '          command: [';
  const pad = ' '.repeat((1 << 20) - cut - line.length);
  return `${head}${line}${pad}${word}, serve, Qwen/Qwen2-7B]\n          resources:\n            limits:\n              nvidia.com/gpu: "1"\n`;
}

/** The launcher and its application, copied into d (they go together); the launcher's path. */
function copyBundle(d: string): string {
  const b = path.join(d, 'vram-preflight.cjs');
  copyFileSync(bundle, b);
  copyFileSync(path.join(dir, 'vram-preflight.app.js'), path.join(d, 'vram-preflight.app.js'));
  return b;
}

const caches = (d: string) => readdirSync(d).filter((f) => f.endsWith('.v8cache'));
const sh = (script: string, input?: Buffer) =>
  spawnSync('/bin/sh', ['-c', script], { input, env: { ...env, NODE: process.execPath, BUNDLE: bundle }, encoding: 'utf8', maxBuffer: 1 << 28 });

describe('write failures: one line on stderr, exit 74, never a stack trace', () => {
  it.skipIf(!isLinux)('stdout closed (>&-): EBADF', () => {
    const r = sh('"$NODE" "$BUNDLE" >&-', vllm);
    expect(r.status).toBe(74);
    expect(r.stderr).toBe('vram-preflight: error: cannot write to stdout: EBADF (stdout is closed); the output is incomplete\n');
  });

  it.skipIf(!existsSync('/dev/full'))('stdout on a full disk (> /dev/full): ENOSPC', () => {
    const r = sh('"$NODE" "$BUNDLE" > /dev/full', vllm);
    expect(r.status).toBe(74);
    expect(r.stderr).toBe('vram-preflight: error: cannot write to stdout: ENOSPC (no space left on the device); the output is incomplete\n');
  });

  it('the reader goes away (| head -c 10): EPIPE', () => {
    // 2 MB of output: more than a pipe holds, so a write after head exits fails.
    const input = path.join(dir, 'big.yaml');
    writeFileSync(input, generate(400));
    const r = sh(`{ "$NODE" "$BUNDLE" < "${input}"; echo "exit $?" >&2; } | head -c 10`);
    expect(r.stdout).toHaveLength(10);
    expect(r.stderr).toBe('vram-preflight: error: cannot write to stdout: EPIPE (the reading end of the pipe was closed); the output is incomplete\nexit 74\n');
  });

  it('> /dev/null is not a closed stdout', () => {
    const r = sh('"$NODE" "$BUNDLE" > /dev/null', vllm);
    expect(r.status).toBe(0);
    expect(r.stderr).toBe('');
  });

  it('--version into a closed stdout fails too; no output into a closed stdout is fine', () => {
    if (!isLinux) return;
    expect(sh('"$NODE" "$BUNDLE" --version >&-').status).toBe(74);
    expect(sh('"$NODE" "$BUNDLE" < /dev/null >&-').status).toBe(0);
  });
});

describe('every door, the same process edges: a stdout that cannot be written is exit 74, a stdin that cannot be read exit 1, one line each', () => {
  const pod = path.join(ROOT, 'docs/examples/pod.yaml');
  const noStack = (stderr: string) => expect(stderr).not.toMatch(/Unhandled|^\s+at |node:events/m);

  it('admit, admit --help and webhook --help into a full disk (ENOSPC) and into a pipe whose reader went away (EPIPE)', () => {
    for (const args of ['admit', 'admit --help', 'webhook --help', 'admit --version']) {
      const full = sh(`"$NODE" "$BUNDLE" ${args} < "${pod}" > /dev/full`);
      expect(full.status, `${args} > /dev/full: ${full.stderr}`).toBe(74);
      expect(full.stderr.split('\n').filter(Boolean).pop()).toBe('vram-preflight: error: cannot write to stdout: ENOSPC (no space left on the device); the output is incomplete');
      noStack(full.stderr);
    }
    // 20 wrapped containers: more output than a pipe holds, so a write after head exits fails.
    const wide = path.join(dir, 'wide-pod.json');
    const container = { image: 'vllm/vllm-openai:v0.10.1', args: ['--model', 'm'], resources: { limits: { 'nvidia.com/gpu': '1' } } };
    writeFileSync(wide, JSON.stringify({ apiVersion: 'v1', kind: 'Pod', metadata: { name: 'p' }, spec: { containers: Array.from({ length: 20 }, (_, i) => ({ name: `c${i}`, ...container })) } }));
    const piped = sh(`{ "$NODE" "$BUNDLE" admit < "${wide}"; echo "exit $?" >&2; } | head -c 1`);
    expect(piped.stderr).toMatch(/vram-preflight: error: cannot write to stdout: EPIPE \(the reading end of the pipe was closed\); the output is incomplete\nexit 74\n$/);
    noStack(piped.stderr);
  });

  it('stdin a directory (< chart/templates) or open for writing only: every door says so in one line, exit 1, nothing on stdout', () => {
    const templates = path.join(dir, 'templates');
    mkdirSync(templates, { recursive: true });
    for (const args of ['', '--fast-parse off', 'explain', 'explain --output json', 'admit']) {
      const r = sh(`"$NODE" "$BUNDLE" ${args} < "${templates}"`);
      expect(r.status, `${args} < DIR: ${r.stderr}`).toBe(1);
      expect(r.stdout).toBe('');
      expect(r.stderr.split('\n')[0]).toBe('vram-preflight: error IO: cannot read stdin: it is a directory (EISDIR)');
      expect(r.stderr.split('\n').filter(Boolean)).toHaveLength(2); // the line and its fix
      noStack(r.stderr);
      const writeOnly = sh(`"$NODE" "$BUNDLE" ${args} 0> "${path.join(dir, 'write-only')}"`);
      expect(writeOnly.status, `${args} 0>FILE: ${writeOnly.stderr}`).toBe(1);
      expect(writeOnly.stderr.split('\n')[0]).toBe('vram-preflight: error IO: cannot read stdin: it is not open for reading (EBADF)');
      noStack(writeOnly.stderr);
    }
  });

  it("admit reads stdin as the webhook reads a body: past its limit it stops reading and says so", () => {
    const big = Buffer.alloc(8 << 20, 'a');
    const r = spawnSync(process.execPath, [bundle, 'admit'], { input: big, env, maxBuffer: 1 << 20 });
    expect(r.status).toBe(1);
    expect(r.stdout.length).toBe(0);
    expect(r.stderr.toString()).toMatch(/^vram-preflight: error USAGE: stdin holds more than 3670016 bytes, the most the webhook reads of one admission request\n/);
  });

  it("no Node process warning from the YAML library (a key that is a list or a mapping): in a manifest, in a config file", () => {
    const manifest = readFileSync(path.join(ROOT, 'docs/examples/pod.yaml'), 'utf8').replace('  labels:', '  annotations: {[x]: y}\n  labels:');
    for (const args of [[], ['explain'], ['admit']]) {
      const r = spawnSync(process.execPath, [bundle, ...args], { input: manifest, env, encoding: 'utf8' });
      expect(r.stderr, args.join(' ')).not.toMatch(/mapAsMap|\(node:\d+\) Warning|--trace-warnings/);
    }
    const config = path.join(dir, 'ipv6.yaml');
    writeFileSync(config, 'registryInsecure: [[fd00::1]:5000]\n');
    const r = spawnSync(process.execPath, [bundle, '--config', config], { input: vllm, env, encoding: 'utf8' });
    expect(r.status).toBe(2);
    expect(r.stderr).not.toMatch(/mapAsMap|\(node:\d+\) Warning/);
    expect(r.stderr).toContain('"[fd00::1]:5000" is read as a mapping whose key is a list or a mapping');
    expect(r.stderr).toContain('write "[fd00::1]:5000"');
  });
});

/** Runs the bundle with a stdin and/or stdout pipe in non-blocking mode, fed/read in slow pieces. */
function nonBlocking(input: Buffer, which: 'stdin' | 'stdout'): { code: number; stdout: Buffer; stderr: string } {
  const program = `
import fcntl, os, subprocess, sys, threading, time
which, node, bundle = sys.argv[1:4]
data = sys.stdin.buffer.read()
in_r, in_w = os.pipe()
out_r, out_w = os.pipe()
nb = in_r if which == 'stdin' else out_w
fcntl.fcntl(nb, fcntl.F_SETFL, fcntl.fcntl(nb, fcntl.F_GETFL) | os.O_NONBLOCK)
child = subprocess.Popen([node, bundle], stdin=in_r, stdout=out_w, stderr=subprocess.PIPE)
os.close(in_r); os.close(out_w)
def feed():
    step = 1000 if which == 'stdin' else 1 << 16
    for i in range(0, len(data), step):
        os.write(in_w, data[i:i + step])
        # the first piece, then nothing for longer than node takes to start: its read finds the pipe empty
        if which == 'stdin': time.sleep(0.5 if i == 0 else 0.002)
    os.close(in_w)
threading.Thread(target=feed).start()
out = []
while True:
    if which == 'stdout': time.sleep(0.002)
    chunk = os.read(out_r, 4096 if which == 'stdout' else 1 << 16)
    if not chunk: break
    out.append(chunk)
err = child.stderr.read()
code = child.wait()
sys.stderr.buffer.write(err)
sys.stdout.buffer.write(b''.join(out))
sys.exit(code)
`;
  const r = spawnSync('python3', ['-c', program, which, process.execPath, bundle], { input, env, maxBuffer: 1 << 28 });
  return { code: r.status ?? -1, stdout: r.stdout, stderr: r.stderr.toString() };
}

describe('non-blocking pipes (O_NONBLOCK set by the process that made them)', () => {
  it('stdin fed in 1 kB pieces: the whole input is read (EAGAIN: continues through process.stdin)', () => {
    const r = nonBlocking(vllm, 'stdin');
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout.toString()).toBe(vllmExpected);
  });

  it('stdout read slowly: nothing is lost (EAGAIN and partial writes: waits and continues)', () => {
    const input = Buffer.from(generate(300));
    const expected = spawnSync(process.execPath, [bundle], { input, env, maxBuffer: 1 << 28 }).stdout;
    expect(expected.length).toBeGreaterThan(1 << 20);
    const r = nonBlocking(input, 'stdout');
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout.equals(expected)).toBe(true);
  });
});

describe('Node.js older than 20', () => {
  it('the bundle says so in one line and exits 1, before it parses anything (Helm 3, npm, Argo CD run it directly)', () => {
    // This Node.js, made to say it is 18.19.0 before the bundle runs.
    const shim = path.join(dir, 'pretend-18.cjs');
    writeFileSync(shim, "Object.defineProperty(process, 'versions', { value: Object.assign({}, process.versions, { node: '18.19.0' }) });\nObject.defineProperty(process, 'version', { value: 'v18.19.0' });\n");
    const r = spawnSync(process.execPath, ['-r', shim, bundle], { input: vllm, env, encoding: 'utf8' });
    expect(r.status).toBe(1);
    expect(r.stdout).toBe('');
    expect(r.stderr).toBe(`vram-preflight: Node.js 20 or newer is needed; this is Node.js v18.19.0 (${process.execPath})\n`);
  });
});

describe('the launcher and its application (scripts/build.mjs writes both)', () => {
  it('the build writes the application next to the launcher, pure ASCII, named by the launcher', () => {
    const app = readFileSync(path.join(dir, 'vram-preflight.app.js'));
    expect(app.every((b) => b < 0x80)).toBe(true);
    expect(app.toString('latin1')).toMatch(/^\/\* vram-preflight application, build [0-9a-f]{16} \*\/\n\(function /);
    expect(statSync(bundle).size).toBeLessThan(8 * 1024);
  });

  it('no application next to the launcher: one line, exit 1, nothing on stdout', () => {
    const d = mkdtempSync(path.join(dir, 'no-app-'));
    const b = path.join(d, 'vram-preflight.cjs');
    copyFileSync(bundle, b);
    const r = spawnSync(process.execPath, [b], { input: vllm, env, encoding: 'utf8' });
    expect(r.status).toBe(1);
    expect(r.stdout).toBe('');
    expect(r.stderr).toBe(
      `vram-preflight: error: cannot read the application ${path.join(d, 'vram-preflight.app.js')} (ENOENT), which ${b} runs; install both files of one build side by side (docs/install.md)\n`,
    );
  });

  it('an application of another build: one line, exit 1, nothing on stdout, no cache written', () => {
    const d = mkdtempSync(path.join(dir, 'other-app-'));
    const b = copyBundle(d);
    const app = path.join(d, 'vram-preflight.app.js');
    writeFileSync(app, readFileSync(app, 'latin1').replace(/build [0-9a-f]{16}/, 'build 0123456789abcdef'), 'latin1');
    const r = spawnSync(process.execPath, [b], { input: vllm, env, encoding: 'utf8' });
    expect(r.status).toBe(1);
    expect(r.stdout).toBe('');
    expect(r.stderr).toBe(`vram-preflight: error: ${app} is not the application of the build of ${b}; install both files of one build side by side (docs/install.md)\n`);
    expect(caches(d)).toHaveLength(0);
  });

  it("the Helm 4 plugin's check (bin/node-version-guard.cjs) names a missing application before the launcher runs", () => {
    const d = mkdtempSync(path.join(dir, 'plugin-'));
    mkdirSync(path.join(d, 'bin'));
    mkdirSync(path.join(d, 'dist'));
    copyFileSync(path.join(ROOT, 'bin/node-version-guard.cjs'), path.join(d, 'bin/node-version-guard.cjs'));
    const b = path.join(d, 'dist/vram-preflight.cjs');
    copyFileSync(bundle, b);
    const r = spawnSync(process.execPath, ['-r', path.join(d, 'bin/node-version-guard.cjs'), b], { input: vllm, env, encoding: 'utf8' });
    expect(r.status).toBe(1);
    expect(r.stdout).toBe('');
    expect(r.stderr).toContain(`vram-preflight: the plugin has no bundle (${path.join(d, 'dist/vram-preflight.app.js')})`);
  });

  it('runs through a symbolic link to the launcher (npm and the Argo CD image link it onto PATH)', () => {
    if (!isLinux) return;
    const d = mkdtempSync(path.join(dir, 'link-'));
    const b = copyBundle(d);
    const link = path.join(mkdtempSync(path.join(dir, 'bin-')), 'vram-preflight');
    execFileSync('ln', ['-s', b, link]);
    const r = spawnSync(process.execPath, [link], { input: vllm, env, encoding: 'utf8' });
    expect(r.stderr).toBe('');
    expect(r.stdout).toBe(vllmExpected);
  });
});

describe('V8 code cache (src/cli/launcher.ts)', () => {
  it('is written next to the bundle by the first run, then used; output identical every time', () => {
    const d = mkdtempSync(path.join(dir, 'cache-'));
    const b = copyBundle(d);
    const first = spawnSync(process.execPath, [b, '--version'], { env, encoding: 'utf8' });
    expect(first.stdout).toBe(`${JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')).version}\n`);
    const written = caches(d);
    expect(written).toHaveLength(1);
    expect(written[0]).toMatch(new RegExp(`^vram-preflight\\.[0-9a-f]{16}\\.node-${process.version.replace(/\./g, '\\.')}-${process.arch}\\.v8cache$`));
    const mtime = () => readdirSync(d).map((f) => `${f}@${statSync(path.join(d, f)).mtimeMs}`).join();
    const before = mtime();
    for (let i = 0; i < 2; i++) {
      const r = spawnSync(process.execPath, [b], { input: vllm, env, encoding: 'utf8' });
      expect(r.stdout).toBe(vllmExpected);
      expect(r.stderr).toBe('');
    }
    expect(mtime()).toBe(before); // no temp file left, nothing rewritten
  });

  it('a cache written by a render is used by the next renders, not rewritten (the flags V8 records in it match)', () => {
    const d = mkdtempSync(path.join(dir, 'render-'));
    const b = copyBundle(d);
    const stamp = () => readdirSync(d).map((f) => `${f}@${statSync(path.join(d, f)).mtimeMs}`).join();
    const stamps: string[] = [];
    for (let i = 0; i < 3; i++) {
      const r = spawnSync(process.execPath, [b], { input: vllm, env, encoding: 'utf8' });
      expect(r.stdout).toBe(vllmExpected);
      expect(caches(d)).toHaveLength(1);
      stamps.push(stamp());
    }
    expect(stamps).toEqual([stamps[0], stamps[0], stamps[0]]);
  });

  it('a cache that V8 rejects is replaced; a corrupt one changes nothing of the output', () => {
    const d = mkdtempSync(path.join(dir, 'reject-'));
    const b = copyBundle(d);
    spawnSync(process.execPath, [b, '--version'], { env });
    const [name] = caches(d);
    const file = path.join(d, name!);
    execFileSync('/bin/sh', ['-c', `head -c 1000 /dev/urandom > "${file}"`]);
    const r = spawnSync(process.execPath, [b], { input: vllm, env, encoding: 'utf8' });
    expect(r.stdout).toBe(vllmExpected);
    expect(r.stderr).toBe('');
    expect(readFileSync(file).length).toBeGreaterThan(10_000);
  });

  it('a read-only directory: nothing written, nothing said', () => {
    const d = mkdtempSync(path.join(dir, 'ro-'));
    const b = copyBundle(d);
    // Root ignores directory modes: as root, make the directory a read-only mount in a namespace of its own.
    const asRoot = process.getuid?.() === 0;
    if (!asRoot) chmodSync(d, 0o555);
    const r = asRoot
      ? spawnSync('unshare', ['--mount', '--propagation', 'private', 'sh', '-c', 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && exec "$2" "$3"', 'sh', d, process.execPath, b], { input: vllm, env, encoding: 'utf8' })
      : spawnSync(process.execPath, [b], { input: vllm, env, encoding: 'utf8' });
    if (!asRoot) chmodSync(d, 0o755);
    expect(r.stderr).toBe('');
    expect(r.stdout).toBe(vllmExpected);
    expect(caches(d)).toHaveLength(0);
  });

  it('NODE_DISABLE_COMPILE_CACHE=1: neither read nor written', () => {
    const d = mkdtempSync(path.join(dir, 'off-'));
    const b = copyBundle(d);
    const r = spawnSync(process.execPath, [b], { input: vllm, env: { ...env, NODE_DISABLE_COMPILE_CACHE: '1' }, encoding: 'utf8' });
    expect(r.stdout).toBe(vllmExpected);
    expect(caches(d)).toHaveLength(0);
  });

  it('node flags of its own (NODE_OPTIONS) get a cache of their own', () => {
    const d = mkdtempSync(path.join(dir, 'flags-'));
    const b = copyBundle(d);
    spawnSync(process.execPath, [b, '--version'], { env });
    spawnSync(process.execPath, [b, '--version'], { env: { ...env, NODE_OPTIONS: '--max-old-space-size=512' } });
    expect(caches(d)).toHaveLength(2);
  });
});

describe('stdin: ASCII read as text piece by piece, anything else as UTF-8 bytes (src/cli/bin.ts)', () => {
  // More than one piece of src/cli/bin.ts (1 MiB), so that the first pieces are ASCII.
  const big = generate(600);
  const run = (input: Buffer, how: 'pipe' | 'file') => {
    if (how === 'pipe') return spawnSync(process.execPath, [bundle], { input, env, maxBuffer: 1 << 28 });
    const file = path.join(dir, 'stdin.yaml');
    writeFileSync(file, input);
    return spawnSync('/bin/sh', ['-c', '"$NODE" "$BUNDLE" < "$FILE"'], { env: { ...env, NODE: process.execPath, BUNDLE: bundle, FILE: file }, maxBuffer: 1 << 28 });
  };

  it.each(['pipe', 'file'] as const)('%s: UTF-8 after the first MiB, and a BOM, come out as the source CLI writes them', async (how) => {
    expect(big.length).toBeGreaterThan(3 << 20);
    for (const text of [`${big}# Grüße, 模型 ✓\n`, `\ufeff${big}`, `${big.slice(0, 1 << 20)}# é\n${big.slice(1 << 20)}`]) {
      const input = Buffer.from(text, 'utf8');
      const expected = await runCli([], input);
      const r = run(input, how);
      expect(r.stderr.toString()).toBe(expected.stderr);
      expect(r.status).toBe(expected.code);
      expect(r.stdout.equals(Buffer.from(expected.stdout, 'utf8'))).toBe(true);
    }
  });

  it.each(['pipe', 'file'] as const)('%s: bytes that are not UTF-8 after the first MiB: BAD_ENCODING, nothing on stdout', (how) => {
    const input = Buffer.concat([Buffer.from(big.slice(0, (1 << 20) + 5)), Buffer.from([0xff, 0xfe]), Buffer.from(big.slice((1 << 20) + 5))]);
    const r = run(input, how);
    expect(r.status).toBe(1);
    expect(r.stdout.length).toBe(0);
    expect(r.stderr.toString()).toContain('BAD_ENCODING');
  });

  it.each(['pipe', 'file'] as const)('%s: ASCII input of several pieces: the output of the source CLI, byte for byte', async (how) => {
    const input = Buffer.from(big);
    const expected = await runCli([], input);
    const r = run(input, how);
    expect(r.status).toBe(0);
    expect(r.stdout.equals(Buffer.from(expected.stdout, 'utf8'))).toBe(true);
  });

  it('empty stdin: exit 0, nothing written', () => {
    const r = run(Buffer.alloc(0), 'pipe');
    expect(r.status).toBe(0);
    expect(r.stdout.length).toBe(0);
    expect(r.stderr.toString()).toBe('');
  });
});

describe("the launcher's pass-through: input that cannot hold a target, without loading the application", () => {
  const inputs: [string, Buffer][] = [
    ...readdirSync(CASES)
      .sort()
      .filter((name) => !existsSync(path.join(CASES, name, 'args.txt')))
      .map((name): [string, Buffer] => [name, readFileSync(path.join(CASES, name, 'input.yaml'))]),
    ...['vllm', 'llamacpp', 'localai'].map((name): [string, Buffer] => [name, readFileSync(path.join(REAL, `${name}.input.yaml`))]),
    ['empty', Buffer.alloc(0)],
    ['comments only', Buffer.from('---\n# Source: a/b.yaml\n')],
    ['VLLM in capitals only', Buffer.from('apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: VLLM-settings\n')],
    ['an escape that spells vllm', Buffer.from('apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n  - name: m\n    image: "\\x76llm/vllm-openai:v0.11.0"\n')],
    ['not ASCII', Buffer.from('apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: caf\u00e9\n')],
    ['not UTF-8', Buffer.from([0x61, 0x3a, 0x20, 0xff, 0x0a])],
    ['broken YAML without a target', Buffer.from('a: [\n')],
    ['a generated stream of 300 documents', Buffer.from(generate(300))],
    // A line longer than the launcher's 1 MiB read piece, its only target word cut by the piece's end.
    ...(['vllm', 'llm-d', 'huggingfaceserver'] as const).flatMap((word) =>
      [1, word.length >> 1, word.length - 1].map((cut): [string, Buffer] => [`"${word}" cut after ${cut} by a 1 MiB read piece`, Buffer.from(wordAcrossReadPiece(word, cut))]),
    ),
  ];
  /** Any VRAM_PREFLIGHT_* variable turns the pass-through off; this one changes nothing else. */
  const applicationOnly = { ...env, VRAM_PREFLIGHT_FAST_PARSE: 'on' };

  it.each(inputs)('%s: the same stdout, stderr and exit code as the application', (_name, input) => {
    const lane = spawnSync(process.execPath, [bundle], { input, env, maxBuffer: 1 << 28 });
    const app = spawnSync(process.execPath, [bundle], { input, env: applicationOnly, maxBuffer: 1 << 28 });
    expect(lane.status).toBe(app.status);
    expect(lane.stdout.equals(app.stdout)).toBe(true);
    expect(lane.stderr.toString()).toBe(app.stderr.toString());
  });

  it('a vLLM start whose word the read piece cuts in two is wrapped (the case above is not a pass-through of both)', () => {
    const app = spawnSync(process.execPath, [bundle], { input: wordAcrossReadPiece('vllm', 2), env, maxBuffer: 1 << 28 });
    expect(app.status).toBe(0);
    expect(app.stdout.toString()).toContain('# vram-preflight ');
  });

  it('really skips the application: a pass-through run writes no code cache, a render does', () => {
    const d = mkdtempSync(path.join(dir, 'lane-'));
    const b = copyBundle(d);
    const llamacpp = readFileSync(path.join(REAL, 'llamacpp.input.yaml'));
    const passed = spawnSync(process.execPath, [b], { input: llamacpp, env });
    expect(passed.status).toBe(0);
    expect(passed.stdout.equals(llamacpp)).toBe(true);
    expect(caches(d)).toEqual([]);
    expect(spawnSync(process.execPath, [b], { input: vllm, env }).status).toBe(0);
    expect(caches(d)).toHaveLength(1);
  });

  it.skipIf(!isLinux)('a closed stdout fails the pass-through as it fails the application (exit 74, one line)', () => {
    const llamacpp = readFileSync(path.join(REAL, 'llamacpp.input.yaml'));
    const r = sh('"$NODE" "$BUNDLE" >&-', llamacpp);
    expect(r.status).toBe(74);
    expect(r.stderr).toBe('vram-preflight: error: cannot write to stdout: EBADF (stdout is closed); the output is incomplete\n');
  });
});

describe('the bundle behaves as the source on every fixture', () => {
  const cases = readdirSync(CASES).sort();
  it.each(cases)('%s', async (name) => {
    const caseDir = path.join(CASES, name);
    const input = readFileSync(path.join(caseDir, 'input.yaml'));
    const argsFile = path.join(caseDir, 'args.txt');
    const args = existsSync(argsFile) ? readFileSync(argsFile, 'utf8').split('\n').filter((l) => l !== '') : [];
    const expected = await runCli(args, input, { cwd: caseDir });
    const r = spawnSync(process.execPath, [bundle, ...args], { cwd: caseDir, input, env, encoding: 'utf8' });
    expect({ code: r.status, stdout: r.stdout, stderr: r.stderr }).toEqual({ code: expected.code, stdout: expected.stdout, stderr: expected.stderr });
  });

  it.each(['vllm', 'llamacpp', 'localai'])('fixtures/real/%s.input.yaml, and explain', async (name) => {
    const input = readFileSync(path.join(REAL, `${name}.input.yaml`));
    for (const args of [[], ['explain']]) {
      const expected = await runCli(args, input);
      const r = spawnSync(process.execPath, [bundle, ...args], { input, env, encoding: 'utf8' });
      expect({ code: r.status, stdout: r.stdout, stderr: r.stderr }).toEqual({ code: expected.code, stdout: expected.stdout, stderr: expected.stderr });
    }
  });

  it('a generated stream of 300 documents', async () => {
    const input = Buffer.from(generate(300));
    const expected = await runCli([], input);
    const r = spawnSync(process.execPath, [bundle], { input, env, encoding: 'utf8', maxBuffer: 1 << 28 });
    expect(r.status).toBe(expected.code);
    expect(r.stdout === expected.stdout).toBe(true);
  });
});
