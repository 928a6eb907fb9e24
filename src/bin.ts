#!/usr/bin/env node
import { readFileSync, writeFileSync } from 'node:fs';
import { main } from './cli.js';

main(process.argv.slice(2), {
  stdin: process.stdin,
  stdout: process.stdout,
  stderr: process.stderr,
  env: process.env,
  readFile: (path) => readFileSync(path, 'utf8'),
  writeFile: (path, text) => writeFileSync(path, text),
  // Loaded only when a lookup is needed: most runs never pay for the registry client.
  lookupImageStarts: (images, options) => import('./registry/index.js').then((registry) => registry.lookupImageStarts(images, options)),
}).then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    process.stderr.write(`vram-preflight: internal error: ${error instanceof Error ? error.stack : String(error)}\n`);
    process.exitCode = 70;
  },
);
