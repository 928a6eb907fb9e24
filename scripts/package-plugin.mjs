#!/usr/bin/env node
// `npm run package`: builds the bundle, then archives the Helm 4 plugin as
// <dist>/vram-preflight-<version>.tgz, holding under vram-preflight/:
//
//     plugin.yaml                    (the repository's helm-plugin/plugin.yaml, unchanged)
//     bin/node-version-guard.cjs     (the Node.js >= 20 check plugin.yaml loads first)
//     dist/vram-preflight.cjs        (the launcher, 0755, and next to it the
//     dist/vram-preflight.app.js      application it loads, 0644: the self-contained
//     dist/vram-preflight.webhook.cjs bundle, and the webhook and the audit it
//     dist/vram-preflight.audit.cjs   requires for `vram-preflight webhook` and
//                                     `vram-preflight audit` only, 0644)
//     src/report.schema.json         (the schema of `explain --output json`)
//     README.md, LICENSE (when the repository has one)
//
// The archive only: no plugin DIRECTORY is left anywhere (the layout is staged
// in a temporary directory and removed; a dist/plugin/ of an earlier version
// of this script is removed too). A directory with a Helm 4 plugin.yaml at its
// top is what Helm 3's `helm plugin install <dir>` links into its plugins
// directory before it reads the file; it then cannot read it, and every later
// `helm plugin list`/`uninstall` of Helm 3 fails for every plugin until the
// link is deleted by hand (docs/install.md, "Helm 3 ... the way out"). Helm 3
// refuses an archive file outright ("expected plugin to be a folder"), and
// Helm 4 installs it (`helm plugin install <file>.tgz`, verified against its
// .prov, or --verify=false for a build of your own).
//
// Laid out the way `helm plugin package` (Helm 4.1.4) lays out its archives:
// file name <plugin name>-<version>.tgz, every entry under one top directory
// named after the plugin (`vram-preflight`, `vram-preflight/bin`, ...:
// directories without a trailing slash, in lexical walk order), ustar headers,
// and a gzip header of 1f8b 08 00 00000000 00 ff (no name, no time, OS
// "unknown"), which is what Go's gzip writer emits. Helm's installer derives
// the directory it expects inside the archive from the FILE NAME (dropping
// `.tgz` and `-<version>`), and checks the provenance (.prov) against the file
// name too: keep the name.
//
// Unlike `helm plugin package`, the archive is reproducible: entries sorted,
// owner root:root (uid/gid 0), modes 0755 for directories and executables and
// 0644 otherwise, every mtime = SOURCE_DATE_EPOCH (default: the time of the
// commit checked out, `git log -1 --format=%ct`; 0 outside git), gzip level 9.
//
// What the bundle build puts in dist/ and every package ships is listed in
// DIST_FILES below, in one place (add a companion file of the bundle there).
//
//   node scripts/package-plugin.mjs               into dist/
//   node scripts/package-plugin.mjs --dist DIR    into DIR (the e2e tests use temp dirs)
import { execFileSync } from 'node:child_process';
import { chmodSync, copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';
import { buildBundle } from './build.mjs';

export const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
export const PLUGIN_NAME = 'vram-preflight';

/**
 * The files the bundle build leaves in <dist>/ that every artifact ships in
 * its dist/ directory (Helm 4 plugin, npm package, Argo CD build context).
 * THE one list: a companion of the bundle (e.g. a V8 code-cache file) is one
 * more entry here.
 */
export const DIST_FILES = ['vram-preflight.cjs', 'vram-preflight.app.js', 'vram-preflight.webhook.cjs', 'vram-preflight.audit.cjs'];

/** Repository files the plugin carries as they are (besides dist/ and the generated README). */
// src/report.schema.json: the schema of `explain --output json`, at the same
// relative path as in the npm package, for whoever consumes the report.
export const PLUGIN_REPO_FILES = ['plugin.yaml', 'bin/node-version-guard.cjs', 'src/report.schema.json'];

/**
 * Where the plugin's plugin.yaml lives in the repository (it becomes plugin.yaml
 * at the top of the archive's plugin directory, and nowhere else): not at the
 * top of the repository, where `helm plugin install <git URL>` would find it
 * (Helm 3 would install a plugin it cannot read; docs/install.md). Not in the
 * npm package either, for the same reason: `helm plugin install
 * "$(npm root -g)/vram-preflight"` under Helm 3 would link it.
 */
export const PLUGIN_YAML_SOURCE = 'helm-plugin/plugin.yaml';

/** A repository file of the plugin archive: plugin.yaml comes from PLUGIN_YAML_SOURCE. */
export const repoSource = (rel) => (rel === 'plugin.yaml' ? PLUGIN_YAML_SOURCE : rel);

// Strict semver 2.0.0 (Helm 4.1.4 checks plugin versions with Masterminds' StrictNewVersion).
const SEMVER =
  /^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$/;

/** The top-level scalar `key: value` of plugin.yaml (no YAML library needed for these flat keys). */
export function pluginYamlField(text, key) {
  const m = new RegExp(`^${key}:[ \\t]*["']?([^"'#\\s]+)["']?[ \\t]*(?:#.*)?$`, 'm').exec(text);
  return m ? m[1] : undefined;
}

/**
 * Every place that carries the release version, and what it says. They must
 * agree: package.json, helm-plugin/plugin.yaml, src/core/version.ts, the Argo CD plugin's
 * spec.version (`v<version>`, in plugin.yaml and in the ConfigMap that embeds
 * it) and the sidecar image tag in repo-server-patch.yaml.
 */
export function versionSites() {
  const read = (rel) => readFileSync(path.join(root, rel), 'utf8');
  const one = (rel, re, strip = (s) => s) => {
    const m = re.exec(read(rel));
    return m ? strip(m[1]) : undefined;
  };
  const unv = (s) => s.replace(/^v/, '');
  return {
    'package.json': JSON.parse(read('package.json')).version,
    [PLUGIN_YAML_SOURCE]: pluginYamlField(read(PLUGIN_YAML_SOURCE), 'version'),
    'src/core/version.ts': one('src/core/version.ts', /VERSION = '([^']+)'/),
    'deploy/argocd/plugin.yaml spec.version': one('deploy/argocd/plugin.yaml', /^ {2}version:[ \t]*["']?(v[^"'\s]+)/m, unv),
    'deploy/argocd/cmp-plugin-configmap.yaml spec.version': one('deploy/argocd/cmp-plugin-configmap.yaml', /^ {6}version:[ \t]*["']?(v[^"'\s]+)/m, unv),
    'deploy/argocd/repo-server-patch.yaml image tag': one('deploy/argocd/repo-server-patch.yaml', /image:\s*\S*\/vram-preflight-cmp:([^\s"']+)/),
  };
}

export function checkVersions() {
  const pkg = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8'));
  const pluginYaml = readFileSync(path.join(root, PLUGIN_YAML_SOURCE), 'utf8');
  const problems = [];
  const name = pluginYamlField(pluginYaml, 'name');
  if (name !== PLUGIN_NAME) problems.push(`${PLUGIN_YAML_SOURCE} name is ${name}, expected ${PLUGIN_NAME}`);
  for (const [where, v] of Object.entries(versionSites())) {
    if (v !== pkg.version) problems.push(`${where} says ${v ?? '(nothing)'}, package.json says ${pkg.version}`);
  }
  if (!SEMVER.test(pkg.version)) problems.push(`version ${pkg.version} is not strict semver (Helm 4 refuses the plugin)`);
  if (problems.length) throw new Error(`versions out of step: ${problems.join('; ')}`);
  return { version: pkg.version, pluginYaml };
}

/** SOURCE_DATE_EPOCH, else the commit time of HEAD, else 0. */
export function sourceDateEpoch() {
  if (process.env.SOURCE_DATE_EPOCH !== undefined && process.env.SOURCE_DATE_EPOCH !== '') {
    const n = Number(process.env.SOURCE_DATE_EPOCH);
    if (!Number.isInteger(n) || n < 0) throw new Error(`SOURCE_DATE_EPOCH=${process.env.SOURCE_DATE_EPOCH} is not a non-negative integer`);
    return n;
  }
  try {
    return Number(execFileSync('git', ['log', '-1', '--format=%ct'], { cwd: root, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim()) || 0;
  } catch {
    return 0;
  }
}

// ---- minimal reproducible ustar writer (directories and regular files only,
// which is all Helm's plugin extractor accepts) ----
function octal(n, width) {
  return `${n.toString(8).padStart(width - 1, '0')}\0`;
}

function tarHeader({ name, mode, size, mtime, type }) {
  if (Buffer.byteLength(name) > 100) throw new Error(`tar: path too long: ${name}`);
  const h = Buffer.alloc(512, 0);
  h.write(name, 0, 100, 'utf8');
  h.write(octal(mode, 8), 100, 8, 'ascii');
  h.write(octal(0, 8), 108, 8, 'ascii'); // uid
  h.write(octal(0, 8), 116, 8, 'ascii'); // gid
  h.write(octal(size, 12), 124, 12, 'ascii');
  h.write(octal(mtime, 12), 136, 12, 'ascii');
  h.write('        ', 148, 8, 'ascii'); // checksum placeholder
  h.write(type, 156, 1, 'ascii');
  h.write('ustar\0', 257, 6, 'ascii');
  h.write('00', 263, 2, 'ascii');
  h.write('root', 265, 32, 'ascii');
  h.write('root', 297, 32, 'ascii');
  let sum = 0;
  for (const b of h) sum += b;
  h.write(`${sum.toString(8).padStart(6, '0')}\0 `, 148, 8, 'ascii');
  return h;
}

/**
 * entries: [{ name, dir?: true, data?: Buffer, mode }] in archive order.
 * Directory names are written as given (Helm writes them without a trailing slash).
 */
export function makeTarGz(entries, mtime = sourceDateEpoch()) {
  const parts = [];
  for (const e of entries) {
    if (e.dir) {
      parts.push(tarHeader({ name: e.name, mode: 0o755, size: 0, mtime, type: '5' }));
    } else {
      parts.push(tarHeader({ name: e.name, mode: e.mode, size: e.data.length, mtime, type: '0' }));
      parts.push(e.data);
      const pad = (512 - (e.data.length % 512)) % 512;
      if (pad) parts.push(Buffer.alloc(pad, 0));
    }
  }
  parts.push(Buffer.alloc(1024, 0));
  const gz = gzipSync(Buffer.concat(parts), { level: 9 });
  // The header Go's gzip.Writer writes (and `helm plugin package` therefore):
  // MTIME 0, XFL 0, OS 255. zlib writes XFL 2 for level 9 and OS 3; both are
  // informational, the CRC covers the data only.
  gz[4] = gz[5] = gz[6] = gz[7] = 0;
  gz[8] = 0;
  gz[9] = 0xff;
  return gz;
}

/** The tree under dir as tar entries named prefix/..., lexical order (like Go's filepath.Walk). */
export function listTree(dir, prefix) {
  const out = [];
  for (const name of readdirSync(dir).sort()) {
    const full = path.join(dir, name);
    const rel = `${prefix}/${name}`;
    const st = statSync(full);
    if (st.isDirectory()) {
      out.push({ name: rel, dir: true });
      out.push(...listTree(full, rel));
    } else if (st.isFile()) {
      out.push({ name: rel, data: readFileSync(full), mode: st.mode & 0o111 ? 0o755 : 0o644 });
    } else {
      throw new Error(`tar: not a plain file: ${full}`);
    }
  }
  return out;
}

function pluginReadme(version) {
  return `# vram-preflight ${version} — Helm 4 post-renderer plugin

Makes vLLM containers on NVIDIA GPUs wait until the GPU memory they will ask
for is free before vLLM starts; every other document passes through unchanged.

Requires \`node\` (>= 20) on the PATH that helm runs with.

    helm plugin install vram-preflight-${version}.tgz --keyring vram-preflight-release-key.gpg
    helm template my-release ./chart --post-renderer vram-preflight \\
      --post-renderer-args=--timeout-seconds=900

Helm 4 verifies vram-preflight-${version}.tgz.prov (next to the archive, or at
the archive's URL + ".prov") against the keyring before it installs anything.
Keep the file name: the signature and the installer both use it. An archive
you built yourself (npm run package, npm run release -- --no-sign) has no
.prov: install it with --verify=false.

Helm 4 only. Helm 3 refuses this archive, and must never be given this
directory: Helm 3 links a directory into its plugins before it reads
plugin.yaml, cannot read this one, and then lists, runs and uninstalls no
plugin at all. If that happened, delete the link it made:

    rm "$(helm env HELM_PLUGINS)/vram-preflight"

Keep Helm 4's plugins out of Helm 3's plugins directory (give Helm 4 its own
HELM_DATA_HOME). Helm 3 takes the executable instead (the npm package puts
vram-preflight on PATH, or the bundle dist/vram-preflight.cjs by path, with
dist/vram-preflight.app.js next to it):

    helm template my-release ./chart --post-renderer vram-preflight

On failure Helm 4 prints only 'plugin "vram-preflight" exited with error';
pass --post-renderer-args=--diagnostics-file=/tmp/vram-preflight.log (or set
VRAM_PREFLIGHT_DIAGNOSTICS_FILE) to keep the reason.
`;
}

/**
 * Builds the bundle into distDir and archives the plugin there
 * (<distDir>/vram-preflight-<version>.tgz; the layout is staged in a temporary
 * directory and removed: no plugin directory is left, see the top of this file).
 * Returns { version, tgz, entries, bundle, distFiles, epoch }.
 */
export async function packagePlugin({ distDir = path.join(root, 'dist'), quiet = false, epoch = sourceDateEpoch() } = {}) {
  distDir = path.resolve(distDir);
  const { version, pluginYaml } = checkVersions();
  const { outfile } = await buildBundle({ outfile: path.join(distDir, 'vram-preflight.cjs'), quiet });
  const distFiles = DIST_FILES.map((f) => path.join(distDir, f));
  for (const f of distFiles) if (!existsSync(f)) throw new Error(`the build left no ${path.relative(root, f)} (listed in DIST_FILES)`);
  // The plugin directory earlier versions of this script left here: a Helm 3 trap (see the top).
  rmSync(path.join(distDir, 'plugin'), { recursive: true, force: true });

  const stage = mkdtempSync(path.join(tmpdir(), 'vram-preflight-plugin-'));
  const tgz = path.join(distDir, `${PLUGIN_NAME}-${version}.tgz`);
  let entries;
  try {
    const dir = path.join(stage, PLUGIN_NAME);
    mkdirSync(path.join(dir, 'dist'), { recursive: true });
    for (const rel of PLUGIN_REPO_FILES) {
      mkdirSync(path.dirname(path.join(dir, rel)), { recursive: true });
      writeFileSync(path.join(dir, rel), rel === 'plugin.yaml' ? pluginYaml : readFileSync(path.join(root, rel)));
    }
    for (const f of distFiles) {
      const to = path.join(dir, 'dist', path.basename(f));
      copyFileSync(f, to);
      chmodSync(to, statSync(f).mode & 0o111 ? 0o755 : 0o644);
    }
    writeFileSync(path.join(dir, 'README.md'), pluginReadme(version));
    const license = path.join(root, 'LICENSE');
    if (existsSync(license)) copyFileSync(license, path.join(dir, 'LICENSE'));
    entries = [{ name: PLUGIN_NAME, dir: true }, ...listTree(dir, PLUGIN_NAME)];
    writeFileSync(tgz, makeTarGz(entries, epoch));
  } finally {
    rmSync(stage, { recursive: true, force: true });
  }
  if (!quiet) {
    process.stdout.write(`package: ${path.relative(process.cwd(), tgz)} ${(statSync(tgz).size / 1024).toFixed(1)} KiB (Helm 4: helm plugin install ${path.relative(process.cwd(), tgz)} --verify=false)\n`);
    for (const e of entries.slice(1)) process.stdout.write(`  ${e.dir ? 'd' : e.mode === 0o755 ? 'x' : '-'} ${e.name}\n`);
  }
  return { version, tgz, entries: entries.map((e) => e.name), bundle: outfile, distFiles, epoch };
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const i = process.argv.findIndex((a) => a === '--dist' || a.startsWith('--dist='));
  const distDir = i === -1 ? undefined : process.argv[i].includes('=') ? process.argv[i].slice(7) : process.argv[i + 1];
  packagePlugin(distDir ? { distDir } : {}).catch((err) => {
    process.stderr.write(`package: ${err.message ?? err}\n`);
    process.exit(1);
  });
}
