#!/usr/bin/env node
// `npm run release -- --key <gpg key id>`: everything a release publishes,
// from a clean checkout (run `npm ci` first), into dist/release/:
//
//   vram-preflight-<v>.tgz            Helm 4 plugin archive, laid out the way
//                                     `helm plugin package` lays it out
//                                     (scripts/package-plugin.mjs)
//   vram-preflight-<v>.tgz.prov       its provenance: the clear-signed YAML
//                                     `helm plugin package --sign` writes
//                                     (plugin metadata, `...`, files: {name: sha256:…}),
//                                     signed by gpg with SHA-512
//   vram-preflight-release-key.gpg    the signing key's public key, binary
//                                     (`gpg --export`): the format Helm's
//                                     --keyring reads (armored keys are refused)
//   vram-preflight-npm-<v>.tgz        `npm pack` of the package (renamed: npm
//                                     would call it vram-preflight-<v>.tgz, the
//                                     name Helm needs for the plugin archive)
//   vram-preflight-argocd-cmp-<v>.tar.gz
//                                     the Argo CD sidecar build context:
//                                     deploy/argocd/ + dist/ (the same bundle);
//                                     docker build -f deploy/argocd/Dockerfile
//                                       --build-arg BUNDLE=prebuilt - < it
//   vram-preflight-webhook-<v>.tgz    the webhook's Helm chart, its default image
//                                     pinned by digest to the webhook image below
//                                     (image.repository = <registry>/vram-preflight-webhook,
//                                     image.digest = sha256:…), and naming where it is
//                                     published (Chart.yaml's vram-preflight.io/chart,
//                                     which its README and NOTES quote); packaged by `helm package`
//   vram-preflight-webhook-<v>.tgz.prov
//                                     its provenance: the text `helm package --sign`
//                                     signs, signed by gpg as the plugin's is
//   vram-preflight-webhook-<v>.oci.tar  the webhook image, an OCI archive
//   vram-preflight-cmp-<v>.oci.tar      the Argo CD sidecar image, an OCI archive
//                                     (both by scripts/build-image.sh: reproducible)
//   vram-preflight-images.txt         each image as <registry>/<name>:<v>@<digest>
//   SHA256SUMS                        sha256sum format, every file above
//
// With --push, the images go to <registry> by digest (then tagged <v>), with
// skopeo, and the chart (with its .prov) to oci://<registry>/charts with helm:
//   helm install vram-preflight oci://<registry>/charts/vram-preflight-webhook --version <v>
// renders the released image, and `helm pull ... --verify` checks the chart
// against the release key. Log in first (`skopeo login`, `helm registry login`).
//
// Same commit (and the same Node.js/npm: the summary prints them), same
// bytes: every archive entry's mtime is SOURCE_DATE_EPOCH
// (default: the commit time of HEAD), owners and modes are fixed, entries
// sorted, gzip headers carry no time; the npm tarball is npm's own (fixed
// 1985 mtimes). The signature's creation time is part of the .prov: it is set
// (gpg --faked-system-time) to SOURCE_DATE_EPOCH, or to the signing key's
// creation time when the key is younger than the commit (gpg cannot sign
// before a key existed). EdDSA (ed25519) and RSA signatures are deterministic,
// so the .prov is byte-identical too; a DSA/ECDSA key signs with a random
// nonce and gives a different (equally valid) .prov each run.
//
// Options:
//   --key ID               gpg key (fingerprint, key id or user id) to sign with (required unless --no-sign)
//   --homedir DIR          gpg home directory (default: $GNUPGHOME or ~/.gnupg)
//   --passphrase-file F    the key's passphrase (default: gpg-agent asks; none for an unprotected key)
//   --out DIR              where to write (default: dist/release; emptied first)
//   --allow-dirty          release a checkout with uncommitted changes (not for publishing)
//   --no-sign              skip the .prov files and the key (Helm 4 then refuses the archive without --verify=false)
//   --registry PREFIX      where the images and the chart are published (default ghcr.io/vram-preflight):
//                          <PREFIX>/vram-preflight-webhook, <PREFIX>/vram-preflight-cmp, oci://<PREFIX>/charts
//   --push                 push the images (by digest) and the chart there
//   --plain-http           the registry speaks plain HTTP (a local registry)
//   --images-from DIR      take vram-preflight-webhook-<v>.oci.tar and vram-preflight-cmp-<v>.oci.tar
//                          from DIR (scripts/build-image.sh of this checkout) instead of building them
//                          (building needs buildah, as scripts/build-image.sh says)
//   --helm PATH            helm v4, which packages the chart (default .cache/helm/v4/helm: scripts/fetch-helm.sh)
//
// Helm 3 reads RSA keys only (golang.org/x/crypto/openpgp): sign with an RSA
// key for the chart to verify under Helm 3 too.
import { execFileSync, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { copyFileSync, cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse as parseYaml, stringify as stringifyYaml } from 'yaml';
import { chartReadme } from './chart-schema.mjs';
import { DIST_FILES, listTree, makeTarGz, packagePlugin, PLUGIN_NAME, PLUGIN_YAML_SOURCE, repoSource, root, sourceDateEpoch } from './package-plugin.mjs';

class UsageError extends Error {}

/** Where a release publishes its images and chart, unless --registry says otherwise. */
export const DEFAULT_REGISTRY = 'ghcr.io/vram-preflight';
const CHART_NAME = 'vram-preflight-webhook';
/** The images, by the target of scripts/build-image.sh. */
const IMAGES = [
  { target: 'webhook', name: 'vram-preflight-webhook' },
  { target: 'argocd-cmp', name: 'vram-preflight-cmp' },
];

export function parseArgs(argv) {
  const opts = {
    key: undefined,
    homedir: undefined,
    passphraseFile: undefined,
    out: path.join(root, 'dist/release'),
    allowDirty: false,
    sign: true,
    registry: DEFAULT_REGISTRY,
    push: false,
    plainHttp: false,
    imagesFrom: undefined,
    helm: path.join(root, '.cache/helm/v4/helm'),
  };
  const takes = { '--key': 'key', '--homedir': 'homedir', '--passphrase-file': 'passphraseFile', '--out': 'out', '--registry': 'registry', '--images-from': 'imagesFrom', '--helm': 'helm' };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const eq = a.indexOf('=');
    const name = eq > 0 ? a.slice(0, eq) : a;
    if (name in takes) {
      const v = eq > 0 ? a.slice(eq + 1) : argv[++i];
      if (v === undefined || v === '') throw new UsageError(`${name} needs a value`);
      opts[takes[name]] = v;
    } else if (a === '--allow-dirty') opts.allowDirty = true;
    else if (a === '--no-sign') opts.sign = false;
    else if (a === '--push') opts.push = true;
    else if (a === '--plain-http') opts.plainHttp = true;
    else throw new UsageError(`unknown argument ${a}`);
  }
  if (!/^[a-z0-9.-]+(:[0-9]+)?(\/[a-z0-9._-]+)*$/.test(opts.registry)) throw new UsageError(`--registry ${opts.registry} is not a registry host[:port][/path]`);
  if (opts.sign && !opts.key) throw new UsageError('--key <gpg key id> is required (or --no-sign for a trial run)');
  opts.out = path.resolve(opts.out);
  if (opts.imagesFrom) opts.imagesFrom = path.resolve(opts.imagesFrom);
  return opts;
}

