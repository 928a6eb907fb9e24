/**
 * One option table for both doors (src/config/flags.ts): the post-renderer
 * and the webhook parse argv with the same parser and print their help from
 * the same rows, so that a flag reads and fails the same way at either door.
 * And the answers to a mistyped name: flags, commands, config keys,
 * environment variables name the close ones; a bad value is echoed, cut short.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { FLAGS } from '../../src/config/flags.js';
import { SCALAR_OPTIONS } from '../../src/config/sources.js';
import { closest, quoteBounded } from '../../src/config/suggest.js';
import { PreflightError } from '../../src/core/errors.js';
import { WEBHOOK_HELP, webhookSettings } from '../../src/webhook/main.js';
import { runAdmit } from '../../src/webhook/admit-command.js';
import { runCli } from './run-cli.js';

const realVllm = readFileSync(join(import.meta.dirname, '../../fixtures/real/vllm.input.yaml'), 'utf8');
const RENDER_ONLY = ['--diagnostics-file', '--report-file', '--fast-parse'];

/** The webhook door's answer to argv: its error's text, or its settings. */
function webhook(argv: string[], env: Record<string, string> = {}): { error?: string; code?: string; out: string } {
  let out = '';
  try {
    webhookSettings(['--tls-cert-file=a', '--tls-key-file=b', ...argv], { stdout: { write: (t: string) => (out += t) }, stderr: { write: () => true }, env });
    return { out };
  } catch (error) {
    if (!(error instanceof PreflightError)) throw error;
    return { error: error.format(), code: error.code, out };
  }
}

describe('one option table, two doors', () => {
  it('an unknown option: the same words at both doors, the close ones of that door named', async () => {
    const render = await runCli(['--timout-seconds=5'], realVllm);
    expect(render.code).toBe(2);
    expect(render.stderr).toContain('error USAGE: unknown option --timout-seconds\n  fix: did you mean --timeout-seconds? (all options: vram-preflight --help)');
    expect(webhook(['--timout-seconds=5']).error).toBe('error USAGE: unknown option --timout-seconds\n  fix: did you mean --timeout-seconds? (all options: vram-preflight webhook --help)');
    // The webhook's own flags are close ones there.
    expect(webhook(['--drain-timeout=5']).error).toContain('did you mean --drain-timeout-ms?');
  });

  it('`webhook --bogus` is an unknown option, not an option that "needs a value" (the drift of 0.3.0)', () => {
    for (const argv of [['--bogus'], ['--bogus', '1'], ['--bogus=1']]) {
      const answer = webhook(argv);
      expect(answer.error, argv.join(' ')).toMatch(/^error USAGE: unknown option --bogus\n/);
      expect(answer.error).not.toContain('needs a value');
    }
    expect(webhook(['--port']).error).toBe('error USAGE: option --port needs a value\n  fix: --port=PORT; see vram-preflight webhook --help');
  });

  it('an option of the other door says where it belongs', async () => {
    for (const flag of RENDER_ONLY) {
      const answer = webhook([`${flag}=x`]);
      expect(answer.error, flag).toContain(`error USAGE: option ${flag} belongs to the post-renderer (vram-preflight --help), not to the webhook: the webhook writes no diagnostics or report file`);
    }
    // The render does not know the webhook's flags (they stay out of its bundle): a plain unknown option, with nothing close.
    const render = await runCli(['--tls-cert-file=a'], realVllm);
    expect(render.stderr).toContain('error USAGE: unknown option --tls-cert-file\n');
  });

  it("a render-only option in the webhook's environment stops it at start instead of being read and ignored", () => {
    const answer = webhook([], { VRAM_PREFLIGHT_REPORT_FILE: '/tmp/r.json' });
    expect(answer.code).toBe('BAD_OPTION');
    expect(answer.error).toContain('VRAM_PREFLIGHT_REPORT_FILE is an option of the post-renderer, not of the webhook');
    expect(answer.error).toContain("fix: remove VRAM_PREFLIGHT_REPORT_FILE from the environment of the webhook");
    expect(webhook([], { VRAM_PREFLIGHT_TIMEOUT_SECONDS: '600' }).error).toBeUndefined();
  });

  it('`webhook --help` lists the webhook flags and the wrap options that mean something there, and nothing else', () => {
    const listed = [...WEBHOOK_HELP.matchAll(/^ {2}(?:-\w, )?(--[a-z-]+)/gm)].map((m) => m[1]);
    for (const flag of RENDER_ONLY) expect(listed, flag).not.toContain(flag);
    for (const o of SCALAR_OPTIONS.filter((o) => !RENDER_ONLY.includes(o.flag))) expect(listed).toContain(o.flag);
    for (const flag of ['--tls-cert-file', '--tls-key-file', '--port', '--config', '--help', '--version']) expect(listed).toContain(flag);
    // Every flag it lists, it takes.
    for (const flag of listed) expect(webhook([flag === '--help' || flag === '--version' ? flag : `${flag}=1`]).error ?? '', flag).not.toMatch(/unknown option|belongs to/);
    expect(WEBHOOK_HELP).toContain('--port PORT                         port to listen on; 0: any free port (default 8443)');
  });

  it('`--help` of the render lists every row of its door, and only those', async () => {
    const help = (await runCli(['--help'], '')).stdout;
    const listed = [...help.matchAll(/^ {2}(?:-\w, )?(--[a-z-]+)/gm)].map((m) => m[1]);
    expect(listed.sort()).toEqual(FLAGS.filter((r) => r.doors.includes('render')).map((r) => r.flag).sort());
  });

  it('`webhook --version` prints the version, as `vram-preflight --version` does', async () => {
    const answer = webhook(['--version']);
    expect(answer.error).toBeUndefined();
    expect(answer.out).toBe((await runCli(['--version'], '')).stdout);
  });

  it('a switch given a value is refused', async () => {
    const run = await runCli(['--help=yes'], '');
    expect(run.code).toBe(2);
    expect(run.stderr).toContain('option --help takes no value');
  });
});

