/**
 * The process's stdin, stdout and stderr, for the application (src/cli/bin.ts)
 * and for the launcher's pass-through (src/cli/launcher.ts), which must behave
 * exactly alike: one implementation, bundled into both.
 *
 * stdin and stdout/stderr are read and written with fs.readSync/fs.writeSync
 * on fds 0/1/2, not through process.stdin/stdout/stderr, whose first use
 * costs ~8 ms of start-up (a stream per fd). A non-blocking stdin falls back
 * to process.stdin; a non-blocking stdout (EAGAIN) is waited on, never
 * dropped; partial writes continue where they stopped.
 *
 * stdout is written in batches (WRITE_BATCH), flushed before any write to
 * stderr and at the end, so the order of the two as one stream is kept.
 *
 * A failed write to stdout (EPIPE: the reader went away; ENOSPC: disk full;
 * EBADF: stdout closed) ends the run with ONE line on stderr and exit code 74
 * (EX_IOERR of sysexits.h), whatever the CLI decided: the output is incomplete.
 */
import { isAscii } from 'node:buffer';
import { readFileSync, readlinkSync, readSync, writeSync } from 'node:fs';

/** Exit code when stdout cannot be written (EX_IOERR). */
export const EXIT_WRITE_FAILED = 74;

const sleep = (ms: number): void => {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
};

/** Writes all of `data` to `fd`, across partial writes and EAGAIN (a non-blocking pipe that is full). */
function writeAll(fd: number, data: string | Buffer): void {
  const text = typeof data === 'string' ? data : '';
  let rest = typeof data === 'string' ? undefined : data;
  for (;;) {
    let n: number;
    try {
      n = rest === undefined ? writeSync(fd, text) : writeSync(fd, rest);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'EAGAIN') {
        sleep(1);
        continue;
      }
      throw error;
    }
    if (rest === undefined) {
      // writeSync(fd, string) returns bytes; a string's length is <= its UTF-8 length.
      if (n >= text.length && n === Buffer.byteLength(text)) return;
      rest = Buffer.from(text).subarray(n);
    } else {
      rest = rest.subarray(n);
    }
    if (rest.length === 0) return;
  }
}

/**
 * Node reopens a closed fd 0-2 as /dev/null (read-write) at start-up, so
 * `vram-preflight >&-` would write into nothing and succeed. A shell's
 * `> /dev/null` opens it write-only; only the read-write one is taken for closed.
 */
function stdoutIsClosed(): boolean {
  if (process.platform !== 'linux') return false;
  try {
    if (readlinkSync('/proc/self/fd/1') !== '/dev/null') return false;
    const flags = /^flags:\s*([0-7]+)$/m.exec(readFileSync('/proc/self/fdinfo/1', 'latin1'))?.[1];
    return flags !== undefined && (Number.parseInt(flags, 8) & 3) === 2;
  } catch {
    return false;
  }
}

let writeFailure: NodeJS.ErrnoException | undefined;
let stdoutChecked = false;

function writeStdout(data: string | Buffer): void {
  if (writeFailure !== undefined) return;
  try {
    if (!stdoutChecked) {
      stdoutChecked = true;
      if (stdoutIsClosed()) throw Object.assign(new Error('stdout is closed'), { code: 'EBADF' });
    }
    writeAll(1, data);
  } catch (error) {
    writeFailure = error as NodeJS.ErrnoException;
  }
}

/**
 * stdout is written in batches of up to this many bytes: the CLI writes a
 * render as one piece per document (10,000 write calls for 10,000 documents
 * otherwise), always after the whole transform succeeded.
 */
const WRITE_BATCH = 1 << 18;
let batch: Buffer | undefined;
let batched = 0;

/** Writes what is batched for stdout now (a long-running door's stdout line must not wait for the run's end). */
export function flushStdout(): void {
  if (batched === 0 || batch === undefined) return;
  const bytes = batch.subarray(0, batched);
  batched = 0;
  writeStdout(bytes);
}

