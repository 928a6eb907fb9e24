/**
 * Runs the rendered preflight exactly as Kubernetes does (`<shell> -ec SCRIPT -- argv...`)
 * with a fake nvidia-smi, a recording `sleep` and a fake engine first on PATH.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { PreflightSettings } from '../../src/core/preflight/settings.js';
import { renderPreflightScript } from '../../src/core/preflight/script.js';

function which(cmd: string): string {
  const r = spawnSync('sh', ['-c', `command -v ${cmd}`], { encoding: 'utf8' });
  const p = r.stdout.trim();
  if (r.status !== 0 || !p.startsWith('/')) {
    throw new Error(`${cmd} is required for these tests (apt-get install -y shellcheck dash busybox util-linux)`);
  }
  return p;
}

export const BUSYBOX = which('busybox');
export const SLEEP = which('sleep');
export const UNSHARE = which('unshare');
export const SHELLCHECK = which('shellcheck');
export const SETPRIV = which('setpriv');
export const MOUNT = which('mount');
export const IS_ROOT = process.getuid?.() === 0;

/** Applets the script (and the fakes) use, provided by busybox in the busybox variant. */
const BUSYBOX_APPLETS = ['awk', 'sleep', 'date', 'cat', 'wc', 'kill', 'printf', 'sh', 'env', 'rm', 'mkdir', 'cut', 'grep'];

export interface ShellKind {
  name: string;
  /** argv before `-ec`. */
  argv: string[];
  /** Build the PATH tail (after the fake bin dir) for this shell. */
  busyboxOnly: boolean;
}

export const SHELLS: ShellKind[] = [
  { name: 'dash', argv: [which('dash')], busyboxOnly: false },
  { name: 'busybox sh', argv: [BUSYBOX, 'sh'], busyboxOnly: true },
  { name: 'bash', argv: [which('bash')], busyboxOnly: false },
];

/** One nvidia-smi --query-gpu reading: what it prints on stdout and its exit status. */
export interface Reading {
  out: string;
  rc?: number;
  /** Seconds the fake takes before it answers. */
  delay?: number;
  /** Never answer (a wedged driver): the fake becomes a long sleep. */
  hang?: boolean;
  /** While hanging, ignore SIGTERM (only KILL ends it). */
  ignoreTerm?: boolean;
  /**
   * Hang in a process the fake starts, which keeps its stdout open: 'child' is a wrapper script
   * waiting for it; 'escaped' leaves a copy that is no longer its descendant; 'escaped-unmarked'
   * the same without the preflight's mark (standing for one the script cannot stop, as a process
   * stuck in the driver, which no signal ends); 'orphan' answers, exits, and leaves a child
   * holding the output.
   */
  hangIn?: 'child' | 'escaped' | 'escaped-unmarked' | 'orphan';
  /**
   * How many --query-gpu fields this nvidia-smi knows (an older driver): a query asking for more
   * answers exit status 2, as nvidia-smi does for a field it does not know. Default: all six.
   */
  knowsFields?: number;
  /** After answering, leave a child running that does not hold the output (a wrapper's daemon). */
  leaveChild?: boolean;
}

/** An H200 as nvidia-smi reads it (field notes): total and the driver's reserve, in MiB. */
export const TOTAL = 143771;
export const RESERVED = 616;
/** What CUDA can use: total - reserved. */
export const CUDA_TOTAL = TOTAL - RESERVED;
/** The default context estimate on one GPU (CONTEXT_MIB_AUTO.oneGpu). */
export const CONTEXT_ONE = 768;
/** ceil(0.9 * 143155) = ceil(128839.5): what vLLM asks at 0.9. */
export const REQUEST_09 = 128840;
/** The preflight's need at 0.9 on one GPU: vLLM's request plus its context. */
export const NEED_09 = REQUEST_09 + CONTEXT_ONE;
/** How the need at 0.9 is explained in the log lines. */
export const HOW_09 = `${REQUEST_09} for vLLM: 0.9 x ${CUDA_TOTAL} MiB CUDA total = ${TOTAL} - ${RESERVED} reserved; ${CONTEXT_ONE} for its CUDA context; 0 headroom`;

