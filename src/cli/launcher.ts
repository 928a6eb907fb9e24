/**
 * dist/vram-preflight.cjs, the file that is run. First, with no arguments
 * and no VRAM_PREFLIGHT_* variable, it reads stdin; input that mentions no
 * target word (src/core/decide/target-words.ts) is written back as it came, without loading
 * the application: most renders Helm and Argo CD pass through are so, and
 * then cost little more than Node's own start. Otherwise it loads the
 * application (the esbuild bundle of src/cli/bin.ts, which scripts/build.mjs
 * writes next to it as <launcher stem>.app.js), hands it what it read, and
 * compiles it through `vm.Script` with a V8 code cache, so that a run after
 * the first skips compiling the code it uses (~40 ms of a ~100 ms run on
 * Node 20).
 *
 * The application is a file of its own, not a string in this one: Node would
 * read this file as UTF-8 and V8 parse a 230 KiB string literal at every
 * start (a few ms). It is pure ASCII (the build checks), so it is read as
 * latin1, a plain copy into a one-byte string. Its first line names its build; an
 * application of another build, or none, stops the run with one line on
 * stderr (exit code 1), before anything is read or written.
 *
 * The cache is a file next to the bundle:
 *
 *   <launcher name>.<hash16>.node-<version>-<arch>.v8cache
 *
 * hash16: the first 16 hex digits of the SHA-256 of the application's source,
 * computed at build time (V8 itself checks only the source's length); the
 * Node version and architecture are in the name so that another Node never
 * even reads it. V8 checks the rest (its version, flags) and rejects a cache
 * that does not fit: then the run compiles as if there were none.
 *
 * Written only when it was absent or rejected, at the end of a run
 * (`beforeExit`, after all output is written and the exit code decided):
 * first the app's `warmUp()` runs the CLI in memory on a small example (so
 * that the cache holds the functions a real render compiles, whatever this
 * run did), then `createCachedData()`, written to a temporary file and renamed
 * over the cache (atomic; concurrent runs are harmless). Any failure, and a
 * directory that is not writable, is silently ignored: then every run
 * compiles cold, as without the cache. Nothing of this changes what the CLI
 * reads, writes or returns.
 *
 * A read-only install (the Argo CD image, a packaged plugin directory) gets
 * its cache by running the bundle once at packaging time with the Node that
 * will run it: `node vram-preflight.cjs --version`.
 *
 * V8 also rejects a cache made under other V8 flags; a run with flags of its
 * own (node's command line, NODE_OPTIONS) therefore uses a cache of its own,
 * named with a hash of those flags, instead of rewriting the common one.
 *
 * NODE_DISABLE_COMPILE_CACHE=1 (Node's own switch for its compile cache) turns
 * the cache off: neither read nor written.
 *
 * No V8 flags are set at run time: 0.2.0 capped tiering (`--max-opt=1`) to
 * keep TurboFan off the yaml lexer in short runs, which cost ~5 ms of loading
 * node:v8 (and Node's stream modules with it). Since the fast parse path
 * (src/core/yaml/fast-parse.ts) a short run optimises nothing, and the cap only cost
 * (docs/benchmarks.md).
 */
import { accessSync, closeSync, constants, fstatSync, openSync, readSync, renameSync, unlinkSync, writeFileSync, writeSync } from 'node:fs';
import { isUtf8 } from 'node:buffer';
import { basename, dirname, join } from 'node:path';
import { Script } from 'node:vm';
import { mayHoldTargetInPieces } from '../core/decide/target-words.js';
import { finish, handOverStdin, readStdin, stdout, withoutScriptExtension } from './process-io.js';

/** The application's file name, next to this file (scripts/build.mjs). */
declare const __vram_preflight_app: string;
declare const __vram_preflight_hash: string;

type AppFunction = (exports: unknown, require: NodeRequire, module: NodeModule, filename: string, dirname: string) => void;

const file = __filename;
const dir = dirname(file);
const enabled = !process.env.NODE_DISABLE_COMPILE_CACHE;
const nodeFlags = `${process.execArgv.join(' ')} ${process.env.NODE_OPTIONS ?? ''}`.trim();
const cacheFile = join(
  dir,
  `${withoutScriptExtension(basename(file))}.${__vram_preflight_hash}.node-${process.version}-${process.arch}${nodeFlags === '' ? '' : `-${fnv1a(nodeFlags)}`}.v8cache`,
);

/** FNV-1a, 32 bits, hex: names a set of flags (no crypto needed to tell them apart). */
function fnv1a(text: string): string {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 0x01000193);
  return (h >>> 0).toString(16).padStart(8, '0');
}