export const stdout = {
  write(text: string): boolean {
    if (writeFailure !== undefined || text === '') return writeFailure === undefined;
    // A UTF-16 unit is at most 3 bytes of UTF-8.
    if (batched + text.length * 3 > WRITE_BATCH) flushStdout();
    if (text.length * 3 > WRITE_BATCH) writeStdout(text);
    else batched += (batch ??= Buffer.allocUnsafe(WRITE_BATCH)).write(text, batched);
    return writeFailure === undefined;
  },
};

export const stderr = {
  write(text: string): boolean {
    // What the CLI wrote to stdout before goes out first (2>&1 keeps the order).
    flushStdout();
    try {
      writeAll(2, text);
      return true;
    } catch {
      return false; // nowhere left to say it
    }
  },
};

const WHY: Record<string, string> = {
  EPIPE: 'the reading end of the pipe was closed',
  ECONNRESET: 'the reading end of the socket was closed',
  ENOSPC: 'no space left on the device',
  EBADF: 'stdout is closed',
  EDQUOT: 'disk quota exceeded',
  EIO: 'input/output error',
};

/**
 * stdin that cannot be read (EISDIR: `vram-preflight < chart/templates`;
 * EBADF: stdin open for writing only): the errno code. Returned, not thrown,
 * so that the launcher hands it to the application like any input, and the
 * application reports it as it reports every input problem.
 */
export interface StdinFailure {
  readonly unreadable: string;
}

export function isStdinFailure(read: unknown): read is StdinFailure {
  return typeof read === 'object' && read !== null && 'unreadable' in read;
}

const UNREADABLE: Record<string, string> = {
  EISDIR: 'it is a directory',
  EBADF: 'it is not open for reading',
  EINVAL: 'it cannot be read',
  EIO: 'input/output error',
};

/** Why stdin could not be read, in words: `it is a directory (EISDIR)`. */
export function describeStdinFailure(failure: StdinFailure): string {
  return `${UNREADABLE[failure.unreadable] ?? 'read error'} (${failure.unreadable})`;
}

const failedRead = (error: unknown): StdinFailure => ({ unreadable: (error as NodeJS.ErrnoException).code ?? String((error as Error).message ?? error) });

/**
 * Bytes read at a time, into one buffer used again for every piece: a pipe
 * never costs a copy of what came before (a doubling buffer copies the input
 * once more, and every page first touched costs). From 1,031,913 bytes on,
 * Node makes a piece's string an external one (a malloc'd copy outside V8's
 * heap, which no scavenge copies or counts); heap-allocated pieces would
 * trigger scavenges while the rest is read and be promoted.
 */
const READ_PIECE = 1 << 20;

/**
 * All of stdin, read synchronously. ASCII input (almost every render) comes
 * back as text, in pieces that each end a line (src/core/yaml/stream.ts splits the
 * stream across them; joining them would cost as much as reading): each
 * piece decoded as latin1, which is exact for ASCII and skips UTF-8
 * validation and decoding. Anything else comes back as bytes, for the CLI to
 * check and decode as UTF-8. A non-blocking stdin (EAGAIN) continues through
 * process.stdin.
 */
