#!/usr/bin/env node
/**
 * The process around the CLI: stdin, stdout, stderr (src/process-io.ts),
 * files, exit code. stdin may have been read by the launcher already
 * (src/launcher.ts, which passes through input with nothing to rewrite
 * without loading this application): then it hands over what it read.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { main } from './cli.js';
import { finish, readStdin, stderr, stdout } from './process-io.js';

export { warmUp } from './warmup.js';
export { EXIT_WRITE_FAILED } from './process-io.js';

/** What the launcher read from stdin, if it did (src/launcher.ts). */
const STDIN_READ = Symbol.for('vram-preflight.stdin-read');

function takeStdin(): ReturnType<typeof readStdin> {
  const store = globalThis as Record<symbol, ReturnType<typeof readStdin> | undefined>;
  const read = store[STDIN_READ];
  if (read === undefined) return readStdin();
  store[STDIN_READ] = undefined;
  return read;
}

main(process.argv.slice(2), {
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
  lookupImageStarts: (images, options) => import('./registry/index.js').then((registry) => registry.lookupImageStarts(images, options)),
}).then(finish, (error: unknown) => {
  stderr.write(`vram-preflight: internal error: ${error instanceof Error ? error.stack : String(error)}\n`);
  process.exitCode = 70;
});