/** One line on stderr and exit code 1: the installation is incomplete; nothing else has happened yet. */
function stop(problem: string): never {
  try {
    writeSync(2, `vram-preflight: error: ${problem}; install both files of one build side by side (docs/install.md)\n`);
  } catch {
    // nowhere left to say it
  }
  process.exit(1);
}

const appFile = join(dir, __vram_preflight_app);
const header = `/* vram-preflight application, build ${__vram_preflight_hash} */\n`;

/** An open file and its size. */
function open(path: string): { fd: number; size: number } {
  const fd = openSync(path, 'r');
  try {
    return { fd, size: fstatSync(fd).size };
  } catch (error) {
    closeSync(fd);
    throw error;
  }
}

/** Reads all of `file` into the start of `buffer` (which is large enough), and closes it. */
function readAll(file: { fd: number; size: number }, buffer: Buffer): Buffer {
  try {
    let length = 0;
    while (length < file.size) {
      const n = readSync(file.fd, buffer, length, file.size - length, length);
      if (n === 0) break;
      length += n;
    }
    return buffer.subarray(0, length);
  } finally {
    closeSync(file.fd);
  }
}

/**
 * Passes the input through, without loading the application, when it cannot
 * hold anything to rewrite: no arguments, no VRAM_PREFLIGHT_* variable (no
 * configured images, no report file), UTF-8 input that mentions none of the
 * target words (src/core/decide/target-words.ts), also where a piece boundary cuts one
 * in two. The application would write the same
 * bytes, through the same code (src/cli/process-io.ts), and exit 0: the
 * differential test in test/core/io.test.ts runs both on every fixture.
 * Otherwise what was read goes to the application. True when done.
 */
function passedThrough(): boolean {
  if (process.argv.length !== 2 || Object.keys(process.env).some((name) => name.startsWith('VRAM_PREFLIGHT_'))) return false;
  const read = readStdin();
  // Input that is not ASCII is decoded as the CLI decodes it (src/cli/main.ts), and handed over decoded; not UTF-8 is the CLI's error to report.
  const text = Array.isArray(read) ? read : Buffer.isBuffer(read) && isUtf8(read) ? [read.toString('utf8')] : undefined;
  if (text !== undefined && !mayHoldTargetInPieces(text)) {
    for (const piece of text) stdout.write(piece);
    finish(0);
    return true;
  }
  handOverStdin(text ?? read);
  return false;
}

/** Loads the application with its code cache and runs it. */
function runApplication(): void {
  let app: { fd: number; size: number };
  try {
    app = open(appFile);
  } catch (error) {
    stop(`cannot read the application ${appFile} (${(error as NodeJS.ErrnoException).code ?? String(error)}), which ${file} runs`);
  }
  let cache: { fd: number; size: number } | undefined;
  if (enabled) {
    try {
      cache = open(cacheFile);
    } catch {
      // absent or unreadable: compile cold
    }
  }
  // One buffer for both files, the cache read over the application once that is
  // a string: every page first touched costs, and the cache is as large again.
  const buffer = Buffer.allocUnsafeSlow(Math.max(app.size, cache?.size ?? 0));
  let source: string;
  try {
    source = readAll(app, buffer).toString('latin1');
  } catch (error) {
    stop(`cannot read the application ${appFile} (${(error as NodeJS.ErrnoException).code ?? String(error)}), which ${file} runs`);
  }
  if (!source.startsWith(header)) stop(`${appFile} is not the application of the build of ${file}`);

  let cachedData: Buffer | undefined;
  if (cache !== undefined) {
    try {
      cachedData = readAll(cache, buffer);
    } catch {
      // unreadable: compile cold
    }
  }
  const script = new Script(source, { filename: appFile, cachedData });
  const write = enabled && (cachedData === undefined || script.cachedDataRejected === true);
  cachedData = undefined;
  (script.runInThisContext() as AppFunction).call(module.exports, module.exports, require, module, file, dir);

  if (write) {
    process.once('beforeExit', () => {
      try {
        accessSync(dir, constants.W_OK);
      } catch {
        return;
      }
      let warming: unknown;
      try {
        warming = (module.exports as { warmUp?: () => Promise<unknown> }).warmUp?.();
      } catch {
        // the cache then holds less; still worth writing
      }
      Promise.resolve(warming)
        .catch(() => undefined)
        .then(() => {
          const tmp = `${cacheFile}.${process.pid}.tmp`;
          try {
            writeFileSync(tmp, script.createCachedData(), { mode: 0o644 });
            renameSync(tmp, cacheFile);
          } catch {
            try {
              unlinkSync(tmp);
            } catch {
              // nothing was written
            }
          }
        });
    });
  }
}

if (!passedThrough()) runApplication();
