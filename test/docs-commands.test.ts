/**
 * Every command block of the operator's first hour runs as written: the
 * `sh` blocks of README.md, docs/install.md and docs/webhook.md's Install
 * and Upgrades and rollback sections, in that order, as one reader types
 * them at one terminal (one bash session: a variable, a background job or a
 * `cd` of one block is there for the next), on a fresh machine:
 *
 * - a clone of this checkout (its working tree as a commit of its own, so
 *   that `npm run release` finds a clean checkout), with nothing built;
 * - an empty HOME, npm's global prefix in it (`~/.local`, its bin on PATH);
 * - the real helm v3.17.2 and v4.1.4 as `helm`: Helm 4 by default, Helm 3 for
 *   the blocks marked so, each block marked for both run with each; Helm 4
 *   with its own HELM_DATA_HOME, as install.md tells a reader with both;
 * - the real API server of scripts/cluster.sh (kubectl v1.37, a kubeconfig
 *   whose namespace is this run's), and a docker-registry on 127.0.0.1:5000
 *   as install.md starts it;
 * - npm's download cache and the downloads of scripts/fetch-helm.sh and
 *   scripts/build-image.sh (helm, Node.js for the images) already there, as
 *   on a machine that fetched them once; nothing else.
 *
 * A block that cannot run here says so in the Markdown, in an HTML comment
 * on the line before it: `<!-- docs-test: skip: <why> -->`. The same comment
 * carries the other directives, separated by `;`:
 *   helm 3 | helm 4 | helm 3, helm 4   which helm `helm` is (default: helm 4)
 *   given: <precondition>              set up first (a name of GIVEN below)
 *   prints: <line> | prints: /<regex>/ the block's stdout has that line
 * An unmarked block that fails fails the test, naming the block.
 */
