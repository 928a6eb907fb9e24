#!/usr/bin/env node
// `npm run package`: builds the bundle, then lays out the Helm 4 plugin
//
//   dist/plugin/vram-preflight/
//     plugin.yaml                 (the repository's plugin.yaml, unchanged)
//     dist/vram-preflight.cjs     (the self-contained bundle, 0755; the same
//                                  relative path as in the npm package and in
//                                  a built checkout, so one plugin.yaml serves all)
//     README.md, LICENSE
//
// and archives it as dist/vram-preflight-plugin-<version>.tgz.
//
// About the archive: `helm plugin install <file>.tgz` (Helm 4) derives the
// directory it expects at the archive's root from the FILE NAME, by dropping
// the extension and a trailing `-<version>`: vram-preflight-plugin-0.1.0.tgz
// must contain vram-preflight-plugin/plugin.yaml. The root directory is
// therefore named after the file, not after the plugin; Helm installs it as
// $HELM_DATA_HOME/plugins/vram-preflight-plugin and still calls the plugin
// `vram-preflight` (the name in plugin.yaml). Rename the file and the install
// fails ("plugin.yaml not found in expected directory").
//
// The archive is reproducible: entries sorted, owner root:root, mtime from
// SOURCE_DATE_EPOCH (default 0), gzip header without a time stamp.
//
//   node scripts/package-plugin.mjs               into dist/
//   node scripts/package-plugin.mjs --dist DIR    into DIR (the e2e tests use temp dirs)
import { chmodSync, copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';
import { buildBundle } from './build.mjs';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const PLUGIN_NAME = 'vram-preflight';
// Strict semver 2.0.0 (Helm 4.1.4 checks plugin versions with Masterminds' StrictNewVersion).
const SEMVER =
  /^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$/;

/** The top-level scalar `key: value` of plugin.yaml (no YAML library needed for these flat keys). */
export function pluginYamlField(text, key) {
  const m = new RegExp(`^${key}:[ \\t]*["']?([^"'#\\s]+)["']?[ \\t]*(?:#.*)?$`, 'm').exec(text);
  return m ? m[1] : undefined;
}

export function checkVersions() {
  const pkg = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8'));
  const pluginYaml = readFileSync(path.join(root, 'plugin.yaml'), 'utf8');
  const problems = [];
  const name = pluginYamlField(pluginYaml, 'name');
  const version = pluginYamlField(pluginYaml, 'version');
  if (name !== PLUGIN_NAME) problems.push(`plugin.yaml name is ${name}, expected ${PLUGIN_NAME}`);
  if (version !== pkg.version) problems.push(`plugin.yaml version ${version} != package.json version ${pkg.version}`);
  if (!SEMVER.test(pkg.version)) problems.push(`version ${pkg.version} is not strict semver (Helm 4 refuses the plugin)`);
  if (problems.length) throw new Error(problems.join('; '));
  return { version: pkg.version, pluginYaml };
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

/** entries: [{ name, dir?: true, data?: Buffer, mode }] in archive order. */
export function makeTarGz(entries, mtime = Number(process.env.SOURCE_DATE_EPOCH ?? 0)) {
  const parts = [];
  for (const e of entries) {
    if (e.dir) {
      parts.push(tarHeader({ name: e.name.endsWith('/') ? e.name : `${e.name}/`, mode: 0o755, size: 0, mtime, type: '5' }));
    } else {
      parts.push(tarHeader({ name: e.name, mode: e.mode, size: e.data.length, mtime, type: '0' }));
      parts.push(e.data);
      const pad = (512 - (e.data.length % 512)) % 512;
      if (pad) parts.push(Buffer.alloc(pad, 0));
    }
  }
  parts.push(Buffer.alloc(1024, 0));
  return gzipSync(Buffer.concat(parts), { level: 9 });
}

function listTree(dir, prefix) {
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

    helm plugin install ./vram-preflight            # this directory (linked)
    helm plugin install ./vram-preflight-plugin-${version}.tgz --verify=false
    helm template my-release ./chart --post-renderer vram-preflight \\
      --post-renderer-args=--timeout-seconds=900

Helm 4 only. Keep it out of a plugins directory that Helm 3 reads (give Helm 4
its own HELM_DATA_HOME); Helm 3 uses the npm package or the bundle
(dist/vram-preflight.cjs) by path:

    helm template my-release ./chart --post-renderer /path/to/dist/vram-preflight.cjs

On failure Helm 4 prints only 'plugin "vram-preflight" exited with error';
pass --post-renderer-args=--diagnostics-file=/tmp/vram-preflight.log (or set
VRAM_PREFLIGHT_DIAGNOSTICS_FILE) to keep the reason.
`;
}

export async function packagePlugin({ distDir = path.join(root, 'dist'), quiet = false } = {}) {
  distDir = path.resolve(distDir);
  const { version, pluginYaml } = checkVersions();
  const { outfile } = await buildBundle({ outfile: path.join(distDir, 'vram-preflight.cjs'), quiet });

  const pluginRoot = path.join(distDir, 'plugin');
  const dir = path.join(pluginRoot, PLUGIN_NAME);
  rmSync(pluginRoot, { recursive: true, force: true });
  mkdirSync(path.join(dir, 'dist'), { recursive: true });
  writeFileSync(path.join(dir, 'plugin.yaml'), pluginYaml);
  copyFileSync(outfile, path.join(dir, 'dist/vram-preflight.cjs'));
  chmodSync(path.join(dir, 'dist/vram-preflight.cjs'), 0o755);
  writeFileSync(path.join(dir, 'README.md'), pluginReadme(version));
  const license = path.join(root, 'LICENSE');
  if (existsSync(license)) copyFileSync(license, path.join(dir, 'LICENSE'));

  const archiveBase = `${PLUGIN_NAME}-plugin`;
  const tgz = path.join(distDir, `${archiveBase}-${version}.tgz`);
  const entries = [{ name: archiveBase, dir: true }, ...listTree(dir, archiveBase)];
  writeFileSync(tgz, makeTarGz(entries));
  if (!quiet) {
    process.stdout.write(`package: ${path.relative(root, dir)}/\n`);
    for (const e of entries.slice(1)) process.stdout.write(`  ${e.dir ? 'd' : e.mode === 0o755 ? 'x' : '-'} ${e.name}\n`);
    process.stdout.write(`package: ${path.relative(root, tgz)} ${(statSync(tgz).size / 1024).toFixed(1)} KiB\n`);
  }
  return { version, dir, tgz, bundle: outfile };
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const i = process.argv.findIndex((a) => a === '--dist' || a.startsWith('--dist='));
  const distDir = i === -1 ? undefined : process.argv[i].includes('=') ? process.argv[i].slice(7) : process.argv[i + 1];
  packagePlugin(distDir ? { distDir } : {}).catch((err) => {
    process.stderr.write(`package: ${err.message ?? err}\n`);
    process.exit(1);
  });
}
