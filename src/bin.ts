#!/usr/bin/env node
/**
 * The process around the CLI: stdin, stdout, stderr, files, exit code.
 *
 * stdin and stdout/stderr are read and written with fs.readSync/fs.writeSync
 * on fds 0/1/2, not through process.stdin/stdout/stderr, whose first use
 * costs ~8 ms of start-up (a stream per fd). A non-blocking stdin falls back
 * to process.stdin; a non-blocking stdout (EAGAIN) is waited on, never
 * dropped; partial writes continue where they stopped.
 *
 * A failed write to stdout (EPIPE: the reader went away; ENOSPC: disk full;
 * EBADF: stdout closed) ends the run with ONE line on stderr and exit code 74
 * (EX_IOERR of sysexits.h), whatever the CLI decided: the output is incomplete.
 */
import { fstatSync, readFileSync, readlinkSync, readSync, writeFileSync, writeSync } from 'node:fs';
import { main } from './cli.js';

export { warmUp } from './warmup.js';

/** Exit code when stdout cannot be written (EX_IOERR). */
export const EXIT_WRITE_FAILED = 74;

const sleep = (ms: number): void => {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
};

/** Writes all of `text` to `fd`, across partial writes and EAGAIN (a non-blocking pipe that is full). */
function writeAll(fd: number, text: string): void {
  let rest: Buffer | undefined;
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

const stdout = {
  write(text: string): boolean {
    if (writeFailure !== undefined || text === '') return writeFailure === undefined;
    try {
      if (!stdoutChecked) {
        stdoutChecked = true;
        if (stdoutIsClosed()) throw Object.assign(new Error('stdout is closed'), { code: 'EBADF' });
      }
      writeAll(1, text);
      return true;
    } catch (error) {
      writeFailure = error as NodeJS.ErrnoException;
      return false;
    }
  },
};

const stderr = {
  write(text: string): boolean {
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
 * All of stdin as one Buffer, read synchronously (one allocation for a file;
 * doubling for a pipe). A non-blocking stdin (EAGAIN) continues through process.stdin.
 */
function readStdin(): Buffer | Promise<Buffer> {
  let size = 0;
  try {
    const stat = fstatSync(0);
    if (stat.isFile()) size = stat.size;
  } catch {
    // not a file: grow as it comes
  }
  // A file: its size (+1 to see the end in one read). A pipe: 64 KiB, doubled as needed.
  let buffer = Buffer.allocUnsafe(Math.max(size + 1, 1 << 16));
  let length = 0;
  for (;;) {
    if (length === buffer.length) {
      const bigger = Buffer.allocUnsafe(buffer.length * 2);
      buffer.copy(bigger, 0, 0, length);
      buffer = bigger;
    }
    let n: number;
    try {
      n = readSync(0, buffer, length, buffer.length - length, null);
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if (code === 'EAGAIN') return readRest(buffer.subarray(0, length));
      if (code === 'EOF') break;
      throw error;
    }
    if (n === 0) break;
    length += n;
  }
  return length === buffer.length ? buffer : buffer.subarray(0, length);
}

async function readRest(head: Buffer): Promise<Buffer> {
  const parts: Buffer[] = [head];
  for await (const chunk of process.stdin) parts.push(chunk as Buffer);
  return Buffer.concat(parts);
}

/** Input size from which V8's optimising tier pays for itself (see src/launcher.ts). */
const OPTIMISE_FROM_BYTES = 1 << 20;

/**
 * A short run that will parse something (the pre-filter only parses documents
 * that mention vLLM): no optimising compiler, whose background work would
 * cost more CPU time than it saves. A performance hint only.
 */
function capTieringFor(input: Buffer): Buffer {
  if (input.length < OPTIMISE_FROM_BYTES && /vllm/i.test(input.toString('latin1'))) {
    (globalThis as Record<symbol, (() => void) | undefined>)[Symbol.for('vram-preflight.cap-tiering')]?.();
  }
  return input;
}

main(process.argv.slice(2), {
  stdin: (async function* () {
    yield capTieringFor(await readStdin());
  })(),
  stdout,
  stderr,
  env: process.env,
  readFile: (path) => readFileSync(path, 'utf8'),
  writeFile: (path, text) => writeFileSync(path, text),
  // Loaded only when a lookup is needed: most runs never pay for the registry client.
  lookupImageStarts: (images, options) => import('./registry/index.js').then((registry) => registry.lookupImageStarts(images, options)),
}).then(
  (code) => {
    if (writeFailure !== undefined) {
      const code = writeFailure.code ?? 'error';
      stderr.write(`vram-preflight: error: cannot write to stdout: ${code} (${WHY[code] ?? writeFailure.message}); the output is incomplete\n`);
      process.exitCode = EXIT_WRITE_FAILED;
      return;
    }
    process.exitCode = code;
  },
  (error: unknown) => {
    stderr.write(`vram-preflight: internal error: ${error instanceof Error ? error.stack : String(error)}\n`);
    process.exitCode = 70;
  },
);