import { spawn, spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as k from './apiserver/harness.js';

const ROOT = path.join(import.meta.dirname, '..');
const HELM = { 3: path.join(ROOT, '.cache/helm/v3/helm'), 4: path.join(ROOT, '.cache/helm/v4/helm') } as const;
const RUN = Date.now().toString(36);
/** The namespace of the reader's kubeconfig: the blocks that name none work in it. */
const OWN_NAMESPACE = `docs-${RUN}`;
/** Namespaces the documented commands create or name. */
const DOC_NAMESPACES = ['vram-preflight', 'ml'];
/** install.md's registry. */
const REGISTRY_PORT = 5000;

/** The documents, and the sections of each that the test runs (all when absent). */
const DOCS: Array<{ file: string; sections?: string[] }> = [
  { file: 'README.md' },
  { file: 'docs/install.md' },
  { file: 'docs/webhook.md', sections: ['Install', 'Upgrades and rollback'] },
];

type Helm = 3 | 4;

interface Block {
  file: string;
  /** 1-based line of the opening fence. */
  line: number;
  text: string;
  skip?: string;
  helms: Helm[];
  given: string[];
  prints: Array<string | RegExp>;
}

/**
 * Preconditions a block may name: shell run (with the block's helm) before it.
 * Each is what a reader who reached the block in another order would have.
 */
const GIVEN: Record<string, string> = {
  'a namespace ml': 'kubectl get namespace ml >/dev/null 2>&1 || kubectl create namespace ml >/dev/null',
  'vram-preflight installed in Helm 4':
    'helm plugin list | grep -q "^vram-preflight\\b" || helm plugin install dist/release/vram-preflight-0.4.0.tgz --verify=false >/dev/null',
  // The trap install.md's way out is for: a Helm 4 plugin directory (here the
  // release's archive unpacked) linked into Helm 3's plugins, as Helm 3's
  // `helm plugin install <dir>` links it; Helm 3 then lists no plugin.
  "a Helm 4 plugin directory linked into Helm 3's plugins": [
    'trap_dir=$(mktemp -d) && tar -xzf dist/release/vram-preflight-0.4.0.tgz -C "$trap_dir"',
    'mkdir -p "$(helm env HELM_PLUGINS)" && ln -s "$trap_dir/vram-preflight" "$(helm env HELM_PLUGINS)/vram-preflight"',
    'if helm plugin list >/dev/null 2>&1; then echo "the trap is not set: Helm 3 still lists its plugins" >&2; exit 1; fi',
  ].join('\n'),
};

function parseDirectives(comment: string, where: string): Pick<Block, 'skip' | 'helms' | 'given' | 'prints'> {
  const out: Pick<Block, 'skip' | 'helms' | 'given' | 'prints'> = { helms: [4], given: [], prints: [] };
  // `skip:` takes the whole comment: its reason may say anything, `;` included.
  const skip = /^\s*skip:\s*(.*)$/s.exec(comment);
  if (skip) {
    if (skip[1]!.trim().length < 10) throw new Error(`${where}: "skip:" needs a reason a reader can check`);
    return { ...out, skip: skip[1]!.trim() };
  }
  for (const part of comment.split(';').map((p) => p.trim()).filter((p) => p !== '')) {
    let m: RegExpExecArray | null;
    if (/^helm [34](,\s*helm [34])*$/.test(part)) {
      out.helms = [...part.matchAll(/helm ([34])/g)].map((h) => Number(h[1]) as Helm);
    } else if ((m = /^given:\s*(.+)$/.exec(part))) {
      if (!(m[1]! in GIVEN)) throw new Error(`${where}: unknown "given: ${m[1]}" (the test knows: ${Object.keys(GIVEN).join(' | ')})`);
      out.given.push(m[1]!);
    } else if ((m = /^prints:\s*(.+)$/.exec(part))) {
      const re = /^\/(.*)\/$/.exec(m[1]!);
      out.prints.push(re ? new RegExp(re[1]!, 'm') : m[1]!);
    } else throw new Error(`${where}: unknown directive "${part}" in <!-- docs-test: ... -->`);
  }
  return out;
}

/** The shell blocks of a document (of the named `## ` sections), with the directives of the comment before each. */
export function blocksOf(file: string, text: string, sections?: readonly string[]): Block[] {
  const lines = text.split('\n');
  const blocks: Block[] = [];
  let section = '';
  for (let i = 0; i < lines.length; i++) {
    const heading = /^## (.+)$/.exec(lines[i]!);
    if (heading) section = heading[1]!.trim();
    const fence = /^```(\S*)\s*$/.exec(lines[i]!);
    if (!fence) continue;
    const start = i;
    for (i++; i < lines.length && !/^```\s*$/.test(lines[i]!); i++);
    if (!['sh', 'bash', 'shell'].includes(fence[1]!)) continue;
    const where = `${file}:${start + 1}`;
    let j = start - 1;
    while (j >= 0 && lines[j]!.trim() === '') j--;
    const marker = j >= 0 ? /^<!-- docs-test:(.*)-->\s*$/.exec(lines[j]!) : null;
    if (sections && !sections.includes(section)) continue;
    blocks.push({ file, line: start + 1, text: `${lines.slice(start + 1, i).join('\n')}\n`, ...parseDirectives(marker?.[1] ?? '', where) });
  }
  return blocks;
}