describe('list options: an empty item is refused wherever it comes from, as the config file refuses it', () => {
  it('--container-name= and --registry-insecure= (a variable left unset), VRAM_PREFLIGHT_*="" or a stray comma: exit 2, the option named', async () => {
    const config = await runWithConfig('containerNames: [""]\n');
    expect(config.code).toBe(2);
    expect(config.stderr).toContain('containerNames.0 (--container-name / VRAM_PREFLIGHT_CONTAINER_NAMES) is "", must NOT have fewer than 1 characters');
    const runs = [
      await runCli(['--container-name='], realVllm),
      await runCli(['--container-name=model', '--container-name='], realVllm),
      await runCli(['--registry-insecure='], realVllm),
      await runCli([], realVllm, { env: { VRAM_PREFLIGHT_CONTAINER_NAMES: '' } }),
      await runCli([], realVllm, { env: { VRAM_PREFLIGHT_CONTAINER_NAMES: ',' } }),
      await runCli([], realVllm, { env: { VRAM_PREFLIGHT_CONTAINER_NAMES: 'model,' } }),
      await runCli([], realVllm, { env: { VRAM_PREFLIGHT_REGISTRY_INSECURE: '' } }),
    ];
    for (const run of runs) {
      expect(run.code, run.stderr).toBe(2);
      expect(run.stdout).toBe('');
      expect(run.stderr).toMatch(/(containerNames|registryInsecure)\.\d+ \(--(container-name|registry-insecure) \/ VRAM_PREFLIGHT_(CONTAINER_NAMES|REGISTRY_INSECURE)\) is "", must NOT have fewer than 1 characters/);
      expect(run.stderr).toContain('an item of a list is empty');
    }
    // admit's door reads them with the same reader (the webhook's reads them at start: docs/webhook.md, "Flags").
    let said = '';
    const admitted = await runAdmit(['--container-name='], { stdin: async () => realVllm, stdout: { write: () => true }, stderr: { write: (t: string) => (said += t) }, env: {}, readFile: () => '' });
    expect(admitted, said).toBe(2);
    expect(said).toContain('an item of a list is empty');
    // Items with their own spaces, and several items, are as before.
    expect((await runCli(['--container-name=model*'], realVllm)).code).toBe(0);
    expect((await runCli([], realVllm, { env: { VRAM_PREFLIGHT_CONTAINER_NAMES: 'model*, other' } })).code).toBe(0);
  });
});