function git(args) {
  return execFileSync('git', args, { cwd: root, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }).trim();
}

const sha256 = (buf) => createHash('sha256').update(buf).digest('hex');

// ---------------------------------------------------------------------------
// The provenance file, as `helm plugin package --sign` writes it
// (helm/helm v4.1.4 internal/plugin/sign.go + pkg/provenance/sign.go):
// yaml.Marshal(plugin metadata) + "\n...\n" + yaml.Marshal({files: {<archive name>: "sha256:<hex>"}}),
// clear-signed with SHA-512. Helm's verification reads only the files part
// (and the signature); the metadata is written the way Helm writes it: the
// Go struct field names, keys sorted, as sigs.k8s.io/yaml prints them.

function goPlatformCommands(list) {
  if (list === undefined || list === null) return null;
  return list.map((c) => ({
    Architecture: c.arch ?? '',
    Args: c.args ?? null,
    Command: c.command ?? '',
    OperatingSystem: c.os ?? '',
  }));
}

/** plugin.yaml (apiVersion v1, subprocess runtime) as Helm 4 marshals its Metadata into a .prov. */
export function helmProvenanceMetadata(pluginYamlText) {
  const m = parseYaml(pluginYamlText);
  if (m.apiVersion !== 'v1' || m.runtime !== 'subprocess') throw new Error('plugin.yaml: only apiVersion v1 with the subprocess runtime is supported here');
  const rc = m.runtimeConfig ?? {};
  const hooks = rc.platformHooks ? Object.fromEntries(Object.entries(rc.platformHooks).map(([k, v]) => [k, goPlatformCommands(v)])) : null;
  const meta = {
    APIVersion: m.apiVersion,
    Config: m.config ?? {},
    Name: m.name,
    Runtime: m.runtime,
    RuntimeConfig: {
      PlatformCommand: goPlatformCommands(rc.platformCommand),
      PlatformHooks: hooks,
      ProtocolCommands: goPlatformCommands(rc.protocolCommands),
    },
    SourceURL: m.sourceURL ?? '',
    Type: m.type,
    Version: String(m.version),
  };
  return stringifyYaml(meta, { sortMapEntries: true, indentSeq: false, lineWidth: 0, nullStr: 'null' });
}