/** Every `<!-- docs-test: -->` comment of a document sits right above a shell block (none left over from an edit). */
function strayMarkers(file: string, text: string): string[] {
  const lines = text.split('\n');
  const stray: string[] = [];
  lines.forEach((line, i) => {
    if (!line.startsWith('<!-- docs-test:')) return;
    let j = i + 1;
    while (j < lines.length && lines[j]!.trim() === '') j++;
    if (!/^```(sh|bash|shell)\s*$/.test(lines[j] ?? '')) stray.push(`${file}:${i + 1}`);
  });
  return stray;
}

const all = (): Block[] => DOCS.flatMap(({ file, sections }) => blocksOf(file, readFileSync(path.join(ROOT, file), 'utf8'), sections));

describe('the command blocks of README.md, docs/install.md and docs/webhook.md (Install, Upgrades and rollback)', () => {
  it('are marked only with directives the test knows; every skip says why; no marker is left without its block', () => {
    const blocks = all();
    expect(blocks.length).toBeGreaterThan(20);
    expect(blocks.filter((b) => !b.skip).length).toBeGreaterThan(15);
    for (const { file } of DOCS) expect(strayMarkers(file, readFileSync(path.join(ROOT, file), 'utf8')), file).toEqual([]);
    // The sections the test reads are there (a renamed heading would leave webhook.md untested).
    for (const { file, sections } of DOCS) for (const s of sections ?? []) expect(readFileSync(path.join(ROOT, file), 'utf8'), file).toContain(`\n## ${s}\n`);
    expect(() => parseDirectives('skip: ok', 'x')).toThrow(/needs a reason/);
    expect(parseDirectives(' skip: a published URL; not yet', 'x').skip).toBe('a published URL; not yet');
    expect(() => parseDirectives('given: a cluster with GPUs', 'x')).toThrow(/unknown "given/);
    expect(() => parseDirectives('helm 5', 'x')).toThrow(/unknown directive/);
    expect(parseDirectives('helm 3, helm 4; prints: /^a$/; prints: b', 'x')).toMatchObject({ helms: [3, 4], prints: [/^a$/m, 'b'] });
  });
});

// ---------------------------------------------------------------------------
// The walk

// Made in beforeAll (not at import: a run of the static test alone leaves nothing behind).
let work = '';
let home = '';
let clone = '';
let out = '';
let helmLink = '';
let session: ReturnType<typeof spawn> | undefined;
let releaseLock: (() => void) | undefined;

const sh = (cmd: string, args: string[], opts: { cwd?: string; env?: NodeJS.ProcessEnv } = {}) => {
  const r = spawnSync(cmd, args, { encoding: 'utf8', cwd: opts.cwd ?? ROOT, env: opts.env ?? process.env, maxBuffer: 1 << 26 });
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')} exited ${r.status}:\n${r.stderr}`);
  return r.stdout.trim();
};

/** A clone at a commit of this working tree as it is (tracked and untracked files, .gitignore applied), made without touching this checkout's index or HEAD. */
function cloneWorkingTree(): void {
  const index = path.join(work, 'index');
  const env = { ...process.env, GIT_INDEX_FILE: index };
  sh('git', ['read-tree', 'HEAD'], { env });
  sh('git', ['add', '-A', '.'], { env });
  const tree = sh('git', ['write-tree'], { env });
  const ident = { GIT_AUTHOR_NAME: 'docs test', GIT_AUTHOR_EMAIL: 'docs-test@example.invalid', GIT_COMMITTER_NAME: 'docs test', GIT_COMMITTER_EMAIL: 'docs-test@example.invalid' };
  const commit = sh('git', ['commit-tree', tree, '-p', 'HEAD', '-m', 'the working tree, for the docs test'], { env: { ...process.env, ...ident } });
  sh('git', ['clone', '--quiet', '--shared', '--no-checkout', ROOT, clone]);
  sh('git', ['-C', clone, 'checkout', '--quiet', '--detach', commit]);
  // The downloads a machine keeps after fetching them once (pinned by hash; the scripts check them), linked, not copied.
  mkdirSync(path.join(clone, '.cache'));
  for (const cache of ['.cache/helm', '.cache/node']) if (existsSync(path.join(ROOT, cache))) sh('cp', ['-al', path.join(ROOT, cache), path.join(clone, '.cache/')]);
}

/** install.md's registry listens on 127.0.0.1:5000: one run at a time on this machine (a lock), and the port must be free. */
async function takeRegistryPort(): Promise<() => void> {
  const lock = path.join(tmpdir(), `vram-preflight-docs-test-${REGISTRY_PORT}.lock`);
  const deadline = Date.now() + 10 * 60_000;
  for (;;) {
    try {
      mkdirSync(lock);
      writeFileSync(path.join(lock, 'pid'), String(process.pid));
      break;
    } catch {
      const holder = Number(existsSync(path.join(lock, 'pid')) ? readFileSync(path.join(lock, 'pid'), 'utf8') : 0);
      let alive = false;
      try {
        if (holder) process.kill(holder, 0);
        alive = holder > 0;
      } catch {
        alive = false;
      }
      if (!alive) rmSync(lock, { recursive: true, force: true });
      else if (Date.now() > deadline) throw new Error(`${lock} is held by pid ${holder} (another docs test run) for 10 minutes`);
      else await k.sleep(500);
    }
  }
  const inUse = await new Promise<boolean>((resolve) => {
    const s = net.connect(REGISTRY_PORT, '127.0.0.1');
    s.on('connect', () => (s.destroy(), resolve(true)));
    s.on('error', () => resolve(false));
  });
  if (inUse) {
    rmSync(lock, { recursive: true, force: true });
    throw new Error(`127.0.0.1:${REGISTRY_PORT} is in use: docs/install.md's registry recipe needs it (ss -ltnp 'sport = :${REGISTRY_PORT}' names the process)`);
  }
  return () => rmSync(lock, { recursive: true, force: true });
}

async function namespaceGone(name: string): Promise<void> {
  k.kubectl(['delete', 'namespace', name, '--ignore-not-found', '--wait=false']);
  for (let i = 0; i < 600; i++) {
    if (k.kubectl(['get', 'namespace', name]).status !== 0) return;
    await k.sleep(100);
  }
  throw new Error(`namespace ${name} still there 60 s after its deletion`);
}

/** The reader's environment: only what a fresh machine with these tools has. */
function readerEnv(c: k.Cluster): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(process.env)) if (!/^(HELM_|KUBECONFIG$|VRAM_PREFLIGHT_|GNUPGHOME$|npm_|NODE_OPTIONS$|VITEST|TEST$)/.test(key)) env[key] = value;
  const npmCache = sh('npm', ['config', 'get', 'cache']);
  return {
    ...env,
    HOME: home,
    PATH: [path.join(home, '.local/bin'), helmLink, c.bin, path.dirname(process.execPath), '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'].join(path.delimiter),
    npm_config_prefix: path.join(home, '.local'),
    npm_config_cache: npmCache,
    npm_config_update_notifier: 'false',
  };
}