export function readStdin(): string[] | Buffer | StdinFailure | Promise<Buffer | StdinFailure> {
  const buffer = Buffer.allocUnsafe(READ_PIECE);
  let text: string[] | undefined = [];
  let bytes: Buffer[] = [];
  let length = 0;
  // `full`: the buffer is full and more may come. A text piece then ends after its last newline; the rest begins the next.
  const take = (full: boolean): void => {
    if (length === 0) return;
    if (text !== undefined) {
      const newline = full ? buffer.lastIndexOf(0x0a, length - 1) : -1;
      const end = newline === -1 ? length : newline + 1;
      const piece = buffer.subarray(0, end);
      if (isAscii(piece)) {
        text.push(piece.toString('latin1'));
        length = buffer.copy(buffer, 0, end, length);
        return;
      }
      // Not ASCII: from here on bytes, the text so far back to the bytes it was read from.
      if (text.length > 0) bytes.push(Buffer.from(text.join(''), 'latin1'));
      text = undefined;
    }
    bytes.push(Buffer.from(buffer.subarray(0, length)));
    length = 0;
  };
  for (;;) {
    let n: number;
    try {
      n = readSync(0, buffer, length, buffer.length - length, null);
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if (code === 'EAGAIN') {
        take(false);
        return readRest(text === undefined ? Buffer.concat(bytes) : Buffer.from(text.join(''), 'latin1'));
      }
      if (code === 'EOF') break;
      return failedRead(error);
    }
    if (n === 0) break;
    length += n;
    if (length === buffer.length) take(true);
  }
  take(false);
  if (text !== undefined) return text;
  const all = bytes.length === 1 ? bytes[0]! : Buffer.concat(bytes);
  bytes = [];
  return all;
}

async function readRest(head: Buffer, limit = Infinity): Promise<Buffer | StdinFailure> {
  const parts: Buffer[] = [head];
  let size = head.length;
  try {
    for await (const chunk of process.stdin) {
      parts.push(chunk as Buffer);
      size += (chunk as Buffer).length;
      if (size > limit) break;
    }
  } catch (error) {
    return failedRead(error);
  }
  return Buffer.concat(parts);
}

/**
 * stdin as bytes, at most `limit` of them and one more (which tells that there
 * was more): `admit` reads what the webhook's body reader reads, never a whole
 * stream of any size into memory.
 */
export function readStdinUpTo(limit: number): Buffer | StdinFailure | Promise<Buffer | StdinFailure> {
  const buffer = Buffer.allocUnsafe(Math.min(READ_PIECE, limit + 1));
  const parts: Buffer[] = [];
  let size = 0;
  while (size <= limit) {
    let n: number;
    try {
      n = readSync(0, buffer, 0, Math.min(buffer.length, limit + 1 - size), null);
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if (code === 'EAGAIN') return readRest(Buffer.concat(parts), limit);
      if (code === 'EOF') break;
      return failedRead(error);
    }
    if (n === 0) break;
    parts.push(Buffer.from(buffer.subarray(0, n)));
    size += n;
  }
  return Buffer.concat(parts);
}

/** What the launcher read from stdin, for the application (two bundles, one process: a global). */
const STDIN_READ = Symbol.for('vram-preflight.stdin-read');

type StdinRead = ReturnType<typeof readStdin>;

/** The launcher read stdin and did not pass it through: the application takes it from here. */
export function handOverStdin(read: StdinRead | string[]): void {
  (globalThis as Record<symbol, unknown>)[STDIN_READ] = read;
}

/** stdin as the launcher handed it over, else read now. */
export function takeStdin(): StdinRead {
  const store = globalThis as Record<symbol, StdinRead | undefined>;
  const read = store[STDIN_READ];
  if (read === undefined) return readStdin();
  store[STDIN_READ] = undefined;
  return read;
}

/**
 * The end of a run whose CLI returned `code`: stdout flushed; a failed write
 * to it turns the run into exit code 74 with one line on stderr.
 */
export function finish(code: number): void {
  flushStdout();
  if (writeFailure !== undefined) {
    const failure = writeFailure.code ?? 'error';
    stderr.write(`vram-preflight: error: cannot write to stdout: ${failure} (${WHY[failure] ?? writeFailure.message}); the output is incomplete\n`);
    process.exitCode = EXIT_WRITE_FAILED;
    return;
  }
  process.exitCode = code;
}

/**
 * `name.replace(/\.c?js$/, '')`: a script's file name without `.js` or `.cjs`. Not the regex:
 * the launcher runs it on every render, in a fresh process where a regex costs its
 * compilation on its first run (docs/benchmarks.md).
 */
export function withoutScriptExtension(name: string): string {
  if (name.endsWith('.cjs')) return name.slice(0, -4);
  if (name.endsWith('.js')) return name.slice(0, -3);
  return name;
}