/**
 * One GPU's row as nvidia-smi answers the preflight's query
 * (index,uuid,memory.total,memory.free,mig.mode.current,memory.reserved); the fake cuts it to
 * the fields a query asks for.
 */
export function gpuLine(
  index: number,
  free: number,
  total = TOTAL,
  uuid = `GPU-${index}aaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee`,
  { reserved = String(RESERVED), mig = 'Disabled' }: { reserved?: string; mig?: string } = {},
): string {
  return `${index}, ${uuid}, ${total}, ${free}, ${mig}, ${reserved}\n`;
}

export const DEFAULTS: PreflightSettings = {
  version: '0.1.0',
  utilization: '0.9',
  headroomMiB: 0,
  timeoutSeconds: 30,
  pollIntervalSeconds: 0.05,
  logIntervalSeconds: 5,
  onNvidiaSmiUnavailable: 'warn',
  terminationMessagePath: '/tmp/unused',
};

export interface RunOptions {
  settings?: Partial<PreflightSettings>;
  readings?: Reading[];
  /** Output of --query-compute-apps. */
  apps?: string;
  /** Leave nvidia-smi off PATH. */
  noNvidiaSmi?: boolean;
  /** Make the recording `sleep` refuse fractional seconds (like a minimal sleep). */
  sleepIntegerOnly?: boolean;
  args?: string[];
  env?: Record<string, string>;
  /** Run as PID 1 of a new PID namespace (unshare --pid --fork --kill-child). */
  pid1?: boolean;
  /** Replace the rendered script. */
  script?: string;
  /** PATH without awk (only the few tools the fakes need). */
  noAwk?: boolean;
  /** Omit the engine from the argv (nothing after `--`). */
  noCommand?: boolean;
  /** Replace the start after `--` (engine path and args) entirely. */
  start?: string[];
  /** The --query-compute-apps call hangs too. */
  appsHang?: boolean;
  /**
   * Locked-down container (needs root, or --map-root-user): a mount namespace where every
   * mount is read-only except the run's own directory (records of the fakes, the termination
   * message), bin/ is read-only too, cwd is /, HOME does not exist and TMPDIR is unset.
   */
  lockdown?: boolean;
  /** With lockdown: run the shell as uid/gid 65534 (needs real root). */
  nonRoot?: boolean;
  /** With lockdown: hide /proc (an empty tmpfs over it), so /proc/uptime is missing. */
  noProc?: boolean;
  /** Extra shell commands run (as root, in the namespace) before the shell starts. */
  setup?: string;
  /** Replace the PATH tail (after the fake bin dir). */
  pathTail?: string;
  /**
   * A fake `date` first on PATH: 'jumps' prints 1000, then 87400 (set a day forward), then 50 (set back)
   * from then on; 'broken' fails. 'second-ends' and 'second-begins' tell the true time in whole seconds,
   * the first call 0.999 s before a whole second ends (the worst case for counting too much) or just as
   * one begins (the worst case for counting too little).
   */
  fakeDate?: 'jumps' | 'broken' | 'second-ends' | 'second-begins';
}

export interface Run {
  dir: string;
  child: ChildProcess;
  done: Promise<Result>;
  /** performance.now() when the shell (or unshare) exited; `done` also waits for its stdout and stderr to close. */
  exited: Promise<number>;
  /** Host pid of the shell (for pid1 runs: the child of unshare). */
  shellPid(): Promise<number>;
  queries(): string[];
}

export interface Result {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  ms: number;
  dir: string;
  /** --query-gpu calls the fake nvidia-smi saw, one argument string each. */
  queries: string[];
  appsQueries: number;
  sleeps: string[];
  /** Poll-interval sleeps (the deadline's sleeps, whose stdout is /dev/null, are in deadlineSleeps). */
  deadlineSleeps: string[];
  /** Host-side pids of every fake nvidia-smi started (for orphan checks use leftovers()). */
  smiPids: number[];
  /** Files in the run directory after the run (names only). */
  files: string[];
  /** argv the engine got (undefined when the engine never ran). */
  engineArgv?: string[];
  engineEnv?: Record<string, string>;
  enginePid?: number;
  /** `PID STATE` of each process the engine inherited as its child, zombies too (none, when all is well). */
  engineChildren?: string[];
  /** stderr lines starting with `vram-preflight:`. */
  lines: string[];
  terminationMessage?: string;
}