export function provenanceMessage(pluginYamlText, archiveName, archiveData) {
  return `${helmProvenanceMetadata(pluginYamlText)}\n...\nfiles:\n  ${archiveName}: sha256:${sha256(archiveData)}\n`;
}

function gpgBase(opts) {
  const args = ['--batch', '--no-tty', '--yes'];
  if (opts.homedir) args.push('--homedir', opts.homedir);
  return args;
}

function gpg(opts, args, what) {
  const r = spawnSync('gpg', [...gpgBase(opts), ...args], { encoding: 'buffer', maxBuffer: 64 * 1024 * 1024 });
  if (r.error) throw new Error(`${what}: cannot run gpg (${r.error.message}); install GnuPG`);
  if (r.status !== 0) throw new Error(`${what}: gpg exited ${r.status}:\n${r.stderr.toString('utf8').trim()}`);
  return r.stdout;
}

/** Fingerprint, user ids and the newest creation time of the secret key and its signing subkeys. */
function signingKey(opts) {
  const lines = gpg(opts, ['--with-colons', '--fixed-list-mode', '--list-secret-keys', '--', opts.key], `the key ${opts.key}`).toString('utf8').split('\n');
  const primaries = lines.filter((l) => l.startsWith('sec:'));
  if (primaries.length !== 1) throw new Error(`--key ${opts.key} matches ${primaries.length} secret keys; give a fingerprint`);
  let fingerprint;
  let created = 0;
  const uids = [];
  let inKey = '';
  for (const l of lines) {
    const f = l.split(':');
    if (f[0] === 'sec' || f[0] === 'ssb') {
      inKey = f[0];
      if (f[0] === 'sec' || /s/.test(f[11] ?? '')) created = Math.max(created, Number(f[5]) || 0);
    } else if (f[0] === 'fpr' && inKey === 'sec' && !fingerprint) fingerprint = f[9];
    else if (f[0] === 'uid') uids.push(f[9]);
  }
  return { fingerprint, created, uids };
}