describe('did you mean: commands, config keys, environment variables', () => {
  it('a misspelt command names the command; another stray word says what the CLI reads', async () => {
    const typo = await runCli(['explian'], realVllm);
    expect(typo.code).toBe(2);
    expect(typo.stdout).toBe('');
    expect(typo.stderr).toBe('vram-preflight: error USAGE: unexpected argument "explian"\n  fix: did you mean vram-preflight explain? (see vram-preflight --help)\n');
    expect((await runCli(['reslove', 'x'], realVllm)).stderr).toContain('did you mean vram-preflight resolve?');
    const stray = await runCli(['manifests.yaml'], realVllm);
    expect(stray.stderr).toContain('fix: vram-preflight reads the manifests on stdin');
  });

  it('an unknown config key names the close one, also inside an images entry', async () => {
    const answer = await runWithConfig('timeoutSecond: 600\nimages:\n  - repository: r\n    entrypint: [vllm]\n');
    expect(answer.code).toBe(2);
    expect(answer.stderr).toContain('an unknown key "timeoutSecond"');
    expect(answer.stderr).toContain('images.0 (config file only) has an unknown key "entrypint"');
    expect(answer.stderr).toContain('fix: "timeoutSecond": did you mean "timeoutSeconds"?; "images.0.entrypint": did you mean "images.0.entrypoint"?');
    // A oneOf in one sentence, not its branches' contradicting failures.
    expect(answer.stderr).toContain('images.0 (config file only) needs entrypoint (the image\'s start, with cmd when containers give no args) or like');
    expect(answer.stderr).not.toContain('required property');
    const both = await runWithConfig('images:\n  - repository: r\n    entrypoint: [vllm]\n    like: vllm/vllm-openai\n');
    expect(both.stderr).toContain('images.0 (config file only) gives like together with entrypoint or cmd');
    // Nothing close: no guess.
    expect((await runWithConfig('colour: blue\n')).stderr).toContain('fix: see vram-preflight --help and docs/configuration.md');
  });

  it('an unknown variable names the closest variable, not every one', async () => {
    const run = await runCli([], realVllm, { env: { VRAM_PREFLIGHT_TIMEOUT_SECOND: '5' } });
    expect(run.code).toBe(2);
    expect(run.stderr).toBe('vram-preflight: error BAD_OPTION: unknown environment variable VRAM_PREFLIGHT_TIMEOUT_SECOND\n  fix: did you mean VRAM_PREFLIGHT_TIMEOUT_SECONDS? (every variable: docs/configuration.md)\n');
    const far = await runCli([], realVllm, { env: { VRAM_PREFLIGHT_COLOUR: 'blue' } });
    expect(far.stderr).not.toContain('VRAM_PREFLIGHT_TIMEOUT_SECONDS');
    expect(far.stderr).toContain('unset it');
  });

  it('a bad value is echoed, cut short', async () => {
    const run = await runCli(['--timeout-seconds', 'soon'], realVllm);
    expect(run.stderr).toContain('timeoutSeconds (--timeout-seconds / VRAM_PREFLIGHT_TIMEOUT_SECONDS) is "soon", must be integer');
    const long = await runCli([`--registry-platform=${'x'.repeat(5000)}`], realVllm);
    expect(long.code).toBe(2);
    expect(long.stderr).toMatch(/registryPlatform \(--registry-platform \/ VRAM_PREFLIGHT_REGISTRY_PLATFORM\) is "x{58}…, must match pattern/);
    expect(long.stderr.length).toBeLessThan(400);
    expect((await runCli(['--on-nvidia-smi-unavailable=ignore'], realVllm)).stderr).toContain('is "ignore", must be one of "warn", "fail"');
    expect(webhook(['--port=http']).error).toBe('error USAGE: --port is "http"\n  fix: give a whole number');
  });

  it('closest: typos and parts, nearest first, nothing for a far name', () => {
    expect(closest('explian', ['explain', 'resolve', 'webhook'])).toEqual(['explain']);
    expect(closest('--registry', ['--registry-lookup', '--registry-platform', '--timeout-seconds'], (n) => n.slice(2))).toEqual(['--registry-lookup', '--registry-platform']);
    expect(closest('colour', ['timeoutSeconds', 'images'])).toEqual([]);
    expect(quoteBounded('a'.repeat(100), 10)).toBe('"aaaaaaaa…');
    expect(quoteBounded(5)).toBe('5');
  });
});

/** The CLI with a config file of this text (read through the CLI's own readFile). */
async function runWithConfig(text: string) {
  const { main } = await import('../../src/cli/main.js');
  let stderr = '';
  const code = await main(['--config', 'config.yaml'], {
    stdin: (async function* () {
      yield realVllm;
    })(),
    stdout: { write: () => true },
    stderr: { write: (t: string) => (stderr += t) },
    env: {},
    readFile: () => text,
    writeFile: () => undefined,
  });
  return { code, stderr };
}