const tempDirs: string[] = [];
export function cleanupTempDirs(): void {
  for (const d of tempDirs.splice(0)) rmSync(d, { recursive: true, force: true });
}

function sh(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}

function readLines(path: string): string[] {
  return existsSync(path) ? readFileSync(path, 'utf8').split('\n').filter((l) => l !== '') : [];
}

function readNul(path: string): string[] | undefined {
  if (!existsSync(path)) return undefined;
  const parts = readFileSync(path, 'utf8').split('\0');
  parts.pop();
  return parts;
}

export function start(shell: ShellKind, opts: RunOptions = {}): Run {
  const dir = mkdtempSync(join(tmpdir(), 'vram-preflight-'));
  tempDirs.push(dir);
  if (opts.nonRoot) chmodSync(dir, 0o777);
  else if (opts.lockdown) chmodSync(dir, 0o755);
  const bin = join(dir, 'bin');
  const bbdir = join(dir, 'busybox-bin');
  spawnSync('mkdir', ['-p', bin, bbdir]);
  const settings: PreflightSettings = {
    ...DEFAULTS,
    terminationMessagePath: join(dir, 'termination-log'),
    ...opts.settings,
  };
  const script = opts.script ?? renderPreflightScript(settings);

  const readings = opts.readings ?? [{ out: gpuLine(0, 140000) }];
  readings.forEach((r, i) => {
    writeFileSync(join(dir, `reading.${i + 1}`), r.out);
    writeFileSync(join(dir, `reading.${i + 1}.rc`), String(r.rc ?? 0));
    writeFileSync(join(dir, `reading.${i + 1}.delay`), String(r.delay ?? 0));
    writeFileSync(join(dir, `reading.${i + 1}.hang`), r.hang ? (r.hangIn ?? (r.ignoreTerm ? 'ignore-term' : 'hang')) : '');
    writeFileSync(join(dir, `reading.${i + 1}.knows`), String(r.knowsFields ?? 6));
    writeFileSync(join(dir, `reading.${i + 1}.leave`), r.leaveChild ? 'yes' : '');
  });
  writeFileSync(join(dir, 'apps'), opts.apps ?? '');

  const realSleep = shell.busyboxOnly ? `${BUSYBOX} sleep` : SLEEP;
  if (!opts.noNvidiaSmi) {
    // Replays reading.N on the Nth --query-gpu reading (the last one repeats) and records each call;
    // a query for more fields than the reading's driver knows answers exit status 2 (and is not
    // counted as a reading), and the answer is cut to the fields asked for.
    writeFileSync(
      join(bin, 'nvidia-smi'),
      `#!/bin/sh
D=${sh(dir)}
echo $$ >>"$D/smi-pids"
case "$*" in *--query-compute-apps*) echo x >>"$D/apps-calls"; ${opts.appsHang ? `exec ${realSleep} 100000 ;;` : 'cat "$D/apps"; exit 0 ;;'} esac
echo "$*" >>"$D/all-queries"
n=$(cat "$D/queries" 2>/dev/null | wc -l); n=$((n + 1))
[ -f "$D/reading.$n" ] || n=${readings.length}
fields=$(echo "$*" | cut -d' ' -f1 | cut -d= -f2)
asked=1 rest=$fields
while [ "\${rest#*,}" != "$rest" ]; do rest=\${rest#*,}; asked=$((asked + 1)); done
if [ "$asked" -gt "$(cat "$D/reading.$n.knows")" ]; then echo "Field \"memory.reserved\" is not a valid field to query."; exit 2; fi
echo "$*" >>"$D/queries"
case $(cat "$D/reading.$n.hang") in
hang) exec ${realSleep} 100000 ;;
ignore-term) trap '' TERM; exec ${realSleep} 100000 ;;
child) ${realSleep} 100000; exit 0 ;;
escaped) (${realSleep} 100000 &); exec ${realSleep} 100000 ;;
escaped-unmarked) (env -u VRAM_PREFLIGHT_QUERY ${realSleep} 100000 &); exec ${realSleep} 100000 ;;
orphan) cut -d, -f1-"$asked" "$D/reading.$n"; ${realSleep} 100000 & exit 0 ;;
esac
${realSleep} "$(cat "$D/reading.$n.delay")"
# cut only when asked for fewer fields: busybox cut ends a line at a NUL byte
if [ "$asked" = 6 ]; then cat "$D/reading.$n"; else cut -d, -f1-"$asked" "$D/reading.$n"; fi
[ -z "$(cat "$D/reading.$n.leave")" ] || ${realSleep} 100000 >/dev/null 2>&1 &
exit "$(cat "$D/reading.$n.rc")"
`,
    );
    chmodSync(join(bin, 'nvidia-smi'), 0o755);
  }
  writeFileSync(
    join(bin, 'sleep'),
    `#!/bin/sh
# the preflight's query deadline runs sleep with stdout on /dev/null; the pause between polls does not
if [ /proc/self/fd/1 -ef /dev/null ]; then echo "$*" >>${sh(join(dir, 'deadline-sleeps'))}; else echo "$*" >>${sh(join(dir, 'sleeps'))}; fi
${opts.sleepIntegerOnly ? `case "$1" in *.*) echo "sleep: invalid number '$1'" >&2; exit 1 ;; esac\n` : ''}exec ${realSleep} "$@"
`,
  );
  chmodSync(join(bin, 'sleep'), 0o755);
  if (opts.fakeDate) {
    writeFileSync(
      join(bin, 'date'),
      opts.fakeDate === 'broken'
        ? '#!/bin/sh\necho "date: broken" >&2\nexit 1\n'
        : opts.fakeDate === 'second-ends' || opts.fakeDate === 'second-begins'
          ? `#!/bin/sh
now=$(${which('date')} +%s%N)
[ -s ${sh(join(dir, 'date-start'))} ] || echo "$now" >${sh(join(dir, 'date-start'))}
read -r start <${sh(join(dir, 'date-start'))}
echo $(( 1000 + (now - start + ${opts.fakeDate === 'second-ends' ? 999_000_000 : 0}) / 1000000000 ))
`
          : `#!/bin/sh
echo x >>${sh(join(dir, 'date-calls'))}
case $(wc -l <${sh(join(dir, 'date-calls'))}) in 1) echo 1000 ;; 2) echo 87400 ;; *) echo 50 ;; esac
`,
    );
    chmodSync(join(bin, 'date'), 0o755);
  }
  const engine = join(dir, 'engine');
  writeFileSync(
    engine,
    `#!/bin/sh
: >${sh(join(dir, 'engine-argv'))}
[ "$#" -eq 0 ] || printf '%s\\0' "$@" >${sh(join(dir, 'engine-argv'))}
/usr/bin/env -0 >${sh(join(dir, 'engine-env'))}
echo $$ >${sh(join(dir, 'engine-pid'))}
# the processes it inherited (its children, zombies too), found with builtins only; by its pid
# as this /proc numbers it (under unshare --pid without its own /proc, that is not $$)
read -r me _ </proc/self/stat
kids() {
  for f in /proc/[0-9]*/stat; do
    { read -r line <"$f"; } 2>/dev/null || continue
    set -- \${line##*) }
    [ "$2" != "$me" ] || { f=\${f#/proc/}; echo "\${f%/stat} $1"; }
  done
}
kids >${sh(join(dir, 'engine-children'))}
`,
  );
  chmodSync(engine, 0o755);

  let pathTail = opts.pathTail ?? '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';
  if (shell.busyboxOnly) {
    for (const a of BUSYBOX_APPLETS) spawnSync('ln', ['-s', BUSYBOX, join(bbdir, a)]);
    pathTail = bbdir;
  }
  if (opts.noAwk) {
    const tools = join(dir, 'tools');
    spawnSync('mkdir', ['-p', tools]);
    for (const t of ['cat', 'wc', 'date', 'cut']) spawnSync('ln', ['-s', shell.busyboxOnly ? BUSYBOX : which(t), join(tools, t)]);
    pathTail = tools;
  }
  const env: Record<string, string> = {
    PATH: `${bin}:${pathTail}`,
    LC_ALL: 'C',
    HOME: opts.lockdown ? '/nonexistent-home' : dir,
    ENGINE_MARKER: 'kept',
    // every process of this run inherits it: how leftovers() finds what is still running
    VRAM_PREFLIGHT_TEST_RUN: dir,
    ...opts.env,
  };
  if (opts.lockdown) chmodSync(bin, 0o755);

  writeFileSync(join(dir, 'not-executable'), '#!/bin/sh\n', { mode: 0o644 });
  // `{dir}` in opts.start stands for the run directory
  const startArgv = opts.start?.map((a) => a.replace('{dir}', dir)) ?? (opts.noCommand ? [] : [engine, ...(opts.args ?? [])]);
  let argv = [...shell.argv, '-ec', script, '--', ...startArgv];
  if (opts.lockdown) {
    // sh -c SETUP -- argv: SETUP ends by exec-ing argv, so the shell under test stays PID 1.
    const setup = [
      `D=${sh(dir)}`,
      `${MOUNT} --bind "$D" "$D"`,
      `${MOUNT} --bind "$D/bin" "$D/bin"`,
      `${MOUNT} -o remount,bind,ro "$D/bin"`,
      // every other mount read-only (/, /tmp, /dev, /dev/shm, ...): /dev/null stays usable, being a device
      `for m in $(awk '{print $2}' /proc/mounts); do case $m in "$D"|"$D"/*) ;; *) ${MOUNT} -o remount,bind,ro "$m" 2>/dev/null || : ;; esac; done`,
      ...(opts.noProc ? [`${MOUNT} -t tmpfs -o ro,size=4k none /proc`] : []),
      ...(opts.setup ? [opts.setup] : []),
      'cd /',
      'unset TMPDIR',
      opts.nonRoot ? `exec ${SETPRIV} --reuid=65534 --regid=65534 --clear-groups -- "$@"` : 'exec "$@"',
    ].join('\n');
    argv = ['/bin/sh', '-ec', setup, '--', ...argv];
  }
  const ns = opts.lockdown ? ['--mount'] : [];
  // PID 1 of its own PID namespace with its own /proc, as in a container
  const cmd = opts.pid1 || opts.lockdown ? [UNSHARE, '--pid', '--fork', '--kill-child', '--mount-proc', ...ns, ...(IS_ROOT ? [] : ['--map-root-user']), ...argv] : argv;
  const t0 = performance.now();
  const child = spawn(cmd[0]!, cmd.slice(1), { env, cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (b: Buffer) => (stdout += b.toString()));
  child.stderr!.on('data', (b: Buffer) => (stderr += b.toString()));
  const exited = new Promise<number>((resolve) => child.on('exit', () => resolve(performance.now())));
  const done = new Promise<Result>((resolve, reject) => {
    child.on('error', reject);
    child.on('close', (code, signal) => {
      const ms = performance.now() - t0;
      const envList = readNul(join(dir, 'engine-env'));
      const termPath = settings.terminationMessagePath;
      resolve({
        code,
        signal,
        stdout,
        stderr,
        ms,
        dir,
        queries: readLines(join(dir, 'queries')),
        appsQueries: readLines(join(dir, 'apps-calls')).length,
        sleeps: readLines(join(dir, 'sleeps')),
        deadlineSleeps: readLines(join(dir, 'deadline-sleeps')),
        smiPids: readLines(join(dir, 'smi-pids')).map(Number),
        files: existsSync(dir) ? readdirSync(dir).sort() : [],
        engineArgv: readNul(join(dir, 'engine-argv')),
        engineEnv: envList && Object.fromEntries(envList.map((kv) => [kv.slice(0, kv.indexOf('=')), kv.slice(kv.indexOf('=') + 1)])),
        enginePid: existsSync(join(dir, 'engine-pid')) ? Number(readFileSync(join(dir, 'engine-pid'), 'utf8')) : undefined,
        engineChildren: existsSync(join(dir, 'engine-children')) ? readLines(join(dir, 'engine-children')) : undefined,
        lines: stderr.split('\n').filter((l) => l.startsWith('vram-preflight:')),
        terminationMessage: termPath.startsWith(dir) && existsSync(termPath) ? readFileSync(termPath, 'utf8') : undefined,
      });
    });
  });
  return {
    dir,
    child,
    done,
    exited,
    queries: () => readLines(join(dir, 'queries')),
    shellPid: async () => {
      if (!opts.pid1) return child.pid!;
      for (let i = 0; i < 200; i++) {
        const kids = childrenOf(child.pid!);
        if (kids.length === 1) return kids[0]!;
        await delay(10);
      }
      throw new Error(`no child of unshare (pid ${child.pid}) found`);
    },
  };
}