interface Step {
  n: number;
  block: Block;
  helm: Helm;
  /** The step this one repeats (same text, same helm): not run again. */
  sameAs?: number;
}

function steps(blocks: Block[]): Step[] {
  const result: Step[] = [];
  const seen = new Map<string, number>();
  for (const block of blocks) {
    if (block.skip) continue;
    for (const helm of block.helms) {
      const key = `${helm}\0${block.text}`;
      result.push({ n: result.length + 1, block, helm, sameAs: seen.get(key) });
      if (!seen.has(key)) seen.set(key, result.length);
    }
  }
  return result;
}

/** The session: each step's helm, its preconditions, the block as written (its stdout and stderr to files), a mark of progress. */
function script(list: Step[]): string {
  const lines = [
    'exec 3>>"$DOCS_TEST_OUT/progress"',
    // What a reader's terminal does at the end: the registry and gpg's agent stop.
    'cleanup() { [ -z "${GNUPGHOME:-}" ] || gpgconf --homedir "$GNUPGHOME" --kill gpg-agent 2>/dev/null; kill $(jobs -p) 2>/dev/null; true; }',
    'trap cleanup EXIT',
    'set -eo pipefail',
  ];
  for (const s of list) {
    lines.push(`echo "start ${s.n} $(date +%s.%N)" >&3`);
    if (s.sameAs) {
      lines.push(`echo "same block as step ${s.sameAs}, not run again" > "$DOCS_TEST_OUT/${s.n}.stdout"`);
    } else {
      lines.push(`ln -sfn "$DOCS_TEST_HELM${s.helm}" "$DOCS_TEST_BIN/helm"`);
      lines.push(s.helm === 4 ? 'export HELM_DATA_HOME="$HOME/.local/share/helm4"' : 'unset HELM_DATA_HOME');
      for (const g of s.block.given) lines.push(`{\n${GIVEN[g]}\n} > "$DOCS_TEST_OUT/${s.n}.given" 2>&1`);
      lines.push(`{\n${s.block.text}} > "$DOCS_TEST_OUT/${s.n}.stdout" 2> "$DOCS_TEST_OUT/${s.n}.stderr"`);
    }
    lines.push(`echo "done ${s.n} $(date +%s.%N)" >&3`);
  }
  return `${lines.join('\n')}\n`;
}

