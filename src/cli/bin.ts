#!/usr/bin/env node
/**
 * The process around the CLI: stdin, stdout, stderr (src/cli/process-io.ts),
 * files, exit code. stdin may have been read by the launcher already
 * (src/cli/launcher.ts, which passes through input with nothing to rewrite
 * without loading this application): then it hands over what it read.
 *
 * `vram-preflight webhook` is another door (src/webhook/), loaded by
 * import() for that command only: a post-renderer run never initialises it.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { main } from './main.js';
import { finish, stderr, stdout, takeStdin } from './process-io.js';

export { warmUp } from './warmup.js';
export { EXIT_WRITE_FAILED } from './process-io.js';

const argv = process.argv.slice(2);

if (argv[0] === 'webhook') {
  import('../webhook/main.js').then(
    (webhook) => webhook.runWebhook(argv.slice(1)),
    (error: unknown) => {
      stderr.write(`vram-preflight: internal error: ${error instanceof Error ? error.stack : String(error)}\n`);
      process.exitCode = 70;
    },
  );
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