export async function run(shell: ShellKind, opts: RunOptions = {}): Promise<Result> {
  return start(shell, opts).done;
}

export function delay(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** Host pids whose parent is `ppid` (scans /proc; /proc/PID/task/PID/children is not always there). */
export function childrenOf(ppid: number): number[] {
  const out: number[] = [];
  for (const e of readdirSync('/proc')) {
    if (!/^\d+$/.test(e)) continue;
    try {
      const stat = readFileSync(`/proc/${e}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (Number(fields[1]) === ppid) out.push(Number(e));
    } catch {
      // the process ended while we looked
    }
  }
  return out;
}

/** The pid a process has in its innermost PID namespace (last NSpid field). */
export function nsPid(hostPid: number): number {
  const status = readFileSync(`/proc/${hostPid}/status`, 'utf8');
  const m = /^NSpid:\s+(.*)$/m.exec(status);
  if (!m) throw new Error(`no NSpid in /proc/${hostPid}/status`);
  return Number(m[1]!.trim().split(/\s+/).pop());
}

export async function waitFor(cond: () => boolean, ms = 5000): Promise<void> {
  const end = performance.now() + ms;
  while (!cond()) {
    if (performance.now() > end) throw new Error('condition not met in time');
    await delay(5);
  }
}

export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return false;
  }
}

/** Host pids of processes that are still running (not zombies) and belong to the run in `dir`. */
export function leftovers(dir: string): Array<{ pid: number; cmd: string }> {
  const out: Array<{ pid: number; cmd: string }> = [];
  const marker = `VRAM_PREFLIGHT_TEST_RUN=${dir}\0`;
  for (const e of readdirSync('/proc')) {
    if (!/^\d+$/.test(e)) continue;
    try {
      if (!readFileSync(`/proc/${e}/environ`, 'latin1').includes(marker)) continue;
      if (!isAlive(Number(e))) continue;
      out.push({ pid: Number(e), cmd: readFileSync(`/proc/${e}/cmdline`, 'latin1').split('\0').join(' ').trim() });
    } catch {
      // ended while we looked, or not ours to read
    }
  }
  return out;
}

/** Waits until nothing of the run in `dir` is left running; returns what is still there after `ms`. */
export async function settle(dir: string, ms = 2000): Promise<Array<{ pid: number; cmd: string }>> {
  const end = performance.now() + ms;
  let left = leftovers(dir);
  while (left.length > 0 && performance.now() < end) {
    await delay(50);
    left = leftovers(dir);
  }
  return left;
}

/** The judge awk program inside a rendered script (the text between `judge='` and the closing `'`). */
export function judgeProgram(script: string): string {
  const m = /^judge='([^']*)'$/m.exec(script);
  if (!m) throw new Error('judge program not found in script');
  return m[1]!;
}
