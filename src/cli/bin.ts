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
import { main } from './main.js';
import { finish, stderr, stdout, takeStdin } from './process-io.js';

export { warmUp } from './warmup.js';
export { EXIT_WRITE_FAILED } from './process-io.js';

const argv = process.argv.slice(2);

if (argv[0] === 'webhook' || argv[0] === 'admit') {
  startWebhook(argv[0]);
} else if (argv[0] === 'audit' || argv[0] === 'verify') {
  startClusterDoor(argv[0]);
} else {
  main(argv, {
    stdin: (async function* () {
      const read = await takeStdin();
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

function startWebhook(command: 'webhook' | 'admit'): void {
  const file = join(__dirname, __vram_preflight_webhook);
  const webhook = requireDoor<{ runWebhook(argv: readonly string[]): Promise<void>; runAdmitProcess(argv: readonly string[]): Promise<void> }>(file, 'the webhook');
  if (!webhook) return;
  (command === 'admit' ? webhook.runAdmitProcess(argv.slice(1)) : webhook.runWebhook(argv.slice(1))).catch(internalError);
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
