#!/usr/bin/env node
/**
 * The process around the CLI: stdin, stdout, stderr (src/cli/process-io.ts),
 * files, exit code. stdin may have been read by the launcher already
 * (src/cli/launcher.ts, which passes through input with nothing to rewrite
 * without loading this application): then it hands over what it read.
 *
 * `vram-preflight webhook` (and `admit`, its answer without a cluster),
 * `vram-preflight audit` and `vram-preflight verify` are other doors
 * (src/webhook/, src/audit/, src/verify/), built into files of their own
 * next to the launcher (<launcher stem>.webhook.cjs; <launcher stem>.audit.cjs
 * holds the audit and verify, the doors that read a cluster; scripts/build.mjs)
 * and required from there for those commands only: a post-renderer run
 * neither reads, compiles nor initialises any of it.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { PreflightError } from '../core/index.js';
import { main } from './main.js';
import { describeStdinFailure, finish, flushStdout, isStdinFailure, readStdinUpTo, stderr, stdout, takeStdin, type StdinFailure } from './process-io.js';

export { warmUp } from './warmup.js';
export { EXIT_WRITE_FAILED } from './process-io.js';

const argv = process.argv.slice(2);

if (argv[0] === 'webhook') {
  startWebhook();
} else if (argv[0] === 'admit') {
  startAdmit();
} else if (argv[0] === 'audit' || argv[0] === 'verify') {
  startClusterDoor(argv[0]);
} else {
  main(argv, {
    stdin: (async function* () {
      const read = await takeStdin();
      if (isStdinFailure(read)) throw unreadableStdin(read);
      if (Array.isArray(read)) yield* read;
      else yield read;
    })(),
    stdout,
    stderr,
    env: process.env,
    readFile: (path) => readFileSync(path, 'utf8'),
    writeFile: (path, text) => writeFileSync(path, text),
    // Loaded only when a lookup is needed: most runs never pay for the registry client.
    lookupImageStarts: (images, options) => import('../registry/index.js').then((registry) => registry.lookupImageStarts(images, options)),
  }).then(finish, (error: unknown) => {
    // main() reports its own errors, internal ones too; this is the last resort should that fail.
    stderr.write(`vram-preflight: error INTERNAL: ${error instanceof Error ? `${error.name}: ${error.message}` : String(error)}\n`);
    process.exitCode = 70;
  });
}

/** The other doors' file names (scripts/build.mjs: <launcher stem>.webhook.cjs, .audit.cjs, fixed at build as the application's). */
declare const __vram_preflight_webhook: string;
declare const __vram_preflight_audit: string;

/**
 * A door's bundle, next to the launcher that runs this application: the
 * launcher passes its own __dirname and require (src/cli/launcher.ts), so the
 * path is computed at run time and esbuild leaves the require alone.
 * Undefined (and the exit code set) when it cannot be loaded.
 */
function requireDoor<T>(file: string, what: string): T | undefined {
  try {
    return require(file) as T;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'MODULE_NOT_FOUND' && (error as Error).message.includes(file)) {
      stderr.write(`vram-preflight: ${what} is not part of this install (no ${basename(file)} next to ${basename(__filename)})\n`);
      process.exitCode = 1;
      return undefined;
    }
    stderr.write(`vram-preflight: internal error: ${error instanceof Error ? error.stack : String(error)}\n`);
    process.exitCode = 70;
    return undefined;
  }
}

function internalError(error: unknown): void {
  stderr.write(`vram-preflight: internal error: ${error instanceof Error ? error.stack : String(error)}\n`);
  process.exitCode = 70;
}

/** stdin that cannot be read is a problem of the input, reported as every other one (exit 1). */
function unreadableStdin(failure: StdinFailure): PreflightError {
  return new PreflightError('IO', `cannot read stdin: ${describeStdinFailure(failure)}`, {
    fix: 'give the rendered manifests on stdin: vram-preflight < rendered.yaml, or helm template ... | vram-preflight',
  });
}

/** The webhook's bundle: `webhook` and `admit` (./process-io.ts's stdout for both: a failed write is exit 74 and one line). */
interface WebhookDoor {
  runWebhook(argv: readonly string[], io: { stdout: { write(text: string): unknown }; stderr: { write(text: string): unknown }; env: NodeJS.ProcessEnv }): Promise<void>;
  runAdmit(
    argv: readonly string[],
    io: { stdin(limit: number): Promise<Buffer | { cannotRead: string }>; stdout: typeof stdout; stderr: typeof stderr; env: NodeJS.ProcessEnv; readFile(path: string): string },
  ): Promise<number>;
}

function webhookDoor(): WebhookDoor | undefined {
  const file = join(__dirname, __vram_preflight_webhook);
  return requireDoor<WebhookDoor>(file, 'the webhook');
}

/** `vram-preflight webhook`: its `listening PORT` line goes out at once (scripts wait for it); --help to a stdout that fails: exit 74. */
function startWebhook(): void {
  const webhook = webhookDoor();
  const now = { write: (text: string): boolean => (stdout.write(text), flushStdout(), true) };
  webhook?.runWebhook(argv.slice(1), { stdout: now, stderr: process.stderr, env: process.env }).then(() => finish(typeof process.exitCode === 'number' ? process.exitCode : 0), internalError);
}

/** `vram-preflight admit`: stdin read as the webhook reads a body (at most its limit), stdout as a render's. */
function startAdmit(): void {
  const webhook = webhookDoor();
  webhook
    ?.runAdmit(argv.slice(1), {
      stdin: async (limit) => {
        const read = await readStdinUpTo(limit);
        return isStdinFailure(read) ? { cannotRead: describeStdinFailure(read) } : read;
      },
      stdout,
      stderr,
      env: process.env,
      readFile: (path) => readFileSync(path, 'utf8'),
    })
    .then(finish, internalError);
}

/**
 * `vram-preflight audit` and `vram-preflight verify`, the doors that read a
 * cluster: one bundle holds both (they share the Kubernetes client and the
 * audit's reading of a pod); their output goes through the same stdout as a
 * render's (a failed write: exit 74).
 */
function startClusterDoor(command: 'audit' | 'verify'): void {
  const file = join(__dirname, __vram_preflight_audit);
  type Io = { stdout: typeof stdout; stderr: typeof stderr; env: NodeJS.ProcessEnv; readFile(path: string): string; exists(path: string): boolean; home?: string };
  type ClusterDoors = { runAudit(argv: readonly string[], io: Io): Promise<number>; runVerify(argv: readonly string[], io: Io): Promise<number> };
  const doors = requireDoor<ClusterDoors>(file, command === 'audit' ? 'the audit' : 'verify');
  if (!doors) return;
  const io: Io = { stdout, stderr, env: process.env, readFile: (path) => readFileSync(path, 'utf8'), exists: existsSync, home: process.env.HOME || undefined };
  (command === 'audit' ? doors.runAudit(argv.slice(1), io) : doors.runVerify(argv.slice(1), io)).then(finish, internalError);
}
