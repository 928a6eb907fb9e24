/**
 * `npm run release` (scripts/release.mjs) and the installs a release is for,
 * with the real helm v3.17.2 and v4.1.4 and the real gpg: throwaway keys in a
 * temp GNUPGHOME, the release signed with one of them, and Helm 4's default
 * verification on `helm plugin install` of the archive (a file, an HTTP URL),
 * refusals (tampered archive, tampered .prov, wrong key, no .prov, renamed
 * file), `helm plugin verify`, what a git URL install does, and what a
 * missing or too old Node.js looks like under Helm 4 (which hides a plugin's
 * stderr). The webhook chart and the images: built once here
 * (scripts/build-image.sh), released with the chart pinned to the webhook
 * image's digest, pushed to a real OCI registry on loopback (Debian's
 * docker-registry) by skopeo and helm; `helm pull --verify` and
 * `helm install oci://...` from it, and a tampered chart refused.
 */
import { execFile, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { promisify } from 'node:util';
import { parse as parseYaml } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CHART, ensureHelm, HELM, helm, helmEnv, helmOk, PACKAGE_VERSION, removeTempDirs, ROOT, run, runOk, tarEntries, tempDir, type Run } from './helpers.js';
import { requireTools, startRegistry, type Registry } from '../registry/harness.js';

const V = PACKAGE_VERSION;
const ARCHIVE = `vram-preflight-${V}.tgz`;
const PROV = `${ARCHIVE}.prov`;
const KEY_FILE = 'vram-preflight-release-key.gpg';
const NPM_TGZ = `vram-preflight-npm-${V}.tgz`;
const CHART_TGZ = `vram-preflight-webhook-${V}.tgz`;
const CHART_PROV = `${CHART_TGZ}.prov`;
const WEBHOOK_IMAGE = `vram-preflight-webhook-${V}.oci.tar`;
const CMP_IMAGE = `vram-preflight-cmp-${V}.oci.tar`;
const IMAGES_TXT = 'vram-preflight-images.txt';
const ARGO_TGZ = `vram-preflight-argocd-cmp-${V}.tar.gz`;
const PASSPHRASE = 'correct horse battery staple';

let gnupg: string;
let passFile: string;
let projectFpr: string;
/** helm --keyring files: binary public keys (`gpg --export`). */
let projectKeyring: string;
let otherKeyring: string;
let out1: string;
let out2: string;
let releaseStdout: string;
/** The images scripts/build-image.sh built here for the release runs of this file (--images-from); built twice, one build per release. */
let imagesDir: string;
let imagesAgainDir: string;
let registry: Registry;
/** Where the releases publish: the loopback registry and a path in it. */
let prefix: string;

function gpg(args: string[]): string {
  return runOk('gpg', ['--batch', '--no-tty', '--homedir', gnupg, ...args]);
}

function fingerprintOf(uid: string): string {
  const fpr = gpg(['--with-colons', '--list-keys', uid])
    .split('\n')
    .find((l) => l.startsWith('fpr:'));
  return fpr!.split(':')[9]!;
}

function release(outDir: string, extra: string[] = [], cwd = ROOT, images = imagesDir): Run {
  return run(
    process.execPath,
    [path.join(cwd, 'scripts/release.mjs'), '--key', projectFpr, '--homedir', gnupg, '--passphrase-file', passFile, '--out', outDir, '--images-from', images, '--registry', prefix, '--helm', HELM[4], ...extra],
    { cwd, env: { ...process.env, SOURCE_DATE_EPOCH: '' } },
  );
}

/** A copy of some release files in a fresh directory (so one can be changed or renamed). */
function copyOf(files: Record<string, string>): string {
  const dir = tempDir('copy');
  for (const [name, from] of Object.entries(files)) copyFileSync(from, path.join(dir, name));
  return dir;
}

const sha256 = (file: string) => createHash('sha256').update(readFileSync(file)).digest('hex');
const wrappedCount = (manifests: string) => manifests.split(`# vram-preflight ${V}`).length - 1;

beforeAll(async () => {
  ensureHelm();
  requireTools();
  // The images, built once (the release's own build of them is scripts/build-image.sh, which test/image covers), and the registry.
  imagesDir = tempDir('images');
  imagesAgainDir = tempDir('images-again');
  const buildImage = (target: string, name: string, dir: string) =>
    execFileP('bash', [path.join(ROOT, 'scripts/build-image.sh'), target], { cwd: ROOT, env: { ...process.env, IMAGE_OUT: path.join(dir, name) }, timeout: 180_000 });
  [registry] = await Promise.all([
    startRegistry(tempDir('registry'), tempDir('registry-storage'), { kind: 'none' }),
    buildImage('webhook', WEBHOOK_IMAGE, imagesDir),
    buildImage('argocd-cmp', CMP_IMAGE, imagesDir),
    // A second build of both images, for the second release: two releases of one commit are two builds.
    buildImage('webhook', WEBHOOK_IMAGE, imagesAgainDir),
    buildImage('argocd-cmp', CMP_IMAGE, imagesAgainDir),
  ]);
  prefix = `${registry.host}/vram-preflight`;
  gnupg = tempDir('gnupg');
  chmodSync(gnupg, 0o700);
  passFile = path.join(tempDir('pass'), 'passphrase');
  writeFileSync(passFile, `${PASSPHRASE}\n`);
  // The project's key: RSA 3072 with a passphrase, as a release key would be.
  // The other key: ed25519 (Helm's ProtonMail/go-crypto reads both).
  gpg(['--pinentry-mode', 'loopback', '--passphrase', PASSPHRASE, '--quick-gen-key', 'vram-preflight release (test) <release@example.invalid>', 'rsa3072', 'sign', 'never']);
  gpg(['--passphrase', '', '--quick-gen-key', 'someone else (test) <other@example.invalid>', 'ed25519', 'sign', 'never']);
  projectFpr = fingerprintOf('release@example.invalid');
  otherKeyring = path.join(tempDir('keyring'), 'other.gpg');
  writeFileSync(otherKeyring, spawnSync('gpg', ['--batch', '--homedir', gnupg, '--export', fingerprintOf('other@example.invalid')]).stdout);

  out1 = tempDir('release1');
  out2 = tempDir('release2');
  // --allow-dirty: the tests also run on a checkout with uncommitted work; a
  // clean clone is released without it below.
  const r = release(out1, ['--allow-dirty', '--push', '--plain-http']);
  expect(r.status, r.stderr).toBe(0);
  releaseStdout = r.stdout;
  const again = release(out2, ['--allow-dirty'], ROOT, imagesAgainDir);
  expect(again.status, again.stderr).toBe(0);
  projectKeyring = path.join(out1, KEY_FILE);
}, 300_000);

