/**
 * The options a door runs with: a config file (read through the door's
 * `readFile`), then `VRAM_PREFLIGHT_*` variables, then flags; the later wins.
 * Shared by the CLI (once per run) and the webhook (at start and whenever the
 * config file changes), so both read the same file the same way.
 */
import { CONFIG_ENV, mergeOptions, optionsFromEnv, optionsFromFile, optionsFromFlags, type Options } from './sources.js';
import { checkPreflightOptions, PreflightError } from '../core/index.js';

export interface OptionSources {
  /** `--config`; absent: VRAM_PREFLIGHT_CONFIG. */
  configPath?: string;
  /** Option flags already split off (`--name value` / `--name=value`). */
  flags: readonly { flag: string; value: string }[];
}

export interface OptionReader {
  env: Readonly<Record<string, string | undefined>>;
  readFile(path: string): string;
}

export function resolveOptions(args: OptionSources, io: OptionReader): Options {
  const configPath = args.configPath ?? io.env[CONFIG_ENV];
  let fromFile = {};
  if (configPath !== undefined && configPath !== '') {
    let text: string;
    try {
      text = io.readFile(configPath);
    } catch (error) {
      throw new PreflightError('BAD_CONFIG', `cannot read config file ${configPath}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`, {
        fix: 'check the path given by --config (or VRAM_PREFLIGHT_CONFIG) and that the file is readable',
      });
    }
    fromFile = optionsFromFile(text, configPath);
  }
  const options = mergeOptions(fromFile, optionsFromEnv(io.env), optionsFromFlags(args.flags));
  // What the script would refuse is refused here, once, before any input is read (exit 2).
  checkPreflightOptions(options);
  return options;
}
