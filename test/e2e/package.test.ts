/**
 * The shipped artifacts: the self-contained bundle, plugin.yaml (versions in
 * step, only keys Helm 4 accepts), the packaged plugin .tgz (and no plugin
 * directory beside it; release.test.ts checks that no folder of the npm
 * package holds a plugin.yaml), and why the Helm 4 plugin must stay out of Helm 3's plugins
 * directory: with the real helm v3 and v4, what Helm 3 does with each, and
 * the way out of a Helm 3 that linked a Helm 4 plugin directory.
 */
import { copyFileSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { parse } from 'yaml';
import { AUDIT_ONLY_MARKERS, WEBHOOK_ONLY_MARKERS } from '../../scripts/build.mjs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildArtifacts, ensureHelm, HELM, helm, helmEnv, helmOk, PACKAGE_VERSION, removeTempDirs, ROOT, run, tarEntries, tempDir, type Artifacts } from './helpers.js';

let art: Artifacts;

beforeAll(() => {
  ensureHelm();
  art = buildArtifacts();
});

afterAll(removeTempDirs);

describe('plugin.yaml (helm-plugin/plugin.yaml)', () => {
  const text = readFileSync(path.join(ROOT, 'helm-plugin/plugin.yaml'), 'utf8');
  const meta = parse(text) as Record<string, unknown>;

  it('has the version of package.json and src/core/version.ts, in strict semver', () => {
    expect(meta.version).toBe(PACKAGE_VERSION);
    expect(readFileSync(path.join(ROOT, 'src/core/version.ts'), 'utf8')).toContain(`VERSION = '${PACKAGE_VERSION}'`);
    expect(PACKAGE_VERSION).toMatch(/^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$/);
  });

  it('is the postrenderer/v1 shape, with only keys Helm 4 accepts (it rejects unknown ones)', () => {
    expect(meta).toMatchObject({ apiVersion: 'v1', name: 'vram-preflight', type: 'postrenderer/v1', runtime: 'subprocess' });
    // helm/helm internal/plugin/metadata_v1.go (decoded with KnownFields(true)) and runtime_subprocess.go.
    const allowed = ['apiVersion', 'name', 'type', 'runtime', 'version', 'sourceURL', 'config', 'runtimeConfig'];
    expect(Object.keys(meta).filter((k) => !allowed.includes(k))).toEqual([]);
    const rc = meta.runtimeConfig as { platformCommand: Array<Record<string, unknown>> };
    expect(Object.keys(rc).filter((k) => !['platformCommand', 'platformHooks', 'protocolCommands'].includes(k))).toEqual([]);
    for (const pc of rc.platformCommand) expect(Object.keys(pc).filter((k) => !['os', 'arch', 'command', 'args'].includes(k))).toEqual([]);
    expect(rc.platformCommand).toEqual([
      { command: 'node', args: ['-r', '${HELM_PLUGIN_DIR}/bin/node-version-guard.cjs', '${HELM_PLUGIN_DIR}/dist/vram-preflight.cjs'] },
    ]);
  });
});

describe('bundle', () => {
  it('is an executable launcher with a node shebang and its application, which run with no node_modules around them, the launcher renamed', () => {
    const alone = path.join(tempDir('alone'), 'vram-preflight');
    copyFileSync(art.bundle, alone);
    copyFileSync(path.join(art.dist, 'vram-preflight.app.js'), path.join(path.dirname(alone), 'vram-preflight.app.js'));
    expect(readFileSync(art.bundle, 'utf8').startsWith('#!/usr/bin/env node\n')).toBe(true);
    expect(statSync(art.bundle).mode & 0o111).toBe(0o111);
    const text = readFileSync(art.bundle, 'utf8') + readFileSync(path.join(art.dist, 'vram-preflight.app.js'), 'utf8');
    expect(text).not.toMatch(/require\(["'](yaml|ajv)["']\)/);

    const env = { PATH: process.env.PATH, HOME: path.dirname(alone) };
    const version = run(process.execPath, [alone, '--version'], { env, cwd: path.dirname(alone) });
    expect(version.status, version.stderr).toBe(0);
    expect(version.stdout.trim()).toBe(PACKAGE_VERSION);

    const vllm = readFileSync(path.join(ROOT, 'fixtures/real/vllm.input.yaml'), 'utf8');
    const out = run(process.execPath, [alone], { env, cwd: path.dirname(alone), input: vllm });
    expect(out.status, out.stderr).toBe(0);
    expect(out.stdout).toContain(`# vram-preflight ${PACKAGE_VERSION}`);
    for (const other of ['llamacpp', 'localai']) {
      const input = readFileSync(path.join(ROOT, `fixtures/real/${other}.input.yaml`), 'utf8');
      const r = run(process.execPath, [alone], { env, cwd: path.dirname(alone), input });
      expect(r.status, r.stderr).toBe(0);
      expect(r.stdout === input, `${other} must pass through byte-identical`).toBe(true);
    }
  });

  it('the webhook is a file of its own, next to the launcher, that a render never reads: the application holds none of its code', () => {
    const app = readFileSync(path.join(art.dist, 'vram-preflight.app.js'), 'latin1');
    const webhook = readFileSync(path.join(art.dist, 'vram-preflight.webhook.cjs'), 'utf8');
    // The markers scripts/build.mjs refuses in the application are the webhook's indeed.
    for (const marker of WEBHOOK_ONLY_MARKERS) {
      expect(webhook, marker).toContain(marker);
      expect(app, marker).not.toContain(marker);
    }
    expect(webhook).not.toMatch(/require\(["'](yaml|ajv)["']\)/);

    // The launcher renamed (as npm links it): the application and the webhook keep their build's names.
    const dir = tempDir('webhook-file');
    const launcher = path.join(dir, 'gate');
    copyFileSync(art.bundle, launcher);
    copyFileSync(path.join(art.dist, 'vram-preflight.app.js'), path.join(dir, 'vram-preflight.app.js'));
    const env = { PATH: process.env.PATH, HOME: dir };
    const missing = run(process.execPath, [launcher, 'webhook', '--help'], { env, cwd: dir });
    expect(missing.status).toBe(1);
    expect(missing.stdout).toBe('');
    expect(missing.stderr).toBe('vram-preflight: the webhook is not part of this install (no vram-preflight.webhook.cjs next to gate)\n');

    copyFileSync(path.join(art.dist, 'vram-preflight.webhook.cjs'), path.join(dir, 'vram-preflight.webhook.cjs'));
    const help = run(process.execPath, [launcher, 'webhook', '--help'], { env, cwd: dir });
    expect(help.status, help.stderr).toBe(0);
    expect(help.stdout).toContain('vram-preflight webhook --tls-cert-file');
    // A render still runs without the webhook file.
    const vllm = readFileSync(path.join(ROOT, 'fixtures/real/vllm.input.yaml'), 'utf8');
    const out = run(process.execPath, [launcher], { env, cwd: dir, input: vllm });
    expect(out.status, out.stderr).toBe(0);
  });

  it('the audit and verify are a file of their own too: the application holds none of their code, and it loads only for `audit` and `verify`', () => {
    const app = readFileSync(path.join(art.dist, 'vram-preflight.app.js'), 'latin1');
    const audit = readFileSync(path.join(art.dist, 'vram-preflight.audit.cjs'), 'utf8');
    for (const marker of AUDIT_ONLY_MARKERS) {
      expect(audit, marker).toContain(marker);
      expect(app, marker).not.toContain(marker);
    }
    const dir = tempDir('audit-file');
    const launcher = path.join(dir, 'gate');
    copyFileSync(art.bundle, launcher);
    copyFileSync(path.join(art.dist, 'vram-preflight.app.js'), path.join(dir, 'vram-preflight.app.js'));
    const env = { PATH: process.env.PATH, HOME: dir };
    const missing = run(process.execPath, [launcher, 'audit', '--help'], { env, cwd: dir });
    expect(missing.status).toBe(1);
    expect(missing.stdout).toBe('');
    expect(missing.stderr).toBe('vram-preflight: the audit is not part of this install (no vram-preflight.audit.cjs next to gate)\n');
    // verify is in the same file (it reads a pod with the audit's code).
    const missingVerify = run(process.execPath, [launcher, 'verify', '--help'], { env, cwd: dir });
    expect([missingVerify.status, missingVerify.stdout, missingVerify.stderr]).toEqual([1, '', 'vram-preflight: verify is not part of this install (no vram-preflight.audit.cjs next to gate)\n']);
    copyFileSync(path.join(art.dist, 'vram-preflight.audit.cjs'), path.join(dir, 'vram-preflight.audit.cjs'));
    const help = run(process.execPath, [launcher, 'audit', '--help'], { env, cwd: dir });
    expect(help.status, help.stderr).toBe(0);
    expect(help.stdout).toContain('vram-preflight audit [--namespace NS]');
    const verifyHelp = run(process.execPath, [launcher, 'verify', '--help'], { env, cwd: dir });
    expect(verifyHelp.status, verifyHelp.stderr).toBe(0);
    expect(verifyHelp.stdout).toContain('vram-preflight verify --namespace NS (--pod NAME | --selector SELECTOR)');
  });

  it('fails with nothing on stdout and the message on stderr', () => {
    const r = run(process.execPath, [art.bundle, '--timeout-seconds=soon'], { input: 'apiVersion: v1\nkind: ConfigMap\n' });
    expect(r.status).not.toBe(0);
    expect(r.stdout).toBe('');
    expect(r.stderr).toMatch(/timeout-seconds/);
  });
});

describe('packaged plugin', () => {
  it('the archive holds plugin.yaml (unchanged), the Node.js check in bin/, the bundle in dist/, README; no plugin directory is left in dist/', () => {
    // npm run package leaves the archive and the bundle, and no directory Helm 3 could link (docs/install.md).
    expect(readdirSync(art.dist)).toEqual(expect.arrayContaining([`vram-preflight-${PACKAGE_VERSION}.tgz`, 'vram-preflight.app.js', 'vram-preflight.audit.cjs', 'vram-preflight.cjs', 'vram-preflight.webhook.cjs']));
    expect(readdirSync(art.dist).filter((f) => statSync(path.join(art.dist, f)).isDirectory())).toEqual([]);
    expect(readdirSync(art.pluginDir).sort()).toEqual(expect.arrayContaining(['README.md', 'bin', 'dist', 'plugin.yaml']));
    expect(readFileSync(path.join(art.pluginDir, 'bin/node-version-guard.cjs'), 'utf8')).toBe(readFileSync(path.join(ROOT, 'bin/node-version-guard.cjs'), 'utf8'));
    expect(readFileSync(path.join(art.pluginDir, 'plugin.yaml'), 'utf8')).toBe(readFileSync(path.join(ROOT, 'helm-plugin/plugin.yaml'), 'utf8'));
    const bin = path.join(art.pluginDir, 'dist/vram-preflight.cjs');
    expect(readFileSync(bin).equals(readFileSync(art.bundle))).toBe(true);
    expect(statSync(bin).mode & 0o755).toBe(0o755);
    const app = path.join(art.pluginDir, 'dist/vram-preflight.app.js');
    expect(readFileSync(app).equals(readFileSync(path.join(art.dist, 'vram-preflight.app.js')))).toBe(true);
    expect(statSync(app).mode & 0o777).toBe(0o644);
    const webhook = path.join(art.pluginDir, 'dist/vram-preflight.webhook.cjs');
    expect(readFileSync(webhook).equals(readFileSync(path.join(art.dist, 'vram-preflight.webhook.cjs')))).toBe(true);
    expect(statSync(webhook).mode & 0o777).toBe(0o644);
    expect(readFileSync(path.join(art.pluginDir, 'README.md'), 'utf8')).toContain('rm "$(helm env HELM_PLUGINS)/vram-preflight"');
  });

  it('the .tgz is named and laid out like `helm plugin package` output: <name>-<version>.tgz, all under <name>/, plain files and dirs only', () => {
    expect(path.basename(art.pluginTgz)).toBe(`vram-preflight-${PACKAGE_VERSION}.tgz`);
    const entries = tarEntries(art.pluginTgz);
    expect(entries[0]).toMatchObject({ type: '5', name: 'vram-preflight' });
    expect(entries.every((e) => e.name === 'vram-preflight' || e.name.startsWith('vram-preflight/'))).toBe(true);
    expect(entries.every((e) => e.type === '0' || e.type === '5')).toBe(true);
    expect(entries.map((e) => e.name)).toEqual(
      expect.arrayContaining(['vram-preflight/plugin.yaml', 'vram-preflight/bin/node-version-guard.cjs', 'vram-preflight/dist/vram-preflight.cjs', 'vram-preflight/dist/vram-preflight.app.js', 'vram-preflight/dist/vram-preflight.webhook.cjs']),
    );
    expect(entries.find((e) => e.name === 'vram-preflight/dist/vram-preflight.webhook.cjs')!.mode).toBe(0o644);
    // The `explain --output json` schema ships with the plugin, byte for byte.
    const schema = entries.find((e) => e.name === 'vram-preflight/src/report.schema.json');
    expect(schema, 'the report schema is in the plugin archive').toBeDefined();
    expect(schema!.data.equals(readFileSync(path.join(ROOT, 'src/report.schema.json')))).toBe(true);
    expect(entries.find((e) => e.name === 'vram-preflight/dist/vram-preflight.cjs')!.mode).toBe(0o755);
    expect(entries.find((e) => e.name === 'vram-preflight/dist/vram-preflight.app.js')!.mode).toBe(0o644);
  });

  it('keeps the name <name>-<version>.tgz although `npm pack` writes the same name: Helm 4 looks inside for the directory the file name gives, so a plugin archive named otherwise does not install', () => {
    const renamed = path.join(tempDir('renamed'), `vram-preflight-plugin-${PACKAGE_VERSION}.tgz`);
    copyFileSync(art.pluginTgz, renamed);
    const r = helm(4, ['plugin', 'install', renamed, '--verify=false'], helmEnv());
    expect(r.status).not.toBe(0);
    expect(r.stderr).toContain('plugin.yaml not found in expected directory');
    expect(r.stderr).toContain('vram-preflight-plugin');
  });

  it('is reproducible: packaging again gives the same bytes', () => {
    const again = buildArtifacts();
    expect(readFileSync(again.pluginTgz).equals(readFileSync(art.pluginTgz))).toBe(true);
  });

  it('Helm 4 installs the directory and the .tgz, lists and uninstalls it', () => {
    for (const [source, flags] of [
      [art.pluginDir, []],
      [art.pluginTgz, ['--verify=false']],
    ] as const) {
      const env = helmEnv();
      helmOk(4, ['plugin', 'install', source, ...flags], env);
      expect(helmOk(4, ['plugin', 'list'], env)).toMatch(new RegExp(`^vram-preflight\\s+${PACKAGE_VERSION.replaceAll(".", "\\.")}\\s+postrenderer/v1`, "m"));
      helmOk(4, ['plugin', 'uninstall', 'vram-preflight'], env);
      expect(helmOk(4, ['plugin', 'list'], env)).not.toContain('vram-preflight');
    }
  });

  it('the packed npm tarball installs offline into an empty prefix with an empty cache (the bundle needs no dependencies) and runs', () => {
    const packDir = tempDir('npm-pack');
    const packed = run('npm', ['pack', '--silent', '--pack-destination', packDir], { cwd: ROOT, env: { ...process.env } });
    expect(packed.status, packed.stderr).toBe(0);
    const tgz = path.join(packDir, `vram-preflight-${PACKAGE_VERSION}.tgz`);
    expect(statSync(tgz).isFile()).toBe(true);
    const prefix = tempDir('npm-prefix');
    const cache = tempDir('npm-cache');
    // --offline with an empty cache: any registry dependency would fail with ENOTCACHED.
    const env = { ...process.env, npm_config_cache: cache, npm_config_userconfig: path.join(cache, 'npmrc') };
    const installed = run('npm', ['install', '--offline', '--no-audit', '--no-fund', '--prefix', prefix, tgz], { cwd: prefix, env });
    expect(installed.status, installed.stderr).toBe(0);
    const bin = path.join(prefix, 'node_modules/.bin/vram-preflight');
    const version = run(bin, ['--version'], { cwd: prefix });
    expect(version.status, version.stderr).toBe(0);
    expect(version.stdout.trim()).toBe(PACKAGE_VERSION);
    const out = run(bin, [], { cwd: prefix, input: readFileSync(path.join(ROOT, 'fixtures/real/vllm.input.yaml'), 'utf8') });
    expect(out.status, out.stderr).toBe(0);
    expect(out.stdout).toContain(`# vram-preflight ${PACKAGE_VERSION}`);
    // Nothing but the package itself was installed.
    expect(readdirSync(path.join(prefix, 'node_modules')).filter((n) => !n.startsWith('.'))).toEqual(['vram-preflight']);

  });

  it('Helm 4 installs into $HELM_DATA_HOME/plugins even when HELM_PLUGINS points elsewhere (keep the two helms apart by HELM_DATA_HOME)', () => {
    const env = helmEnv();
    const elsewhere = tempDir('plugins');
    helmOk(4, ['plugin', 'install', art.pluginDir], { ...env, HELM_PLUGINS: elsewhere });
    expect(readdirSync(elsewhere)).toEqual([]);
    expect(readdirSync(path.join(env.HELM_DATA_HOME, 'plugins'))).toEqual(['vram-preflight']);
    // ...and then does not find it, because it loads from HELM_PLUGINS:
    expect(helmOk(4, ['plugin', 'list'], { ...env, HELM_PLUGINS: elsewhere })).not.toContain('vram-preflight');
  });

  it('Helm 3 refuses the archive before it installs anything; the same plugin as a directory it links, cannot load, and then breaks all of its plugins', () => {
    const env = withOtherPlugin();
    const archive = helm(3, ['plugin', 'install', art.pluginTgz], env);
    expect(archive.status).not.toBe(0);
    expect(archive.stderr).toContain('expected plugin to be a folder');
    expect(readdirSync(path.join(env.HELM_DATA_HOME, 'plugins'))).toEqual(['other']);

    // The trap no folder we ship sets any more: a Helm 4 plugin directory given to Helm 3.
    const r = helm(3, ['plugin', 'install', art.pluginDir], env);
    expect(r.status).not.toBe(0);
    expect(r.stderr).toContain('unknown field "apiVersion"');
    const list = helm(3, ['plugin', 'list'], env);
    expect(list.status).not.toBe(0);
    expect(list.stderr).toContain('failed to load plugin');
    expect(helm(3, ['plugin', 'uninstall', 'vram-preflight'], env).status).not.toBe(0);
    // The way out docs/install.md gives: `helm env` still answers, and deleting the link (not its target) is enough.
    const plugins = helmOk(3, ['env', 'HELM_PLUGINS'], env).trim();
    expect(plugins).toBe(path.join(env.HELM_DATA_HOME, 'plugins'));
    expect(run('sh', ['-c', 'rm "$(helm env HELM_PLUGINS)/vram-preflight"'], { env: { ...env, PATH: `${path.dirname(HELM[3])}:${env.PATH}` } }).status).toBe(0);
    expect(helmOk(3, ['plugin', 'list'], env)).toMatch(/^other\s+1\.0\.0/m);
    expect(readdirSync(art.pluginDir)).toContain('plugin.yaml');
  });
});

/** A Helm 3 data directory with another plugin in it, as a user's would be. */
function withOtherPlugin(): ReturnType<typeof helmEnv> {
  const env = helmEnv();
  const other = path.join(env.HELM_DATA_HOME, 'plugins', 'other');
  mkdirSync(other, { recursive: true });
  writeFileSync(path.join(other, 'plugin.yaml'), 'name: other\nversion: 1.0.0\nusage: another plugin\ndescription: another plugin\ncommand: echo\n');
  return env;
}