afterAll(async () => {
  if (gnupg) spawnSync('gpgconf', ['--homedir', gnupg, '--kill', 'gpg-agent']);
  await registry?.stop();
  removeTempDirs();
});

describe('npm run release', () => {
  it('makes the plugin archive, its .prov, the public key, the npm package, the Argo CD build context, the webhook chart and its .prov, both images, their list and SHA256SUMS', () => {
    const published = [ARCHIVE, PROV, ARGO_TGZ, NPM_TGZ, KEY_FILE, CHART_TGZ, CHART_PROV, WEBHOOK_IMAGE, CMP_IMAGE, IMAGES_TXT];
    expect(readdirSync(out1).sort()).toEqual(['SHA256SUMS', ...published].sort());
    const sums = readFileSync(path.join(out1, 'SHA256SUMS'), 'utf8');
    const lines = sums.trimEnd().split('\n');
    expect(lines.map((l) => l.split('  ')[1]).sort()).toEqual([...published].sort());
    for (const l of lines) {
      const [sum, name] = l.split('  ');
      expect(sha256(path.join(out1, name!)), name).toBe(sum);
    }
    expect(releaseStdout).toContain(projectFpr);
    // The exported key is the signing key, in the binary format helm's --keyring reads.
    expect(gpg(['--with-colons', '--show-keys', projectKeyring])).toContain(`fpr:::::::::${projectFpr}:`);
  });

  it('same commit, same bytes: a second run, with its own build of the images, gives identical files (the signed .prov, the image archives and SHA256SUMS included)', () => {
    for (const name of readdirSync(out1)) {
      expect(readFileSync(path.join(out2, name)).equals(readFileSync(path.join(out1, name))), name).toBe(true);
    }
    // Every archive entry carries the commit time.
    const commitTime = Number(runOk('git', ['log', '-1', '--format=%ct']).trim());
    for (const tgz of [ARCHIVE, ARGO_TGZ, CHART_TGZ]) {
      for (const e of tarEntries(path.join(out1, tgz))) expect(e.mtime, `${tgz} ${e.name}`).toBe(commitTime);
    }
  });

  it('works from a clean clone without --allow-dirty, and refuses a checkout with uncommitted changes', () => {
    const clone = path.join(tempDir('clone'), 'vram-preflight');
    runOk('git', ['clone', '--quiet', '--no-hardlinks', ROOT, clone]);
    symlinkSync(path.join(ROOT, 'node_modules'), path.join(clone, 'node_modules'));
    // (.gitignore's `node_modules/` matches a directory, not this symlink.)
    writeFileSync(path.join(clone, '.git/info/exclude'), '/node_modules\n');
    const clean = release(path.join(clone, 'dist/release'), [], clone);
    expect(clean.status, clean.stderr).toBe(0);
    expect(clean.stdout).not.toContain('UNCOMMITTED');
    expect(readdirSync(path.join(clone, 'dist/release'))).toContain(PROV);

    writeFileSync(path.join(clone, 'helm-plugin/plugin.yaml'), `${readFileSync(path.join(clone, 'helm-plugin/plugin.yaml'), 'utf8')}# local edit\n`);
    const dirty = release(path.join(clone, 'dist/release'), [], clone);
    expect(dirty.status).toBe(2);
    expect(dirty.stderr).toContain('uncommitted changes');
    expect(dirty.stderr).toContain('helm-plugin/plugin.yaml');
  });

  it('package.json, helm-plugin/plugin.yaml, src/core/version.ts and the Argo CD plugin (spec.version, ConfigMap, image tag) carry one version', () => {
    const read = (rel: string) => readFileSync(path.join(ROOT, rel), 'utf8');
    type Obj = Record<string, any>;
    expect(JSON.parse(read('package.json')).version).toBe(V);
    expect((parseYaml(read('helm-plugin/plugin.yaml')) as Obj).version).toBe(V);
    expect(read('src/core/version.ts')).toContain(`VERSION = '${V}'`);
    expect((parseYaml(read('deploy/argocd/plugin.yaml')) as Obj).spec.version).toBe(`v${V}`);
    const cm = parseYaml(read('deploy/argocd/cmp-plugin-configmap.yaml')) as Obj;
    expect((parseYaml(cm.data['plugin.yaml']) as Obj).spec.version).toBe(`v${V}`);
    const patch = parseYaml(read('deploy/argocd/repo-server-patch.yaml')) as Obj;
    expect(patch.spec.template.spec.containers[0].image).toMatch(new RegExp(`/vram-preflight-cmp:${V.replace(/\./g, '\\.')}$`));
    // The release refuses to run when they disagree (scripts/package-plugin.mjs checkVersions).
    expect(read('scripts/package-plugin.mjs')).toContain('versions out of step');
    // ...and so do the artifacts.
    const plugin = tarEntries(path.join(out1, ARCHIVE)).find((e) => e.name === 'vram-preflight/plugin.yaml')!;
    expect((parseYaml(plugin.data.toString('utf8')) as { version: string }).version).toBe(V);
    const npmPkg = tarEntries(path.join(out1, NPM_TGZ)).find((e) => e.name === 'package/package.json')!;
    expect(JSON.parse(npmPkg.data.toString('utf8')).version).toBe(V);
  });

  it('no other version of ours in README.md, docs/*.md or deploy/: every 0.x.y there is package.json\'s, or allow-listed with a reason', () => {
    // Ours: a bare 0.x.y, or v0.x.y right after "vram-preflight-" (the Argo CD
    // plugin name). Other v0.x.y are other projects' tags (vLLM, llm-d, ...).
    const OURS = /(?<![\w.-])0\.\d+\.\d+(?!\w|\.\d)|(?<=vram-preflight-v)0\.\d+\.\d+(?!\w|\.\d)/g;
    // [file, what the line contains, why it may name another version]
    const ALLOWED: Array<[string, RegExp, string]> = [
      ['README.md', /\(0\.2\.0:/, 'benchmark comparison with the previous release'],
      ['docs/benchmarks.md', /0\.[23]\.0/, 'measurements compare with 0.2.0 and 0.3.0 as released'],
      ['docs/gpu-results.md', /0\.2\.0/, 'dated records of GPU runs, comparing with 0.2.0'],
      ['docs/argocd.md', /^version: 0\.1\.0$/, "a user's own chart version in an example Chart.yaml"],
      ['docs/detection.md', /`0\.14\.1rc1` < `0\.14\.1` < `0\.14\.1\.1`/, "how vLLM's Python versions order"],
      ['docs/webhook.md', /Prometheus text format 0\.0\.4/, "Prometheus' exposition format version"],
      ['*', /\(since 0\.\d+\.\d+\)/, 'history: when something was introduced'],
      ['docs/gpu-results.md', /[Tt]he 0\.3\.0 script/, 'dated GPU runs of the 0.3.0 preflight script'],
      ['docs/webhook.md', /A 0\.3\.0 install/, 'taking over what a 0.3.0 install left in the cluster'],
      ['docs/webhook.md', /From 0\.3\.0 to|\(0\.3\.0 had no|\*\*From 0\.3\.0\*\*|0\.3\.0 named|0\.3\.0's|release of 0\.3\.0|a 0\.3\.0 release upgraded/, 'upgrading a 0.3.0 release: what changed since, and how to keep its names'],
      ['deploy/webhook/templates/webhook.yaml', /0\.3\.0 kept only/, 'taking over what a 0.3.0 install left in the cluster'],
    ];
    const files = [
      'README.md',
      ...readdirSync(path.join(ROOT, 'docs')).filter((f) => f.endsWith('.md')).map((f) => `docs/${f}`),
      ...(readdirSync(path.join(ROOT, 'deploy'), { recursive: true }) as string[]).map((f) => `deploy/${f}`).filter((f) => statSync(path.join(ROOT, f)).isFile()),
    ];
    const stale: string[] = [];
    let seen = 0;
    for (const file of files) {
      readFileSync(path.join(ROOT, file), 'utf8').split('\n').forEach((line, i) => {
        for (const m of line.matchAll(OURS)) {
          if (m[0] === V) {
            seen++;
            continue;
          }
          if (ALLOWED.some(([f, re]) => (f === '*' || f === file) && re.test(line))) continue;
          stale.push(`${file}:${i + 1}: ${m[0]} (package.json says ${V}): ${line.trim()}`);
        }
      });
    }
    expect(stale).toEqual([]);
    expect(seen, 'the check found the current version where the docs show it').toBeGreaterThan(20);
    // The webhook chart is released with the same version.
    const chart = parseYaml(readFileSync(path.join(ROOT, 'deploy/webhook/Chart.yaml'), 'utf8')) as { version: string; appVersion: string };
    expect([chart.version, chart.appVersion]).toEqual([V, V]);
  });

  it("docs/install.md's signing-key recipe, run as written: the key it makes signs a release that Helm 4 installs and Helm 3 verifies with the keyring it exports", () => {
    const doc = readFileSync(path.join(ROOT, 'docs/install.md'), 'utf8');
    const section = doc.slice(doc.indexOf('### A signing key'), doc.indexOf('### The release'));
    const blocks = [...section.matchAll(/```sh\n([\s\S]*?)```/g)].map((m) => m[1]!);
    expect(blocks).toHaveLength(2);
    const work = tempDir('key-recipe');
    const home = tempDir('key-recipe-gnupg');
    chmodSync(home, 0o700);
    const out = path.join(work, 'out');
    const env = { ...helmEnv(), GNUPGHOME: home };
    // The second block as it runs here: the release script itself (npm run
    // release is that script), into a temp dir, from a checkout that may have
    // uncommitted work; the helm of the tests.
    const releaseBlock = blocks[1]!
      .replace('npm run release -- ', `${JSON.stringify(process.execPath)} ${JSON.stringify(path.join(ROOT, 'scripts/release.mjs'))} --allow-dirty --out ${JSON.stringify(out)} --images-from ${JSON.stringify(imagesDir)} `)
      .replace('dist/release/vram-preflight-<v>.tgz', path.join(out, ARCHIVE))
      .replace('dist/release/vram-preflight-webhook-<v>.tgz', path.join(out, CHART_TGZ))
      .replace(/^helm plugin /m, `${JSON.stringify(HELM[4])} plugin `)
      // The chart's check with Helm 3, which reads RSA keys only.
      .replace(/^helm verify /m, `${JSON.stringify(HELM[3])} verify `);
    try {
      const r = run('bash', ['-euo', 'pipefail', '-c', `${blocks[0]}\n${releaseBlock}`], { cwd: work, env });
      expect(r.status, r.stderr).toBe(0);
      expect(r.stdout).toContain('Installed plugin: vram-preflight');
      const fpr = r.stdout.split('\n').find((l) => /^[0-9A-F]{40}$/.test(l))!;
      expect(fpr, r.stdout).toBeDefined();
      expect(r.stdout).toContain(`Chart Hash Verified: sha256:${sha256(path.join(out, CHART_TGZ))}`);
      // The key exported by the recipe is the key the release exported, and it is RSA 4096 (algorithm 1).
      expect(readFileSync(path.join(work, KEY_FILE)).equals(readFileSync(path.join(out, KEY_FILE)))).toBe(true);
      expect(runOk('gpg', ['--batch', '--homedir', home, '--with-colons', '--list-keys', fpr])).toMatch(/^pub:[^:]*:4096:1:/m);
      expect(helmOk(4, ['plugin', 'list'], env)).toMatch(new RegExp(`^vram-preflight\\s+${V.replace(/\./g, '\\.')}\\s+postrenderer/v1\\s+v1\\s+signed`, 'm'));
    } finally {
      spawnSync('gpgconf', ['--homedir', home, '--kill', 'gpg-agent']);
    }
  }, 120_000); // an RSA 4096 key made by gpg, then a whole release: past the 20 s default on a busy 2-core machine

  it('the plugin archive is what `helm plugin package --sign` (real helm 4) makes of the same directory: name, entries, gzip header, .prov metadata', () => {
    const work = tempDir('helm-package');
    runOk('tar', ['-xzf', path.join(out1, ARCHIVE), '-C', work]);
    const secring = path.join(work, 'secring.gpg');
    writeFileSync(
      secring,
      spawnSync('gpg', ['--batch', '--homedir', gnupg, '--pinentry-mode', 'loopback', '--passphrase-file', passFile, '--export-secret-keys', projectFpr]).stdout,
    );
    const dest = path.join(work, 'out');
    const env = helmEnv();
    helmOk(4, ['plugin', 'package', path.join(work, 'vram-preflight'), '--keyring', secring, '--key', 'release@example.invalid', '--passphrase-file', passFile, '-d', dest], env);
    expect(readdirSync(dest).sort()).toEqual([ARCHIVE, PROV]);
    const theirs = tarEntries(path.join(dest, ARCHIVE));
    const ours = tarEntries(path.join(out1, ARCHIVE));
    const shape = (es: typeof ours) => es.map((e) => `${e.type} ${e.name} ${e.type === '5' ? '' : e.mode.toString(8)}`);
    expect(shape(ours)).toEqual(shape(theirs));
    for (const [i, e] of ours.entries()) expect(e.data.equals(theirs[i]!.data), e.name).toBe(true);
    expect(readFileSync(path.join(out1, ARCHIVE)).subarray(0, 10).toString('hex')).toBe(readFileSync(path.join(dest, ARCHIVE)).subarray(0, 10).toString('hex'));
    // The signed text: identical metadata, then `...`, then the archive's sha256.
    const block = (file: string) => /-----BEGIN PGP SIGNED MESSAGE-----\nHash: SHA512\n\n([\s\S]*?)\n-----BEGIN PGP SIGNATURE-----/.exec(readFileSync(file, 'utf8'))![1]!;
    const [ourMeta, ourSums] = block(path.join(out1, PROV)).split('\n...\n');
    const [theirMeta] = block(path.join(dest, PROV)).split('\n...\n');
    expect(ourMeta).toBe(theirMeta);
    expect(ourSums!.trim()).toBe(`files:\n  ${ARCHIVE}: sha256:${sha256(path.join(out1, ARCHIVE))}`);
  });

  it('the npm package (npm pack) holds the bundle, the Node.js check, the schemas, CHANGELOG, README and docs (no plugin.yaml: it is no plugin directory)', () => {
    const entries = tarEntries(path.join(out1, NPM_TGZ)).filter((e) => e.type === '0');
    const names = entries.map((e) => e.name.replace(/^package\//, '')).sort();
    const docs = (readdirSync(path.join(ROOT, 'docs'), { recursive: true }) as string[]).map((d) => `docs/${d}`).filter((d) => statSync(path.join(ROOT, d)).isFile());
    expect(names).toEqual(
      ['README.md', 'bin/node-version-guard.cjs', 'dist/vram-preflight.app.js', 'dist/vram-preflight.cjs', 'dist/vram-preflight.webhook.cjs', 'dist/vram-preflight.audit.cjs', 'package.json', 'src/audit.schema.json', 'src/config.schema.json', 'src/report.schema.json', 'src/verify.schema.json', 'CHANGELOG.md', ...docs].sort(),
    );
    const pluginBundle = tarEntries(path.join(out1, ARCHIVE)).find((e) => e.name === 'vram-preflight/dist/vram-preflight.cjs')!;
    const npmBundle = entries.find((e) => e.name === 'package/dist/vram-preflight.cjs')!;
    expect(npmBundle.data.equals(pluginBundle.data)).toBe(true);
    expect(npmBundle.mode & 0o111).toBe(0o111);
    const pluginApp = tarEntries(path.join(out1, ARCHIVE)).find((e) => e.name === 'vram-preflight/dist/vram-preflight.app.js')!;
    expect(entries.find((e) => e.name === 'package/dist/vram-preflight.app.js')!.data.equals(pluginApp.data)).toBe(true);
    const pluginWebhook = tarEntries(path.join(out1, ARCHIVE)).find((e) => e.name === 'vram-preflight/dist/vram-preflight.webhook.cjs')!;
    expect(entries.find((e) => e.name === 'package/dist/vram-preflight.webhook.cjs')!.data.equals(pluginWebhook.data)).toBe(true);
  });

  it('the unpacked npm package is no plugin directory for either helm: both refuse it before installing anything (Helm 3 would have linked it and broken every plugin)', () => {
    const dir = tempDir('npm-unpacked');
    runOk('tar', ['-xzf', path.join(out1, NPM_TGZ), '-C', dir]);
    // What `npm install -g` puts in $(npm root -g)/vram-preflight: no folder of it holds a plugin.yaml.
    const pkg = path.join(dir, 'package');
    const folders = [pkg, ...(readdirSync(pkg, { recursive: true }) as string[]).map((d) => path.join(pkg, d)).filter((d) => statSync(d).isDirectory())];
    expect(folders.length).toBeGreaterThan(3);
    expect(folders.filter((d) => readdirSync(d).includes('plugin.yaml'))).toEqual([]);
    for (const major of [3, 4] as const) {
      const env = helmEnv();
      // Another plugin, as a user's Helm has: it must still be listed afterwards.
      mkdirSync(path.join(env.HELM_DATA_HOME, 'plugins', 'other'), { recursive: true });
      writeFileSync(path.join(env.HELM_DATA_HOME, 'plugins', 'other', 'plugin.yaml'), 'name: other\nversion: 1.0.0\nusage: another plugin\ndescription: another plugin\ncommand: echo\n');
      const r = helm(major, ['plugin', 'install', pkg], env);
      expect(r.status, `helm ${major}`).not.toBe(0);
      expect(r.stderr, `helm ${major}`).toContain('plugin.yaml');
      expect(readdirSync(path.join(env.HELM_DATA_HOME, 'plugins')), `helm ${major}`).toEqual(['other']);
      expect(helmOk(major, ['plugin', 'list'], env), `helm ${major}`).toMatch(/^other\s+1\.0\.0/m);
    }
  });

  it('the Argo CD build context is deploy/argocd/ as committed plus the same bundle in dist/', () => {
    const entries = tarEntries(path.join(out1, ARGO_TGZ));
    const files = entries.filter((e) => e.type === '0');
    const committed = runOk('git', ['ls-files', 'deploy/argocd']).trim().split('\n').sort();
    expect(files.map((e) => e.name).sort()).toEqual([...committed, 'dist/vram-preflight.cjs', 'dist/vram-preflight.app.js', 'dist/vram-preflight.webhook.cjs', 'dist/vram-preflight.audit.cjs'].sort());
    for (const e of files.filter((f) => f.name.startsWith('deploy/'))) {
      expect(e.data.equals(readFileSync(path.join(ROOT, e.name))), e.name).toBe(true);
    }
    expect(files.find((e) => e.name === 'deploy/argocd/generate.sh')!.mode).toBe(0o755);
    const pluginBundle = tarEntries(path.join(out1, ARCHIVE)).find((e) => e.name === 'vram-preflight/dist/vram-preflight.cjs')!;
    expect(files.find((e) => e.name === 'dist/vram-preflight.cjs')!.data.equals(pluginBundle.data)).toBe(true);
    const pluginApp = tarEntries(path.join(out1, ARCHIVE)).find((e) => e.name === 'vram-preflight/dist/vram-preflight.app.js')!;
    expect(files.find((e) => e.name === 'dist/vram-preflight.app.js')!.data.equals(pluginApp.data)).toBe(true);
    expect(entries.every((e) => e.uid === 0 && e.gid === 0)).toBe(true);
    const dockerfile = files.find((e) => e.name === 'deploy/argocd/Dockerfile')!.data.toString('utf8');
    expect(dockerfile).toMatch(/^FROM \$\{NODE_IMAGE\} AS bundle-prebuilt\nWORKDIR \/src\nCOPY dist\/ \.\/dist\/$/m);
    expect(dockerfile).toMatch(/^FROM bundle-\$\{BUNDLE\} AS bundle$/m);
  });
});

describe('helm 4 plugin install <archive> with default verification', () => {
  it('passes against the project key, renders with the installed plugin, and `helm plugin verify` agrees', () => {
    const env = helmEnv();
    const install = helm(4, ['plugin', 'install', path.join(out1, ARCHIVE), '--keyring', projectKeyring], env);
    expect(install.status, install.stderr).toBe(0);
    expect(install.stdout).toContain('Verifying plugin signature...');
    expect(install.stdout).toContain('Signed by: vram-preflight release (test) <release@example.invalid>');
    expect(install.stdout).toContain(`Using Key With Fingerprint: ${projectFpr}`);
    expect(install.stdout).toContain(`Plugin Hash Verified: sha256:${sha256(path.join(out1, ARCHIVE))}`);
    expect(install.stdout).toContain('Installed plugin: vram-preflight');
    expect(helmOk(4, ['plugin', 'list'], env)).toMatch(new RegExp(`^vram-preflight\\s+${V.replace(/\./g, '\\.')}\\s+postrenderer/v1\\s+v1\\s+signed\\b`, 'm'));
    expect(wrappedCount(helmOk(4, ['template', 'zoo', CHART, '--post-renderer', 'vram-preflight'], env))).toBe(4);

    const verify = helm(4, ['plugin', 'verify', path.join(out1, ARCHIVE), '--keyring', projectKeyring], env);
    expect(verify.status, verify.stderr).toBe(0);
    expect(verify.stdout).toContain(`Plugin Hash Verified: sha256:${sha256(path.join(out1, ARCHIVE))}`);
  });

  it('uses $GNUPGHOME/pubring.gpg (or ~/.gnupg/pubring.gpg) without --keyring; gpg 2.x keeps keys in pubring.kbx, which helm does not read', () => {
    const home = tempDir('gnupghome');
    const env = helmEnv({ GNUPGHOME: home });
    const missing = helm(4, ['plugin', 'install', path.join(out1, ARCHIVE)], env);
    expect(missing.status).not.toBe(0);
    expect(missing.stderr).toContain(`open ${path.join(home, 'pubring.gpg')}: no such file or directory`);
    copyFileSync(projectKeyring, path.join(home, 'pubring.gpg'));
    expect(helmOk(4, ['plugin', 'install', path.join(out1, ARCHIVE)], env)).toContain('Installed plugin: vram-preflight');
  });

  function refused(dir: string, keyring: string, message: string | RegExp): void {
    const env = helmEnv();
    const r = helm(4, ['plugin', 'install', path.join(dir, ARCHIVE), '--keyring', keyring], env);
    expect(r.status).not.toBe(0);
    expect(r.stderr).toMatch(message);
    expect(existsSync(path.join(env.HELM_DATA_HOME, 'plugins', 'vram-preflight'))).toBe(false);
    const v = helm(4, ['plugin', 'verify', path.join(dir, ARCHIVE), '--keyring', keyring], env);
    expect(v.status).not.toBe(0);
    if (!/no provenance/.test(String(message))) expect(v.stderr).toMatch(message);
  }

  it('refuses an archive with one byte changed (and helm plugin verify agrees)', () => {
    const dir = copyOf({ [ARCHIVE]: path.join(out1, ARCHIVE), [PROV]: path.join(out1, PROV) });
    const data = readFileSync(path.join(dir, ARCHIVE));
    data[data.length - 100]! ^= 0x01;
    writeFileSync(path.join(dir, ARCHIVE), data);
    refused(dir, projectKeyring, /plugin verification failed: sha256 sum does not match|sha256 sum does not match/);
  });

  it('refuses a .prov whose signed text was changed (and helm plugin verify agrees)', () => {
    const dir = copyOf({ [ARCHIVE]: path.join(out1, ARCHIVE), [PROV]: path.join(out1, PROV) });
    const prov = readFileSync(path.join(dir, PROV), 'utf8');
    writeFileSync(path.join(dir, PROV), prov.replace('Name: vram-preflight', 'Name: vram-preflight-evil'));
    refused(dir, projectKeyring, /openpgp: invalid signature/);
  });

  it('refuses a keyring without the project key (and helm plugin verify agrees)', () => {
    refused(out1, otherKeyring, /openpgp: signature made by unknown entity/);
  });

  it('refuses an archive without its .prov', () => {
    const dir = copyOf({ [ARCHIVE]: path.join(out1, ARCHIVE) });
    refused(dir, projectKeyring, /plugin verification failed: no provenance file \(\.prov\) found/);
  });

  it('refuses a renamed archive: the signature names the file', () => {
    const dir = tempDir('renamed');
    copyFileSync(path.join(out1, ARCHIVE), path.join(dir, 'vram-preflight-latest.tgz'));
    copyFileSync(path.join(out1, PROV), path.join(dir, 'vram-preflight-latest.tgz.prov'));
    const r = helm(4, ['plugin', 'install', path.join(dir, 'vram-preflight-latest.tgz'), '--keyring', projectKeyring], helmEnv());
    expect(r.status).not.toBe(0);
    expect(r.stderr).toContain('provenance does not contain a SHA for a file named "vram-preflight-latest.tgz"');
  });
});

// ---------------------------------------------------------------------------
// The webhook chart and the images, as an operator gets them: from the OCI
// registry the release pushed to (docker-registry on loopback, plain HTTP).

describe('the webhook chart and images, from the OCI registry', () => {
  const digestOf = (archive: string) => runOk('skopeo', ['inspect', '--format', '{{.Digest}}', `oci-archive:${path.join(out1, archive)}`]).trim();
  const chartRef = () => `oci://${prefix}/charts/vram-preflight-webhook`;
  type Values = { image: { repository: string; digest: string; tag: string } };
  const valuesIn = (tgz: string) => parseYaml(tarEntries(tgz).find((e) => e.name === 'vram-preflight-webhook/values.yaml')!.data.toString('utf8')) as Values;

  it("the chart's default image is the released webhook image, pinned by digest; the list names both images by digest", () => {
    const values = valuesIn(path.join(out1, CHART_TGZ));
    expect(values.image).toMatchObject({ repository: `${prefix}/vram-preflight-webhook`, digest: digestOf(WEBHOOK_IMAGE) });
    expect(values.image.digest).toMatch(/^sha256:[0-9a-f]{64}$/);
    expect(readFileSync(path.join(out1, IMAGES_TXT), 'utf8')).toBe(
      `${prefix}/vram-preflight-webhook:${V}@${digestOf(WEBHOOK_IMAGE)}\n${prefix}/vram-preflight-cmp:${V}@${digestOf(CMP_IMAGE)}\n`,
    );
    // Everything else of the chart is deploy/webhook as committed (less what .helmignore leaves out), but where it names the registry.
    const chart = tarEntries(path.join(out1, CHART_TGZ)).filter((e) => e.type === '0');
    // (helm package writes Chart.yaml anew from what it read: the same values, and the registry the release publishes to.)
    const committed = parseYaml(readFileSync(path.join(ROOT, 'deploy/webhook/Chart.yaml'), 'utf8')) as { annotations: Record<string, string> };
    expect(parseYaml(chart.find((e) => e.name === 'vram-preflight-webhook/Chart.yaml')!.data.toString('utf8'))).toEqual({ ...committed, annotations: { ...committed.annotations, 'vram-preflight.io/chart': chartRef() } });
    // The README names that registry, at the chart's version, and its values table the pinned image.
    const readme = chart.find((e) => e.name === 'vram-preflight-webhook/README.md')!.data.toString('utf8');
    expect(readme).toContain(`helm install vram-preflight ${chartRef()} --version ${V} \\\n  --verify --keyring ${KEY_FILE}`);
    expect(readme).toContain(`| \`image.digest\` | string | \`"${digestOf(WEBHOOK_IMAGE)}"\` |`);
    expect(readme).not.toContain('ghcr.io');
    for (const e of chart.filter((f) => !/\/(values\.yaml|Chart\.yaml|README\.md)$/.test(f.name))) {
      expect(e.data.equals(readFileSync(path.join(ROOT, 'deploy/webhook', e.name.replace(/^vram-preflight-webhook\//, '')))), e.name).toBe(true);
    }
    expect(chart.map((e) => e.name)).not.toContain('vram-preflight-webhook/Containerfile');
  });

  it('the registry holds both images by digest and by the version tag, the bytes the release built', () => {
    for (const [archive, name] of [[WEBHOOK_IMAGE, 'vram-preflight-webhook'], [CMP_IMAGE, 'vram-preflight-cmp']] as const) {
      const digest = digestOf(archive);
      expect(runOk('skopeo', ['inspect', '--no-tags', '--tls-verify=false', '--format', '{{.Digest}}', `docker://${prefix}/${name}@${digest}`]).trim()).toBe(digest);
      expect(runOk('skopeo', ['inspect', '--no-tags', '--tls-verify=false', '--format', '{{.Digest}}', `docker://${prefix}/${name}:${V}`]).trim()).toBe(digest);
    }
    expect(releaseStdout).toContain(`release: chart ${chartRef()} --version ${V} (pushed)`);
  });

  it.each([3, 4] as const)('helm %i pull --verify from the registry passes against the release key, and gets the released bytes', (major) => {
    const env = helmEnv();
    const dest = tempDir(`pull${major}`);
    const r = helm(major, ['pull', chartRef(), '--version', V, '--plain-http', '--verify', '--keyring', projectKeyring, '--destination', dest], env);
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout + r.stderr).toContain(`Chart Hash Verified: sha256:${sha256(path.join(out1, CHART_TGZ))}`);
    expect(readFileSync(path.join(dest, CHART_TGZ)).equals(readFileSync(path.join(out1, CHART_TGZ)))).toBe(true);
    expect(readFileSync(path.join(dest, CHART_PROV)).equals(readFileSync(path.join(out1, CHART_PROV)))).toBe(true);
  });

  it('helm install oci://… --version X renders the released image (helm 4 install --dry-run=client, helm 3 template), verified', () => {
    const image = `${prefix}/vram-preflight-webhook@${digestOf(WEBHOOK_IMAGE)}`;
    const installed = helmOk(4, ['install', 'vram-preflight', chartRef(), '--version', V, '--plain-http', '--verify', '--keyring', projectKeyring, '--namespace', 'vram-preflight', '--dry-run=client'], helmEnv());
    expect(installed).toContain(`image: "${image}"`);
    expect(installed).toContain('installed as vram-preflight-webhook in the namespace vram-preflight');
    const templated = helmOk(3, ['template', 'vram-preflight', chartRef(), '--version', V, '--plain-http', '--verify', '--keyring', projectKeyring], helmEnv());
    expect(templated).toContain(`image: "${image}"`);
    // The README's install line (helm 3's install needs a cluster even with --dry-run=client: its template above took the same
    // flags); the notes name the registry the release was made for.
    const notes = helmOk(4, ['install', 'vram-preflight', chartRef(), '--version', V, '--verify', '--keyring', projectKeyring, '--namespace', 'vram-preflight', '--create-namespace', '--plain-http', '--dry-run=client'], helmEnv());
    expect(notes).toContain(`(chart ${chartRef()} --version ${V})`);
    expect(notes).toContain(`helm upgrade vram-preflight ${chartRef()} --version ${V}`);
    expect(notes).not.toContain('ghcr.io');
    expect(helmOk(3, ['show', 'readme', chartRef(), '--version', V, '--plain-http'], helmEnv())).toMatch(/^# vram-preflight-webhook\n/);
  });

  it('a tampered chart is refused: another image digest repacked under the same name and version, pushed with the released .prov', () => {
    // The attack: a registry (or a mirror) serving a chart that runs another image, with the genuine signature.
    const work = tempDir('tamper');
    runOk('tar', ['-xzf', path.join(out1, CHART_TGZ), '-C', work]);
    const valuesFile = path.join(work, 'vram-preflight-webhook/values.yaml');
    writeFileSync(valuesFile, readFileSync(valuesFile, 'utf8').replace(/digest: "sha256:[0-9a-f]{64}"/, `digest: "sha256:${'e'.repeat(64)}"`));
    const evil = tempDir('evil');
    helmOk(4, ['package', path.join(work, 'vram-preflight-webhook'), '--destination', evil], helmEnv());
    copyFileSync(path.join(out1, CHART_PROV), path.join(evil, CHART_PROV));
    helmOk(4, ['push', path.join(evil, CHART_TGZ), `oci://${prefix}/mirror`, '--plain-http'], helmEnv());
    const ref = `oci://${prefix}/mirror/vram-preflight-webhook`;
    for (const major of [3, 4] as const) {
      const dest = tempDir('tampered-pull');
      const pulled = helm(major, ['pull', ref, '--version', V, '--plain-http', '--verify', '--keyring', projectKeyring, '--destination', dest], helmEnv());
      expect(pulled.status, `helm ${major}`).not.toBe(0);
      expect(pulled.stderr).toContain('sha256 sum does not match');
      const installed = helm(major, [major === 4 ? 'install' : 'template', 'x', ref, '--version', V, '--plain-http', '--verify', '--keyring', projectKeyring, ...(major === 4 ? ['--dry-run=client'] : [])], helmEnv());
      expect(installed.status, `helm ${major}`).not.toBe(0);
      expect(installed.stdout).not.toContain('eeeeeeee');
    }
    // Unsigned, it would have installed the other image: the check is what stops it.
    expect(helmOk(4, ['template', 'x', ref, '--version', V, '--plain-http'], helmEnv())).toContain(`@sha256:${'e'.repeat(64)}`);
    // And the genuine chart against a keyring without the release key is refused too.
    const wrongKey = helm(4, ['pull', chartRef(), '--version', V, '--plain-http', '--verify', '--keyring', otherKeyring, '--destination', tempDir('wrong-key')], helmEnv());
    expect(wrongKey.status).not.toBe(0);
    expect(wrongKey.stderr).toMatch(/signature made by unknown entity|unknown entity/);
  });
});

// ---------------------------------------------------------------------------
// URLs: a static HTTP server on 127.0.0.1 (helm runs asynchronously meanwhile).

let server: Server | undefined;
let served: string;
let baseUrl: string;
const requests: string[] = [];

async function startServer(): Promise<void> {
  served = tempDir('www');
  server = createServer((req, res) => {
    const rel = decodeURIComponent(new URL(req.url ?? '/', 'http://x').pathname);
    requests.push(`${req.method} ${rel}`);
    const file = path.join(served, rel);
    if (!file.startsWith(served + path.sep) || !existsSync(file) || !statSync(file).isFile()) {
      res.writeHead(404).end('not found');
      return;
    }
    // As a web server would: .tgz as application/gzip, but GitHub-style octet-stream under /octet-stream/.
    const type = rel.endsWith('.tgz') && !rel.startsWith('/octet-stream/') ? 'application/gzip' : 'application/octet-stream';
    res.writeHead(200, { 'content-type': type }).end(readFileSync(file));
  });
  await new Promise<void>((resolve) => server!.listen(0, '127.0.0.1', resolve));
  baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

const execFileP = promisify(execFile);
async function helmAsync(args: string[], env: NodeJS.ProcessEnv): Promise<Run> {
  try {
    const r = await execFileP(HELM[4], args, { env, encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
    return { status: 0, stdout: r.stdout, stderr: r.stderr };
  } catch (e) {
    const err = e as { code?: number; stdout?: string; stderr?: string };
    return { status: typeof err.code === 'number' ? err.code : 1, stdout: err.stdout ?? '', stderr: err.stderr ?? '' };
  }
}

// One server for the URL tests of both Helm versions.
beforeAll(startServer);
afterAll(() => new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve())));

describe('helm 4 plugin install <URL>', () => {

  it('https://…/vram-preflight-<version>.tgz: fetches URL + ".prov", verifies, installs', async () => {
    mkdirSync(path.join(served, 'v1'));
    copyFileSync(path.join(out1, ARCHIVE), path.join(served, 'v1', ARCHIVE));
    copyFileSync(path.join(out1, PROV), path.join(served, 'v1', PROV));
    const env = helmEnv();
    const r = await helmAsync(['plugin', 'install', `${baseUrl}/v1/${ARCHIVE}`, '--keyring', projectKeyring], env);
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toContain(`Plugin Hash Verified: sha256:${sha256(path.join(out1, ARCHIVE))}`);
    expect(requests).toContain(`GET /v1/${PROV}`);
    expect(wrappedCount((await helmAsync(['template', 'zoo', CHART, '--post-renderer', 'vram-preflight'], env)).stdout)).toBe(4);
  });

  it('refuses a URL whose .prov is missing, and a served archive that was changed', async () => {
    mkdirSync(path.join(served, 'noprov'));
    copyFileSync(path.join(out1, ARCHIVE), path.join(served, 'noprov', ARCHIVE));
    const r = await helmAsync(['plugin', 'install', `${baseUrl}/noprov/${ARCHIVE}`, '--keyring', projectKeyring], helmEnv());
    expect(r.status).not.toBe(0);
    expect(r.stderr).toContain('plugin verification failed: no provenance file (.prov) found');

    mkdirSync(path.join(served, 'tampered'));
    const data = readFileSync(path.join(out1, ARCHIVE));
    data[200]! ^= 0x01;
    writeFileSync(path.join(served, 'tampered', ARCHIVE), data);
    copyFileSync(path.join(out1, PROV), path.join(served, 'tampered', PROV));
    const t = await helmAsync(['plugin', 'install', `${baseUrl}/tampered/${ARCHIVE}`, '--keyring', projectKeyring], helmEnv());
    expect(t.status).not.toBe(0);
    expect(t.stderr).toContain('sha256 sum does not match');
  });

  it('a git URL: refused under default verification, and with --verify=false (the repository has no plugin.yaml at its top): nothing installed', async () => {
    const url = gitUrl();
    const env = helmEnv();
    const strict = await helmAsync(['plugin', 'install', url], env);
    expect(strict.status).not.toBe(0);
    expect(strict.stderr).toContain('plugin source does not support verification. Use --verify=false to skip verification');
    const loose = await helmAsync(['plugin', 'install', url, '--verify=false'], env);
    expect(loose.status).not.toBe(0);
    expect(loose.stderr).toContain('plugin metadata (plugin.yaml) missing');
    const plugins = path.join(env.HELM_DATA_HOME, 'plugins');
    expect(existsSync(plugins) ? readdirSync(plugins) : []).toEqual([]);
  });
});

/** The repository as committed, served over git's "dumb" HTTP protocol (Helm cannot detect a VCS in a file:// URL). */
let servedGit: string | undefined;
function gitUrl(): string {
  if (!servedGit) {
    const bare = path.join(served, 'vram-preflight.git');
    runOk('git', ['clone', '--quiet', '--bare', '--no-hardlinks', ROOT, bare]);
    runOk('git', ['--git-dir', bare, 'update-server-info']);
    servedGit = `${baseUrl}/vram-preflight.git`;
  }
  return servedGit;
}

// Helm 3 users `helm plugin install <URL>` out of habit (helm-diff, helm-secrets). Helm 3 cannot load
// a postrenderer/v1 plugin.yaml, and one it linked anyway broke `helm plugin list` for every plugin.
// Every way in is refused before anything is installed; docs/install.md says what Helm 3 takes instead.
describe('helm 3 plugin install <URL>: refused before it installs anything, and the other plugins stay', () => {
  async function helm3(args: string[], env: NodeJS.ProcessEnv): Promise<Run> {
    try {
      const r = await execFileP(HELM[3], args, { env, encoding: 'utf8' });
      return { status: 0, stdout: r.stdout, stderr: r.stderr };
    } catch (e) {
      const err = e as { code?: number; stdout?: string; stderr?: string };
      return { status: typeof err.code === 'number' ? err.code : 1, stdout: err.stdout ?? '', stderr: err.stderr ?? '' };
    }
  }
  /** A Helm 3 data directory with another plugin in it, as a user's would be. */
  function withOtherPlugin(): NodeJS.ProcessEnv & { HELM_DATA_HOME: string } {
    const env = helmEnv();
    const other = path.join(env.HELM_DATA_HOME, 'plugins', 'other');
    mkdirSync(other, { recursive: true });
    writeFileSync(path.join(other, 'plugin.yaml'), 'name: other\nversion: 1.0.0\nusage: another plugin\ndescription: another plugin\ncommand: echo\n');
    return env;
  }

  it.each([
    ['the git URL of the repository', () => gitUrl(), 'plugin metadata (plugin.yaml) missing'],
    // Served as application/gzip, Helm 3 downloads and unpacks it: plugin.yaml is one directory down (Helm 4's archive layout).
    ['the release archive from a server that says application/gzip', () => `${baseUrl}/gzip/${ARCHIVE}`, 'plugin metadata (plugin.yaml) missing'],
    // Served as application/octet-stream (GitHub release assets), Helm 3.17 takes it for a VCS.
    ['the release archive from a server that says application/octet-stream', () => `${baseUrl}/octet-stream/${ARCHIVE}`, 'Cannot detect VCS'],
    ['the release archive as a file', () => path.join(out1, ARCHIVE), 'expected plugin to be a folder'],
  ])('%s', async (_what, source, message) => {
    for (const dir of ['octet-stream', 'gzip']) {
      mkdirSync(path.join(served, dir), { recursive: true });
      copyFileSync(path.join(out1, ARCHIVE), path.join(served, dir, ARCHIVE));
    }
    const env = withOtherPlugin();
    const r = await helm3(['plugin', 'install', source()], env);
    expect(r.status).not.toBe(0);
    expect(r.stderr).toContain(message);
    expect(readdirSync(path.join(env.HELM_DATA_HOME, 'plugins'))).toEqual(['other']);
    const list = await helm3(['plugin', 'list'], env);
    expect(list.status, list.stderr).toBe(0);
    expect(list.stdout).toMatch(/^other\s+1\.0\.0/m);
  });

  it("docs/install.md says so, and what Helm 3 takes instead: the executable as --post-renderer", () => {
    const doc = readFileSync(path.join(ROOT, 'docs/install.md'), 'utf8');
    const section = doc.slice(doc.indexOf('## Helm 3'), doc.indexOf('\n## ', doc.indexOf('## Helm 3') + 5));
    expect(section).toContain('helm plugin install');
    expect(section).toContain('plugin metadata (plugin.yaml) missing');
    expect(section).toContain('--post-renderer vram-preflight');
  });
});

// ---------------------------------------------------------------------------

describe('Node.js missing or older than 20', () => {
  let env: ReturnType<typeof helmEnv>;
  let oldNodeDir: string;

  beforeAll(() => {
    env = helmEnv();
    helmOk(4, ['plugin', 'install', path.join(out1, ARCHIVE), '--keyring', projectKeyring], env);
    // A `node` that is this Node.js but says it is 18.19.0 (process.version(s) replaced before anything else runs).
    oldNodeDir = tempDir('old-node');
    const shim = path.join(oldNodeDir, 'pretend-18.cjs');
    writeFileSync(
      shim,
      "Object.defineProperty(process, 'versions', { value: Object.assign({}, process.versions, { node: '18.19.0' }) });\n" +
        "Object.defineProperty(process, 'version', { value: 'v18.19.0' });\n",
    );
    writeFileSync(path.join(oldNodeDir, 'node'), `#!/bin/sh\nexec '${process.execPath}' -r '${shim}' "$@"\n`);
    chmodSync(path.join(oldNodeDir, 'node'), 0o755);
  });

  it('Helm 4 shows the reason (the plugin writes it as a YAML document Helm cannot use) and renders nothing', () => {
    const r = helm(4, ['template', 'zoo', CHART, '--post-renderer', 'vram-preflight'], { ...env, PATH: `${oldNodeDir}:${env.PATH}` });
    expect(r.status).not.toBe(0);
    expect(r.stdout).toBe('');
    expect(r.stderr).toContain('error parsing YAML: wrong node kind: expected MappingNode but got ScalarNode: node contents:');
    expect(r.stderr).toContain('# vram-preflight: Node.js 20 or newer is needed; the node on the PATH helm runs with is v18.19.0');
    // The same for `helm install` (no cluster needed with --dry-run=client).
    const i = helm(4, ['install', 'zoo', CHART, '--dry-run=client', '--post-renderer', 'vram-preflight'], { ...env, PATH: `${oldNodeDir}:${env.PATH}` });
    expect(i.status).not.toBe(0);
    expect(i.stderr).toContain('Node.js 20 or newer is needed');
  });

  it('`helm plugin install` says so at once (the install hook)', () => {
    const fresh = helmEnv({ PATH: `${oldNodeDir}:${process.env.PATH}` });
    const r = helm(4, ['plugin', 'install', path.join(out1, ARCHIVE), '--keyring', projectKeyring], fresh);
    expect(r.status).not.toBe(0);
    expect(r.stderr).toContain('vram-preflight: Node.js 20 or newer is needed');
    expect(r.stderr).toContain('the plugin is installed but cannot run until this is fixed');
  });

  it('outside Helm 4 (no HELM_PLUGIN_NAME): stderr and exit 1, nothing on stdout', () => {
    const dir = tempDir('plugin');
    runOk('tar', ['-xzf', path.join(out1, ARCHIVE), '-C', dir]);
    const p = path.join(dir, 'vram-preflight');
    const r = run(path.join(oldNodeDir, 'node'), ['-r', path.join(p, 'bin/node-version-guard.cjs'), path.join(p, 'dist/vram-preflight.cjs')], {
      input: 'apiVersion: v1\nkind: ConfigMap\n',
      env: { PATH: process.env.PATH },
    });
    expect(r.status).toBe(1);
    expect(r.stdout).toBe('');
    expect(r.stderr).toContain('Node.js 20 or newer is needed');
  });

  it('no node on PATH: Helm 4 itself says so (`exec: "node": executable file not found in $PATH`)', () => {
    const r = helm(4, ['template', 'zoo', CHART, '--post-renderer', 'vram-preflight'], { ...env, PATH: tempDir('empty-path') });
    expect(r.status).not.toBe(0);
    expect(r.stderr).toContain('failed to invoke post-renderer plugin "vram-preflight": exec: "node": executable file not found in $PATH');
  });

  it('with Node.js 20+ the check costs no extra process: the plugin runs `node -r <check> <bundle>`', () => {
    const plugin = parseYaml(readFileSync(path.join(ROOT, 'helm-plugin/plugin.yaml'), 'utf8')) as { runtimeConfig: { platformCommand: Array<{ command: string; args: string[] }> } };
    expect(plugin.runtimeConfig.platformCommand).toEqual([
      { command: 'node', args: ['-r', '${HELM_PLUGIN_DIR}/bin/node-version-guard.cjs', '${HELM_PLUGIN_DIR}/dist/vram-preflight.cjs'] },
    ]);
    // The check is ES5, so that old Node.js versions can parse it.
    const guard = readFileSync(path.join(ROOT, 'bin/node-version-guard.cjs'), 'utf8');
    expect(guard).not.toMatch(/\b(const|let|class)\s|=>|`|\?\?|\?\./);
  });
});