const tail = (file: string, n = 30) => (existsSync(file) ? readFileSync(file, 'utf8').trimEnd().split('\n').slice(-n).join('\n') : '(none)');

describe('run as written, in order, by one reader on a fresh machine', () => {
  let cluster: k.Cluster;

  beforeAll(async () => {
    work = mkdtempSync(path.join(tmpdir(), 'vram-preflight-docs-'));
    [home, clone, out, helmLink] = ['home', 'vram-preflight', 'out', 'bin'].map((d) => path.join(work, d)) as [string, string, string, string];
    cluster = k.cluster();
    for (const major of [3, 4] as const) if (!existsSync(HELM[major])) throw new Error(`${HELM[major]} is missing: run npm run fetch-helm`);
    for (const tool of ['docker-registry', 'skopeo', 'buildah', 'gpg', 'curl', 'jq', 'openssl']) {
      if (spawnSync('sh', ['-c', `command -v ${tool}`]).status !== 0) throw new Error(`the docs name ${tool}, which is not on PATH: ./scripts/test.sh installs it`);
    }
    releaseLock = await takeRegistryPort();
    for (const ns of DOC_NAMESPACES) await namespaceGone(ns);
    k.kubectl(['delete', 'mutatingwebhookconfiguration', 'vram-preflight-webhook', '--ignore-not-found']);
    await k.namespace(OWN_NAMESPACE, {});
    mkdirSync(path.join(home, '.kube'), { recursive: true });
    mkdirSync(out);
    mkdirSync(helmLink);
    copyFileSync(cluster.kubeconfig, path.join(home, '.kube/config'));
    sh(path.join(cluster.bin, 'kubectl'), ['config', 'set-context', '--current', `--namespace=${OWN_NAMESPACE}`], { env: { ...process.env, KUBECONFIG: path.join(home, '.kube/config') } });
    cloneWorkingTree();
  }, 15 * 60_000);

  afterAll(async () => {
    if (session?.pid) {
      try {
        process.kill(-session.pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
    if (cluster) {
      const env = { ...readerEnv(cluster), HELM_DATA_HOME: path.join(home, '.local/share/helm4') };
      spawnSync(HELM[4], ['uninstall', 'vram-preflight', '-n', 'vram-preflight', '--ignore-not-found'], { env });
      k.kubectl(['delete', 'mutatingwebhookconfiguration', 'vram-preflight-webhook', '--ignore-not-found', '--wait=false']);
      for (const ns of [...DOC_NAMESPACES, OWN_NAMESPACE]) k.kubectl(['delete', 'namespace', ns, '--ignore-not-found', '--wait=false']);
      k.closeApi();
    }
    releaseLock?.();
    // VRAM_PREFLIGHT_DOCS_TEST_KEEP=1 keeps each step's stdout and stderr (and the clone) to read.
    if (process.env.VRAM_PREFLIGHT_DOCS_TEST_KEEP === '1') process.stdout.write(`docs test: kept ${work}\n`);
    else if (work) rmSync(work, { recursive: true, force: true });
  });

  it('every block not marked skip exits 0 and prints what its marker says; from the first to the last', async () => {
    const list = steps(all());
    writeFileSync(path.join(work, 'session.sh'), script(list));
    const started = Date.now();
    session = spawn('bash', ['--noprofile', '--norc', path.join(work, 'session.sh')], {
      cwd: clone,
      detached: true,
      stdio: ['ignore', 'ignore', 'ignore'],
      env: { ...readerEnv(cluster), DOCS_TEST_OUT: out, DOCS_TEST_BIN: helmLink, DOCS_TEST_HELM3: HELM[3], DOCS_TEST_HELM4: HELM[4] },
    });
    const status = await new Promise<number | null>((resolve) => session!.on('exit', (code) => resolve(code)));
    const seconds = ((Date.now() - started) / 1000).toFixed(0);
    const progress = readFileSync(path.join(out, 'progress'), 'utf8').trim().split('\n');
    const last = Number(/^(?:start|done) (\d+) /.exec(progress.at(-1) ?? '')?.[1] ?? 0);
    // Each step's seconds, for the log (the test's wall time is mostly the release builds).
    const times = new Map<number, number>();
    for (const line of progress) {
      const [what, n, at] = line.split(' ');
      if (what === 'start') times.set(Number(n), -Number(at));
      else times.set(Number(n), (times.get(Number(n)) ?? 0) + Number(at));
    }
    process.stdout.write(list.map((s) => `  step ${s.n} ${s.block.file}:${s.block.line} helm ${s.helm}${s.sameAs ? ` (= step ${s.sameAs})` : ''}: ${(times.get(s.n) ?? NaN).toFixed(1)} s\n`).join(''));
    if (status !== 0 || !progress.at(-1)?.startsWith(`done ${list.length} `)) {
      const failed = list[last - 1];
      throw new Error(
        failed
          ? `${failed.block.file}:${failed.block.line} (step ${last} of ${list.length}, helm ${failed.helm}) exited ${status} after ${seconds} s:\n${failed.block.text}` +
              `--- given ---\n${tail(path.join(out, `${last}.given`))}\n--- stdout ---\n${tail(path.join(out, `${last}.stdout`))}\n--- stderr ---\n${tail(path.join(out, `${last}.stderr`))}`
          : `the session exited ${status} before its first step`,
      );
    }
    const missing: string[] = [];
    for (const s of list) {
      if (s.sameAs) continue;
      const stdout = readFileSync(path.join(out, `${s.n}.stdout`), 'utf8');
      const lines = stdout.split('\n').map((l) => l.trim());
      for (const want of s.block.prints) {
        if (typeof want === 'string' ? !lines.includes(want) : !want.test(stdout)) missing.push(`${s.block.file}:${s.block.line} (helm ${s.helm}) printed no line ${want}:\n${stdout.slice(0, 2000)}`);
      }
    }
    expect(missing).toEqual([]);
    // The walk reached the cluster: the chart the docs installed is there, as the last rollback left it.
    const history = spawnSync(HELM[4], ['history', 'vram-preflight', '-n', 'vram-preflight', '-o', 'json'], { env: { ...readerEnv(cluster), HELM_DATA_HOME: path.join(home, '.local/share/helm4') }, encoding: 'utf8' });
    expect(history.status, history.stderr).toBe(0);
    expect((JSON.parse(history.stdout) as Array<{ description: string }>).some((r) => /^Rollback to \d+$/.test(r.description))).toBe(true);
    process.stdout.write(`docs test: ${list.length} steps (${list.filter((s) => s.sameAs).length} repeats not run again) in ${seconds} s\n`);
  }, 15 * 60_000);
});
