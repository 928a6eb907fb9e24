import { readFileSync } from 'node:fs';
import { isAbsolute, join } from 'node:path';
import { main } from '../../src/cli/main.js';

export interface CliRun {
  code: number;
  stdout: string;
  stderr: string;
  files: Map<string, string>;
}

/** Runs the CLI in-process with in-memory streams; relative paths resolve against `cwd`. */
export async function runCli(
  argv: string[],
  stdin: string | Uint8Array,
  options: { env?: Record<string, string>; cwd?: string } = {},
): Promise<CliRun> {
  let stdout = '';
  let stderr = '';
  const files = new Map<string, string>();
  const resolve = (path: string) => (isAbsolute(path) || !options.cwd ? path : join(options.cwd, path));
  const code = await main(argv, {
    stdin: (async function* () {
      yield typeof stdin === 'string' ? Buffer.from(stdin, 'utf8') : stdin;
    })(),
    stdout: { write: (text: string) => (stdout += text) },
    stderr: { write: (text: string) => (stderr += text) },
    env: options.env ?? {},
    readFile: (path) => readFileSync(resolve(path), 'utf8'),
    writeFile: (path, text) => void files.set(path, text),
  });
  return { code, stdout, stderr, files };
}
