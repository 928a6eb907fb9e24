/**
 * Shared pieces of the end-to-end tests: real helm binaries (v3.17.2 and
 * v4.1.4 from scripts/fetch-helm.sh), the bundle and the Helm 4 plugin built
 * by the real scripts into a temp dir per test file (never into dist/, so
 * parallel test files and other people's builds don't race), isolated helm
 * home directories, and a document-by-document comparison of manifest streams.
 */
import { spawnSync, type SpawnSyncReturns } from 'node:child_process';
import { copyFileSync, chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { gunzipSync } from 'node:zlib';
import { parseDocument } from 'yaml';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const CHART = path.join(ROOT, 'test/charts/inference-zoo');
export const CHART_NAME = 'inference-zoo';
export const HELM = { 3: path.join(ROOT, '.cache/helm/v3/helm'), 4: path.join(ROOT, '.cache/helm/v4/helm') } as const;
export const HELM_VERSIONS = { 3: 'v3.17.2', 4: 'v4.1.4' } as const;
export type HelmMajor = 3 | 4;
export const PACKAGE_VERSION: string = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')).version;

const tempDirs: string[] = [];

/** A fresh temp dir, removed by removeTempDirs() (call it in afterAll). */
export function tempDir(prefix: string): string {
  const dir = mkdtempSync(path.join(tmpdir(), `vram-preflight-e2e-${prefix}-`));
  tempDirs.push(dir);
  return dir;
}

export function removeTempDirs(): void {
  for (const dir of tempDirs.splice(0)) rmSync(dir, { recursive: true, force: true });
}

export interface Run {
  status: number | null;
  stdout: string;
  stderr: string;
}

function asRun(r: SpawnSyncReturns<string>, what: string): Run {
  if (r.error) throw new Error(`${what}: ${r.error.message}`);
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

export function run(cmd: string, args: readonly string[], opts: { env?: NodeJS.ProcessEnv; input?: string; cwd?: string } = {}): Run {
  return asRun(
    spawnSync(cmd, args, { cwd: opts.cwd ?? ROOT, env: opts.env ?? process.env, input: opts.input, encoding: 'utf8', maxBuffer: 256 * 1024 * 1024 }),
    `${cmd} ${args.join(' ')}`,
  );
}

/** Succeeds or throws with everything needed to see why. */
export function runOk(cmd: string, args: readonly string[], opts: Parameters<typeof run>[2] = {}): string {
  const r = run(cmd, args, opts);
  if (r.status !== 0) throw new Error(`${path.basename(cmd)} ${args.join(' ')} exited ${r.status}\n--- stderr ---\n${r.stderr}\n--- stdout ---\n${r.stdout.slice(0, 2000)}`);
  return r.stdout;
}

/** A cross-process lock (mkdir is atomic) so that parallel test files don't fetch helm twice at once. */
function withLock<T>(name: string, fn: () => T): T {
  const dir = path.join(ROOT, '.cache', `${name}.lock`);
  mkdirSync(path.dirname(dir), { recursive: true });
  const deadline = Date.now() + 120_000;
  for (;;) {
    try {
      mkdirSync(dir);
      break;
    } catch {
      if (Date.now() > deadline) throw new Error(`lock ${dir} held for 120 s; remove it if no test is running`);
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 100);
    }
  }
  try {
    return fn();
  } finally {
    rmdirSync(dir);
  }
}

/**
 * Runs scripts/fetch-helm.sh (a no-op when both binaries are there) and fails
 * loudly when a binary is still missing: these tests must never skip quietly.
 */
export function ensureHelm(): void {
  withLock('fetch-helm', () => {
    const r = run('bash', [path.join(ROOT, 'scripts/fetch-helm.sh')]);
    for (const major of [3, 4] as const) {
      if (!existsSync(HELM[major])) {
        throw new Error(
          `helm v${major} is missing at ${HELM[major]} and scripts/fetch-helm.sh could not get it ` +
            `(exit ${r.status}). Run \`npm run fetch-helm\` with access to the npm registry.\n${r.stderr}`,
        );
      }
      const got = runOk(HELM[major], ['version', '--template', '{{.Version}}']).trim();
      if (got !== HELM_VERSIONS[major]) throw new Error(`${HELM[major]} is ${got}, expected ${HELM_VERSIONS[major]}`);
    }
  });
}

export interface Artifacts {
  dist: string;
  /** The self-contained bundle. */
  bundle: string;
  /**
   * The plugin archive unpacked into a temp dir: what `helm plugin install <archive>`
   * puts in Helm 4's plugins directory. Tests only: scripts/package-plugin.mjs
   * leaves no plugin directory (Helm 3 would link one; docs/install.md).
   */
  pluginDir: string;
  /** vram-preflight-<version>.tgz: the plugin archive (unsigned; release.test.ts signs one). */
  pluginTgz: string;
}

/** Builds the bundle and the plugin with the real scripts into a fresh temp dir. */
export function buildArtifacts(): Artifacts {
  const dist = tempDir('dist');
  runOk(process.execPath, [path.join(ROOT, 'scripts/package-plugin.mjs'), '--dist', dist]);
  const pluginTgz = path.join(dist, `vram-preflight-${PACKAGE_VERSION}.tgz`);
  const unpacked = tempDir('plugin');
  runOk('tar', ['-xzf', pluginTgz, '-C', unpacked]);
  return { dist, bundle: path.join(dist, 'vram-preflight.cjs'), pluginDir: path.join(unpacked, 'vram-preflight'), pluginTgz };
}

/** Environment variables that could leak the user's helm or kube setup into a test. */
const SCRUB = /^(HELM_|KUBECONFIG$|VRAM_PREFLIGHT_)/;

/**
 * An isolated helm home: its own data, config and cache dirs, no HELM_PLUGINS
 * (so plugins load from $HELM_DATA_HOME/plugins, where `helm plugin install`
 * puts them), and `node` on PATH for the Helm 4 plugin.
 */
export function helmEnv(extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv & { HELM_DATA_HOME: string } {
  const home = tempDir('helm');
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!SCRUB.test(k)) env[k] = v;
  return {
    ...env,
    HOME: home,
    HELM_DATA_HOME: path.join(home, 'data'),
    HELM_CONFIG_HOME: path.join(home, 'config'),
    HELM_CACHE_HOME: path.join(home, 'cache'),
    KUBECONFIG: path.join(home, 'no-kubeconfig'),
    PATH: `${path.dirname(process.execPath)}${path.delimiter}${env.PATH ?? ''}`,
    ...extra,
  };
}

/** A directory holding an executable named `vram-preflight` (the bundle), for Helm 3's PATH lookup. */
export function binDirWithBundle(bundle: string): string {
  const dir = tempDir('bin');
  const exe = path.join(dir, 'vram-preflight');
  copyFileSync(bundle, exe);
  chmodSync(exe, 0o755);
  // The application the launcher loads, under the name the build gave it (not the launcher's new name).
  const app = path.basename(bundle).replace(/\.c?js$/, '.app.js');
  copyFileSync(path.join(path.dirname(bundle), app), path.join(dir, app));
  return dir;
}

export function helm(major: HelmMajor, args: readonly string[], env: NodeJS.ProcessEnv): Run {
  return run(HELM[major], args, { env });
}

export function helmOk(major: HelmMajor, args: readonly string[], env: NodeJS.ProcessEnv): string {
  return runOk(HELM[major], args, { env });
}

// ---------------------------------------------------------------------------
// Streams

export interface Doc {
  /** The `# Source:` path helm wrote above the document. */
  source: string;
  /** The document's text as helm printed it (without the `---` line). */
  text: string;
}

/** Splits helm's output (`---\n# Source: x\n...` per document) into documents, keyed by source. */
export function splitHelmOutput(stream: string): Doc[] {
  const docs: Doc[] = [];
  const lines = stream.split('\n');
  let current: string[] | undefined;
  const flush = () => {
    if (!current) return;
    const text = current.join('\n');
    const m = /^# Source: (.+)$/m.exec(text);
    if (text.trim() !== '') docs.push({ source: m ? m[1]! : '', text });
  };
  for (const line of lines) {
    if (/^---(\s|$)/.test(line)) {
      flush();
      current = [];
    } else {
      (current ??= []).push(line);
    }
  }
  flush();
  return docs;
}

export function bySource(docs: readonly Doc[]): Map<string, Doc> {
  const map = new Map<string, Doc>();
  for (const d of docs) {
    if (map.has(d.source)) throw new Error(`two documents from ${d.source}; the tests expect one per template`);
    map.set(d.source, d);
  }
  return map;
}

type Json = null | boolean | number | string | Json[] | { [k: string]: Json };
export interface Container {
  name: string;
  image?: string;
  command?: string[] | null;
  args?: string[] | null;
  [k: string]: Json | undefined;
}

/** YAML 1.1, like Kubernetes, so 0644 reads as the octal it is. */
export function parseK8s(text: string): Record<string, Json> {
  const doc = parseDocument(text, { version: '1.1' });
  if (doc.errors.length) throw new Error(`YAML error: ${doc.errors[0]!.message}`);
  return doc.toJS({ maxAliasCount: -1 }) as Record<string, Json>;
}

export function podContainers(obj: Record<string, Json>): Container[] {
  const spec = (obj.spec as { template?: { spec?: { containers?: Container[] } } } | undefined)?.template?.spec;
  return spec?.containers ?? [];
}

export interface WrappedContainer {
  /** What the preflight script execs: everything after `--`. */
  start: string[];
  script: string;
}

/** Checks the wrapped shape and returns the script and the start it execs. */
export function unwrap(c: Container): WrappedContainer {
  if (JSON.stringify(c.command) !== JSON.stringify(['/bin/sh', '-ec'])) {
    throw new Error(`container ${c.name}: command is ${JSON.stringify(c.command)}, expected ["/bin/sh","-ec"]`);
  }
  const args = c.args ?? [];
  if (typeof args[0] !== 'string' || !args[0].startsWith(`# vram-preflight ${PACKAGE_VERSION}`)) {
    throw new Error(`container ${c.name}: args[0] does not start with "# vram-preflight ${PACKAGE_VERSION}"`);
  }
  if (args[1] !== '--') throw new Error(`container ${c.name}: args[1] is ${JSON.stringify(args[1])}, expected "--"`);
  return { script: args[0], start: args.slice(2) };
}

/** The containers the tests expect to be wrapped, per template, and how each started before. */
export interface ExpectedWrap {
  container: string;
  /** The original command when the container had one; undefined: the image's ENTRYPOINT (not asserted exactly). */
  command?: string[];
  /** The original args; null when the chart rendered `args:` as null. */
  args: string[] | null;
}

/**
 * Compares a plain render with a post-rendered one, document by document:
 * every document whose template is not in `wrapped` must be the very same
 * text; in the others only `command` and `args` of the named containers may
 * differ, and they must be the preflight wrapper around the original start.
 * Returns the wrapped containers by "template/container".
 */
export function assertOnlyVllmChanged(
  plain: string,
  rendered: string,
  wrapped: Readonly<Record<string, readonly ExpectedWrap[]>>,
): Map<string, WrappedContainer> {
  const before = bySource(splitHelmOutput(plain));
  const after = bySource(splitHelmOutput(rendered));
  const problems: string[] = [];
  const found = new Map<string, WrappedContainer>();
  if ([...before.keys()].join('\n') !== [...after.keys()].join('\n')) {
    problems.push(`documents differ:\n  before: ${[...before.keys()].join(', ')}\n  after:  ${[...after.keys()].join(', ')}`);
  }
  for (const [source, a] of after) {
    const b = before.get(source);
    if (!b) continue;
    const template = source.replace(/^[^/]+\/templates\//, 'templates/');
    const expected = wrapped[template];
    if (!expected) {
      if (a.text !== b.text) problems.push(`${source}: must be byte-identical but differs`);
      continue;
    }
    if (a.text === b.text) {
      problems.push(`${source}: expected a rewrite, got the same text`);
      continue;
    }
    const objB = parseK8s(b.text);
    const objA = parseK8s(a.text);
    const cb = podContainers(objB);
    const ca = podContainers(objA);
    for (const want of expected) {
      const i = cb.findIndex((c) => c.name === want.container);
      if (i === -1 || !ca[i] || ca[i]!.name !== want.container) {
        problems.push(`${source}: container ${want.container} not found`);
        continue;
      }
      try {
        const w = unwrap(ca[i]!);
        found.set(`${template}/${want.container}`, w);
        const orig = [...(want.command ?? []), ...(want.args ?? [])];
        if (want.command) {
          if (JSON.stringify(w.start) !== JSON.stringify(orig)) problems.push(`${source} ${want.container}: execs ${JSON.stringify(w.start)}, expected ${JSON.stringify(orig)}`);
        } else {
          // The image's ENTRYPOINT comes first (from the tool's image table), then the original args.
          const entry = w.start.slice(0, w.start.length - orig.length);
          if (entry.length === 0 || JSON.stringify(w.start.slice(entry.length)) !== JSON.stringify(orig)) {
            problems.push(`${source} ${want.container}: execs ${JSON.stringify(w.start)}, expected <image entrypoint> + ${JSON.stringify(orig)}`);
          }
        }
        if (JSON.stringify(cb[i]!.command ?? null) !== JSON.stringify(want.command ?? null) || JSON.stringify(cb[i]!.args ?? null) !== JSON.stringify(want.args)) {
          problems.push(`${source} ${want.container}: the plain render is not what the test expects (${JSON.stringify({ command: cb[i]!.command, args: cb[i]!.args })})`);
        }
      } catch (e) {
        problems.push(`${source}: ${(e as Error).message}`);
      }
      delete cb[i]!.command;
      delete cb[i]!.args;
      delete ca[i]!.command;
      delete ca[i]!.args;
    }
    if (JSON.stringify(objA) !== JSON.stringify(objB)) {
      problems.push(`${source}: differs in more than command/args of ${expected.map((e) => e.container).join(', ')}:\n${JSON.stringify(objB)}\n${JSON.stringify(objA)}`);
    }
  }
  if (problems.length) throw new Error(problems.join('\n'));
  return found;
}

/** The rewrites the inference-zoo chart must get, by template. */
export const ZOO_WRAPPED: Readonly<Record<string, readonly ExpectedWrap[]>> = {
  'templates/vllm-args.yaml': [
    { container: 'model', args: ['Qwen/Qwen2.5-1.5B-Instruct', '--served-model-name', 'qwen', '--port', '8000', '--gpu-memory-utilization', '0.9'] },
  ],
  'templates/vllm-command.yaml': [
    {
      container: 'vllm',
      command: ['vllm', 'serve', 'Qwen/Qwen2.5-1.5B-Instruct'],
      args: ['--tensor-parallel-size', '2', '--gpu_memory_utilization', '0.9'],
    },
  ],
  'templates/vllm-null-args.yaml': [{ container: 'engine', args: null }],
  'templates/vllm-statefulset.yaml': [
    { container: 'server', args: ['--model=meta-llama/Llama-3.1-8B-Instruct', '--port=8000', '--gpu-memory-utilization=0.85', '--max-model-len=8192'] },
  ],
};

/** The entries of a .tgz / .tar.gz (ustar), in archive order. */
export function tarEntries(tgz: string): Array<{ type: string; name: string; mode: number; size: number; uid: number; gid: number; mtime: number; data: Buffer }> {
  const tar = gunzipSync(readFileSync(tgz));
  const out = [];
  for (let at = 0; at + 512 <= tar.length; ) {
    const h = tar.subarray(at, at + 512);
    if (h.every((b) => b === 0)) break;
    const name = h.toString('utf8', 0, 100).replace(/\0.*$/s, '');
    const mode = parseInt(h.toString('ascii', 100, 108), 8);
    const size = parseInt(h.toString('ascii', 124, 136), 8);
    const num = (from: number, to: number) => parseInt(h.toString('ascii', from, to), 8);
    const prefix = h.toString('utf8', 345, 500).replace(/\0.*$/s, '');
    out.push({
      type: String.fromCharCode(h[156]!),
      name: prefix ? `${prefix}/${name}` : name,
      mode,
      size,
      uid: num(108, 116),
      gid: num(116, 124),
      mtime: num(136, 148),
      data: tar.subarray(at + 512, at + 512 + size),
    });
    at += 512 + Math.ceil(size / 512) * 512;
  }
  return out;
}