function sign(opts, fingerprint, message, provFile, signTime) {
  const work = mkdtempSync(path.join(tmpdir(), 'vram-preflight-sign-'));
  try {
    const msgFile = path.join(work, 'message');
    writeFileSync(msgFile, message);
    const args = ['--local-user', fingerprint, '--digest-algo', 'SHA512', '--faked-system-time', `${signTime}!`];
    if (opts.passphraseFile) args.push('--pinentry-mode', 'loopback', '--passphrase-file', opts.passphraseFile);
    args.push('--output', provFile, '--clearsign', msgFile);
    gpg(opts, args, 'signing the provenance file');
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
  // The same check Helm makes, with gpg: the signature is good and by this key.
  const r = spawnSync('gpg', [...gpgBase(opts), '--status-fd', '1', '--verify', provFile], { encoding: 'utf8' });
  if (r.status !== 0 || !/^\[GNUPG:\] VALIDSIG /m.test(r.stdout)) throw new Error(`gpg cannot verify the .prov it just wrote:\n${r.stderr}`);
}

// ---------------------------------------------------------------------------

function npmPack(stageDir, destDir, version) {
  const pkg = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8'));
  const pkgDir = path.join(stageDir, 'npm');
  mkdirSync(pkgDir, { recursive: true });
  copyFileSync(path.join(root, 'package.json'), path.join(pkgDir, 'package.json'));
  // "files" from the repository, except the bundle and its companions, which come from this build.
  const distPaths = new Set(DIST_FILES.map((f) => `dist/${f}`));
  for (const entry of pkg.files) {
    if (distPaths.has(entry) || entry === 'dist') continue;
    const from = path.join(root, repoSource(entry));
    if (!existsSync(from)) throw new Error(`package.json "files" lists ${entry}, which is not in the checkout`);
    cpSync(from, path.join(pkgDir, entry), { recursive: true });
  }
  mkdirSync(path.join(pkgDir, 'dist'), { recursive: true });
  for (const f of DIST_FILES) cpSync(path.join(stageDir, 'dist', f), path.join(pkgDir, 'dist', f));
  for (const f of DIST_FILES) {
    if (!pkg.files.includes(`dist/${f}`) && !pkg.files.includes('dist')) throw new Error(`package.json "files" must list dist/${f} (DIST_FILES)`);
  }
  const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm';
  const r = spawnSync(npm, ['pack', '--ignore-scripts', '--json', '--pack-destination', stageDir], {
    cwd: pkgDir,
    encoding: 'utf8',
    env: { ...process.env, npm_config_loglevel: 'error', npm_config_update_notifier: 'false', npm_config_fund: 'false', npm_config_audit: 'false' },
  });
  if (r.status !== 0) throw new Error(`npm pack failed:\n${r.stderr}`);
  const [info] = JSON.parse(r.stdout);
  const to = path.join(destDir, `${PLUGIN_NAME}-npm-${version}.tgz`);
  renameSync(path.join(stageDir, info.filename), to);
  return { file: to, files: info.files.map((f) => f.path).sort() };
}

/** deploy/argocd/ (as committed) + dist/ from this build, at the root of a .tar.gz: a docker build context. */
function argocdContext(stageDir, destDir, version, epoch) {
  const dir = path.join(root, 'deploy/argocd');
  const entries = [{ name: 'deploy', dir: true }, { name: 'deploy/argocd', dir: true }, ...listTree(dir, 'deploy/argocd'), { name: 'dist', dir: true }];
  for (const f of [...DIST_FILES].sort()) {
    const full = path.join(stageDir, 'dist', f);
    entries.push({ name: `dist/${f}`, data: readFileSync(full), mode: statSync(full).mode & 0o111 ? 0o755 : 0o644 });
  }
  const file = path.join(destDir, `${PLUGIN_NAME}-argocd-cmp-${version}.tar.gz`);
  writeFileSync(file, makeTarGz(entries, epoch));
  return { file, files: entries.filter((e) => !e.dir).map((e) => e.name) };
}

function run(command, args, what, options = {}) {
  const r = spawnSync(command, args, { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024, ...options });
  if (r.error) throw new Error(`${what}: cannot run ${command} (${r.error.message})`);
  if (r.status !== 0) throw new Error(`${what}: ${command} exited ${r.status}:\n${(r.stderr || r.stdout).trim()}`);
  return r.stdout;
}

/** The image archives: built here from the staged bundle (buildah), or taken from --images-from. */
function images(opts, stageDir, version) {
  return IMAGES.map(({ target, name }) => {
    const file = path.join(stageDir, `${name}-${version}.oci.tar`);
    if (opts.imagesFrom) {
      const from = path.join(opts.imagesFrom, `${name}-${version}.oci.tar`);
      if (!existsSync(from)) throw new UsageError(`--images-from ${opts.imagesFrom} has no ${path.basename(from)} (scripts/build-image.sh ${target} writes it)`);
      copyFileSync(from, file);
    } else {
      run('bash', [path.join(root, 'scripts/build-image.sh'), target], `building the ${name} image`, { cwd: root, env: { ...process.env, IMAGE_OUT: file, DIST_DIR: path.join(stageDir, 'dist') } });
    }
    const digest = run('skopeo', ['inspect', '--format', '{{.Digest}}', `oci-archive:${file}`], `reading the ${name} image's digest`).trim();
    if (!/^sha256:[0-9a-f]{64}$/.test(digest)) throw new Error(`${name}: skopeo gave the digest ${JSON.stringify(digest)}`);
    return { name, file, digest, repository: `${opts.registry}/${name}` };
  });
}

/**
 * The chart as released: deploy/webhook with its default image pinned to the
 * released webhook image (repository and digest in values.yaml), every file's
 * time the commit's, packaged by helm v4 (whose archive follows the files'
 * times: the same commit gives the same bytes). Signed: `helm package --sign`
 * writes the provenance text Helm checks; that text is signed again by gpg at
 * the release's fixed time (as the plugin's .prov), so that it is reproducible too.
 */
function packageChart(opts, stageDir, webhookImage, epoch, signing) {
  const chartDir = path.join(stageDir, 'chart', CHART_NAME);
  cpSync(path.join(root, 'deploy/webhook'), chartDir, { recursive: true });
  const valuesFile = path.join(chartDir, 'values.yaml');
  let values = readFileSync(valuesFile, 'utf8');
  const pins = [
    [/^  repository: .*$/m, `  repository: ${webhookImage.repository}`],
    [/^  digest: ""$/m, `  digest: "${webhookImage.digest}"`],
  ];
  for (const [line, pinned] of pins) {
    if (!line.test(values)) throw new Error(`deploy/webhook/values.yaml: no line ${line} under image: to pin`);
    values = values.replace(line, pinned);
  }
  writeFileSync(valuesFile, values);
  // Where this release publishes the chart: its NOTES and README name it, and the README's values table shows the pins.
  const chartFile = path.join(chartDir, 'Chart.yaml');
  const chartRef = /^  vram-preflight\.io\/chart: .*$/m;
  const meta = readFileSync(chartFile, 'utf8');
  if (!chartRef.test(meta)) throw new Error(`deploy/webhook/Chart.yaml: no annotation line ${chartRef} to set`);
  writeFileSync(chartFile, meta.replace(chartRef, `  vram-preflight.io/chart: oci://${opts.registry}/charts/${CHART_NAME}`));
  const readmeFile = path.join(chartDir, 'README.md');
  writeFileSync(readmeFile, chartReadme(readFileSync(readmeFile, 'utf8'), chartDir));
  const stamp = new Date(epoch * 1000);
  for (const entry of [chartDir, ...readdirSync(chartDir, { recursive: true }).map((f) => path.join(chartDir, f))]) utimesSync(entry, stamp, stamp);
  if (!existsSync(opts.helm)) throw new UsageError(`no helm at ${opts.helm}: run bash scripts/fetch-helm.sh, or give --helm PATH (helm v4)`);
  const helmOut = path.join(stageDir, 'chart-out');
  mkdirSync(helmOut);
  const env = { ...process.env, HELM_CONFIG_HOME: path.join(stageDir, 'helm/config'), HELM_CACHE_HOME: path.join(stageDir, 'helm/cache'), HELM_DATA_HOME: path.join(stageDir, 'helm/data') };
  const args = ['package', chartDir, '--destination', helmOut];
  // --key takes a user id (helm finds the key by name); the keyring holds the signing key alone.
  if (signing) args.push('--sign', '--key', signing.uid, '--keyring', signing.secring, ...(opts.passphraseFile ? ['--passphrase-file', opts.passphraseFile] : []));
  run(opts.helm, args, 'helm package', { env });
  const archive = path.join(helmOut, `${CHART_NAME}-${readFileSync(path.join(chartDir, 'Chart.yaml'), 'utf8').match(/^version: (\S+)$/m)[1]}.tgz`);
  if (!existsSync(archive)) throw new Error(`helm package wrote no ${path.basename(archive)}`);
  return { archive, helmProv: signing ? `${archive}.prov` : undefined };
}

/**
 * The text a clear-signed file signs (RFC 4880 section 7): the lines between the
 * armor headers' blank line and the signature, dash-escaping undone; the line
 * break before the signature belongs to the armor, not to the text.
 */
export function signedText(clearSigned) {
  const match = /^-----BEGIN PGP SIGNED MESSAGE-----\r?\n(?:[^\r\n]+\r?\n)*\r?\n([\s\S]*?)\r?\n-----BEGIN PGP SIGNATURE-----/.exec(clearSigned);
  if (!match) throw new Error('not a clear-signed message');
  return match[1].split('\n').map((line) => (line.startsWith('- ') ? line.slice(2) : line)).join('\n');
}

/** Images by digest, then the tag; the chart with its .prov. */
function push(opts, imageList, chartArchive, stageDir) {
  const tls = opts.plainHttp ? ['--dest-tls-verify=false'] : [];
  for (const image of imageList) {
    // By digest first: the registry must store exactly these bytes (skopeo fails if it cannot keep the digest).
    run('skopeo', ['copy', '--quiet', '--preserve-digests', ...tls, `oci-archive:${image.file}`, `docker://${image.repository}@${image.digest}`], `pushing ${image.name}`);
    run('skopeo', ['copy', '--quiet', '--preserve-digests', ...tls, `oci-archive:${image.file}`, `docker://${image.repository}:${image.tag}`], `tagging ${image.name}`);
    const pushed = run('skopeo', ['inspect', '--no-tags', '--format', '{{.Digest}}', ...(opts.plainHttp ? ['--tls-verify=false'] : []), `docker://${image.repository}:${image.tag}`], `checking ${image.name}`).trim();
    if (pushed !== image.digest) throw new Error(`${image.repository}:${image.tag} is ${pushed} in the registry, not ${image.digest}`);
  }
  const env = { ...process.env, HELM_CONFIG_HOME: process.env.HELM_CONFIG_HOME ?? path.join(stageDir, 'helm/config'), HELM_CACHE_HOME: path.join(stageDir, 'helm/cache'), HELM_DATA_HOME: path.join(stageDir, 'helm/data') };
  // helm push sends the .prov next to the archive as the chart's provenance layer.
  return run(opts.helm, ['push', chartArchive, `oci://${opts.registry}/charts`, ...(opts.plainHttp ? ['--plain-http'] : [])], 'helm push', { env });
}

export async function release(opts) {
  const commit = git(['rev-parse', 'HEAD']);
  const dirty = git(['status', '--porcelain', '--untracked-files=normal']);
  if (dirty && !opts.allowDirty) {
    throw new UsageError(`the checkout has uncommitted changes; a release is made from a clean checkout of one commit:\n${dirty}`);
  }
  const epoch = sourceDateEpoch();
  const key = opts.sign ? signingKey(opts) : undefined;
  if (opts.sign && !key.fingerprint) throw new Error(`no fingerprint found for --key ${opts.key}`);

  const stage = mkdtempSync(path.join(tmpdir(), 'vram-preflight-release-'));
  try {
    const stageDist = path.join(stage, 'dist');
    const { version, tgz } = await packagePlugin({ distDir: stageDist, quiet: true, epoch });

    rmSync(opts.out, { recursive: true, force: true });
    mkdirSync(opts.out, { recursive: true });
    const archiveName = path.basename(tgz);
    const archive = path.join(opts.out, archiveName);
    copyFileSync(tgz, archive);

    let signTime;
    if (opts.sign) {
      signTime = Math.max(epoch, key.created);
      const pluginYamlText = readFileSync(path.join(root, PLUGIN_YAML_SOURCE), 'utf8');
      sign(opts, key.fingerprint, provenanceMessage(pluginYamlText, archiveName, readFileSync(archive)), `${archive}.prov`, signTime);
      writeFileSync(path.join(opts.out, `${PLUGIN_NAME}-release-key.gpg`), gpg(opts, ['--export', '--', key.fingerprint], 'exporting the public key'));
    }
    const npm = npmPack(stage, opts.out, version);
    const argo = argocdContext(stage, opts.out, version, epoch);

    // The images, and the chart pinned to the webhook image.
    const imageList = images(opts, stage, version).map((image) => ({ ...image, tag: version }));
    let signing;
    if (opts.sign) {
      // helm package --sign reads a secret keyring file (gpg's legacy format); it lives only in the stage.
      const secring = path.join(stage, 'secring.gpg');
      const exportArgs = ['--export-secret-keys', '--', key.fingerprint];
      if (opts.passphraseFile) exportArgs.unshift('--pinentry-mode', 'loopback', '--passphrase-file', opts.passphraseFile);
      writeFileSync(secring, gpg(opts, exportArgs, 'exporting the signing key for helm package'), { mode: 0o600 });
      signing = { uid: key.uids[0], secring };
    }
    const chart = packageChart(opts, stage, imageList.find((i) => i.name === CHART_NAME), epoch, signing);
    const chartFile = path.join(opts.out, path.basename(chart.archive));
    copyFileSync(chart.archive, chartFile);
    if (signing) sign(opts, key.fingerprint, signedText(readFileSync(chart.helmProv, 'utf8')), `${chartFile}.prov`, signTime);
    for (const image of imageList) copyFileSync(image.file, path.join(opts.out, path.basename(image.file)));
    writeFileSync(path.join(opts.out, `${PLUGIN_NAME}-images.txt`), imageList.map((i) => `${i.repository}:${i.tag}@${i.digest}\n`).join(''));
    if (opts.push) push(opts, imageList.map((i) => ({ ...i, file: path.join(opts.out, path.basename(i.file)) })), chartFile, stage);

    const names = readdirSync(opts.out).sort();
    const sums = names.map((n) => `${sha256(readFileSync(path.join(opts.out, n)))}  ${n}\n`).join('');
    writeFileSync(path.join(opts.out, 'SHA256SUMS'), sums);
    const npmVersion = spawnSync(process.platform === 'win32' ? 'npm.cmd' : 'npm', ['--version'], { encoding: 'utf8' }).stdout.trim();
    const esbuildVersion = JSON.parse(readFileSync(path.join(root, 'node_modules/esbuild/package.json'), 'utf8')).version;
    return { version, commit, dirty: Boolean(dirty), epoch, signTime, key, out: opts.out, files: [...names, 'SHA256SUMS'], sums, npmFiles: npm.files, argocdFiles: argo.files, npmVersion, esbuildVersion, images: imageList, chart: `oci://${opts.registry}/charts/${CHART_NAME}`, pushed: opts.push };
  } finally {
    rmSync(stage, { recursive: true, force: true });
  }
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  let opts;
  try {
    opts = parseArgs(process.argv.slice(2));
  } catch (err) {
    process.stderr.write(`release: ${err.message}\nusage: npm run release -- --key <gpg key id> [--homedir DIR] [--passphrase-file FILE] [--out DIR] [--allow-dirty] [--no-sign] [--registry PREFIX] [--push] [--plain-http] [--images-from DIR] [--helm PATH]\n`);
    process.exit(2);
  }
  release(opts).then(
    (r) => {
      const out = process.stdout;
      out.write(`release: vram-preflight ${r.version} from ${r.commit}${r.dirty ? ' (UNCOMMITTED CHANGES: not for publishing)' : ''}\n`);
      out.write(`release: SOURCE_DATE_EPOCH=${r.epoch} (${new Date(r.epoch * 1000).toISOString()})\n`);
      // The bytes depend on these too (zlib comes with Node.js; esbuild is pinned by package-lock.json).
      out.write(`release: toolchain: node ${process.version} (zlib ${process.versions.zlib}), npm ${r.npmVersion}, esbuild ${r.esbuildVersion}\n`);
      if (r.key) out.write(`release: signed by ${r.key.uids.join(', ')} (fingerprint ${r.key.fingerprint}) at ${new Date(r.signTime * 1000).toISOString()}\n`);
      else out.write('release: NOT signed (--no-sign): Helm 4 refuses the archive without --verify=false\n');
      out.write(`release: ${path.relative(process.cwd(), r.out) || '.'}/\n`);
      for (const line of r.sums.trimEnd().split('\n')) out.write(`  ${line}\n`);
      out.write(`release: npm package: ${r.npmFiles.join(', ')}\n`);
      out.write(`release: Argo CD build context: ${r.argocdFiles.join(', ')}\n`);
      for (const image of r.images) out.write(`release: image ${image.repository}:${image.tag}@${image.digest}${r.pushed ? ' (pushed)' : ''}\n`);
      out.write(`release: chart ${r.chart} --version ${r.version}${r.pushed ? ' (pushed)' : ' (not pushed: --push)'}\n`);
    },
    (err) => {
      process.stderr.write(`release: ${err.message ?? err}\n`);
      process.exit(err instanceof UsageError ? 2 : 1);
    },
  );
}
