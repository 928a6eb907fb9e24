#!/usr/bin/env node
// Bundles src/cli/bin.ts (and everything it imports: yaml, src/*.json) into
// self-contained files that run with plain `node` and need no node_modules:
//
//   dist/vram-preflight.cjs         the launcher (src/cli/launcher.ts): the file to run
//                                   (package.json "bin", plugin.yaml, the Argo CD image)
//   dist/vram-preflight.app.js      the application, which the launcher reads and
//                                   compiles with a V8 code cache kept next to it
//                                   (see src/cli/launcher.ts); never run by itself
//   dist/vram-preflight.webhook.cjs the webhook door (src/webhook/main.ts), a plain
//                                   CommonJS module (.cjs: in a "type": "module"
//                                   package Node loads a .js as ESM), with its
//                                   own copy of what it needs (core, config, registry,
//                                   yaml); the application requires it for
//                                   `vram-preflight webhook` only, so that a render
//                                   never reads or compiles the webhook's code
//   dist/vram-preflight.audit.cjs   the doors that read a cluster, built and required the
//                                   same way: the audit (src/audit/main.ts, `vram-preflight
//                                   audit`) and verify (src/verify/main.ts, `vram-preflight
//                                   verify`), in one file: verify reads a pod with the
//                                   audit's code and both use the Kubernetes client, so a
//                                   file of its own would hold a second copy of nearly all
//                                   of it, and every artifact one more file to ship
//
// They are one build: every artifact that runs the webhook or the audit ships all
// four side by side (DIST_FILES in scripts/package-plugin.mjs; the Argo CD image,
// which runs neither, ships the first two). The application is pure ASCII (checked
// here) so that the launcher reads it as latin1: no UTF-8 decoding, and V8
// gets a one-byte string. Used by `npm run build`, by
// scripts/package-plugin.mjs and by the e2e tests.
//
//   node scripts/build.mjs                 build dist/vram-preflight.cjs (+ .app.js, .webhook.cjs, .audit.cjs)
//   node scripts/build.mjs --analyze       also print what the bundle is made of
//   node scripts/build.mjs --outfile FILE  build elsewhere (the e2e tests build
//                                          into temp dirs so they never race dist/);
//                                          the application goes next to FILE
import { build } from 'esbuild';
import { createHash } from 'node:crypto';
import { chmodSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { builtinModules } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const entry = path.join(root, 'src/cli/bin.ts');
const launcherEntry = path.join(root, 'src/cli/launcher.ts');
const webhookEntry = path.join(root, 'src/webhook/main.ts');
const auditEntry = path.join(root, 'src/audit/main.ts');
const verifyEntry = path.join(root, 'src/verify/main.ts');
/** The cluster doors' bundle exports both commands (src/cli/bin.ts calls runAudit or runVerify). */
const clusterDoors = {
  contents: `export { runAudit } from ${JSON.stringify(auditEntry)};\nexport { runVerify } from ${JSON.stringify(verifyEntry)};\n`,
  resolveDir: root,
  sourcefile: 'cluster-doors.ts',
  loader: 'ts',
};

/**
 * Strings only the webhook's code holds (its flags, what it serves): found in
 * the application, they mean the webhook was bundled into it again (an import
 * of src/webhook/ from the CLI), and every render would pay for compiling it.
 */
export const WEBHOOK_ONLY_MARKERS = ['--tls-cert-file', 'AdmissionReview', '/healthz'];
/** The same for the audit, verify and the Kubernetes API client they alone use (src/audit/, src/verify/, src/kubernetes/). */
export const AUDIT_ONLY_MARKERS = ['--webhook-configuration', 'mutatingwebhookconfigurations', 'ExecCredential', 'selfsubjectaccessreviews', 'v5.channel.k8s.io'];
const defaultOutfile = path.join(root, 'dist/vram-preflight.cjs');

function argValue(name) {
  const i = process.argv.findIndex((a) => a === name || a.startsWith(`${name}=`));
  if (i === -1) return undefined;
  const a = process.argv[i];
  return a.includes('=') ? a.slice(a.indexOf('=') + 1) : process.argv[i + 1];
}

// `yaml` is bundled from its ES module build (what its package.json exports
// to browsers): esbuild can tree-shake it (~23 KiB less) and its module
// initialisation costs ~1 ms instead of ~13 ms for the CommonJS build. The two
// builds differ only where Node has an API a browser lacks; those two files
// are given their Node behaviour back, so the bundle behaves as the CommonJS
// build does: warnings through process.emitWarning (not console.warn), and
// !!binary through Buffer. The patches must apply, or the build fails.
const yamlDir = path.join(root, 'node_modules/yaml');
const yamlNodeBehaviour = {
  name: 'yaml-esm-with-node-behaviour',
  setup(b) {
    b.onResolve({ filter: /^yaml$/ }, () => ({ path: path.join(yamlDir, 'browser/index.js') }));
    b.onLoad({ filter: /[\\/]node_modules[\\/]yaml[\\/]browser[\\/]dist[\\/](log|schema[\\/]yaml-1\.1[\\/]binary)\.js$/ }, ({ path: file }) => {
      let text = readFileSync(file, 'utf8');
      const patch = (from, to) => {
        if (!text.includes(from)) throw new Error(`yaml ${yamlVersion()}: ${path.relative(yamlDir, file)} changed; cannot restore its Node behaviour (update scripts/build.mjs)`);
        text = text.replace(from, to);
      };
      if (file.endsWith('log.js')) {
        patch('console.warn(warning);', "if (typeof process !== 'undefined' && typeof process.emitWarning === 'function') process.emitWarning(warning); else console.warn(warning);");
      } else {
        patch("if (typeof atob === 'function') {", "if (typeof Buffer === 'function') { return Buffer.from(src, 'base64'); } else if (typeof atob === 'function') {");
        patch("if (typeof btoa === 'function') {", "if (typeof Buffer === 'function') { str = buf instanceof Buffer ? buf.toString('base64') : Buffer.from(buf.buffer).toString('base64'); } else if (typeof btoa === 'function') {");
      }
      return { contents: text, loader: 'js' };
    });
  },
};
/** The application's first line (src/cli/launcher.ts checks it). */
export const appHeader = (hash) => `/* vram-preflight application, build ${hash} */\n`;

const yamlVersion = () => JSON.parse(readFileSync(path.join(yamlDir, 'package.json'), 'utf8')).version;

/**
 * The application: src/cli/bin.ts and what it imports, as the body of a CommonJS
 * module function. Written by buildBundle, wrapped, next to the launcher
 * (src/cli/launcher.ts), which compiles it with a V8 code cache.
 */
async function buildApp({ entryPoint = entry, stdin, outName = 'app.cjs', webhookName, auditName }) {
  const result = await build({
    absWorkingDir: root,
    ...(stdin ? { stdin } : { entryPoints: [entryPoint] }),
    write: false,
    outfile: path.join(root, 'dist', outName),
    bundle: true,
    platform: 'node',
    target: 'node20',
    format: 'cjs',
    minify: true,
    // No keepNames: it costs start-up time, and no message depends on a
    // class or function name (PreflightError and yaml's errors set .name).
    legalComments: 'eof',
    sourcemap: false,
    metafile: true,
    logLevel: 'silent',
    plugins: [yamlNodeBehaviour],
    // The launcher compiles the app with vm.Script, which has no loader for a real import():
    // lazy loads (the registry client, node: built-ins) become require() calls.
    supported: { 'dynamic-import': false },
    // ESM source compiled to CJS: `import.meta.url` has no CJS meaning, so map
    // it to the bundle's own file URL; computed on first use (node:url's
    // pathToFileURL costs ~0.7 ms of start-up, and nothing uses it today).
    banner: { js: 'var __vram_preflight_import_meta={get url(){return require("url").pathToFileURL(__filename).href}};' },
    // src/cli/bin.ts: the webhook's and the audit's file names, beside the launcher (as the application's, fixed at build).
    define: {
      'import.meta.url': '__vram_preflight_import_meta.url',
      ...(webhookName && { __vram_preflight_webhook: JSON.stringify(webhookName) }),
      ...(auditName && { __vram_preflight_audit: JSON.stringify(auditName) }),
    },
    loader: { '.json': 'json' },
  });
  return result;
}

async function buildLauncher() {
  const result = await build({
    absWorkingDir: root,
    entryPoints: [launcherEntry],
    write: false,
    outfile: path.join(root, 'dist/launcher.cjs'),
    bundle: true,
    platform: 'node',
    target: 'node20',
    format: 'cjs',
    minify: true,
    legalComments: 'none',
    metafile: true,
    logLevel: 'silent',
  });
  return result;
}

/** The application's file name for a launcher named `launcherName`: same stem, `.app.js`. */
export function appFileName(launcherName) {
  return `${launcherName.replace(/\.c?js$/, '')}.app.js`;
}

/** The webhook's file name for a launcher named `launcherName`: same stem, `.webhook.cjs` (given to src/cli/bin.ts). */
export function webhookFileName(launcherName) {
  return `${launcherName.replace(/\.c?js$/, '')}.webhook.cjs`;
}

/** The audit's file name for a launcher named `launcherName`: same stem, `.audit.cjs` (given to src/cli/bin.ts). */
export function auditFileName(launcherName) {
  return `${launcherName.replace(/\.c?js$/, '')}.audit.cjs`;
}

export async function buildBundle({ outfile = defaultOutfile, quiet = false, analyze = false } = {}) {
  outfile = path.resolve(outfile);
  const appName = appFileName(path.basename(outfile));
  const appfile = path.join(path.dirname(outfile), appName);
  const webhookName = webhookFileName(path.basename(outfile));
  const webhookfile = path.join(path.dirname(outfile), webhookName);
  const auditName = auditFileName(path.basename(outfile));
  const auditfile = path.join(path.dirname(outfile), auditName);
  mkdirSync(path.dirname(outfile), { recursive: true });
  const [result, launcher, webhook, audit] = await Promise.all([
    buildApp({ webhookName, auditName }),
    buildLauncher(),
    buildApp({ entryPoint: webhookEntry, outName: 'webhook.cjs' }),
    buildApp({ stdin: clusterDoors, outName: 'audit.cjs' }),
  ]);
  const app = result.outputFiles[0].text.replace(/^#![^\n]*\n/, '');
  const webhookMarker = WEBHOOK_ONLY_MARKERS.find((m) => app.includes(m));
  if (webhookMarker !== undefined) {
    throw new Error(`the application holds the webhook's code ("${webhookMarker}"): src/cli/ must reach src/webhook/ only through ${path.basename(webhookfile)}, required at run time`);
  }
  const auditMarker = AUDIT_ONLY_MARKERS.find((m) => app.includes(m));
  if (auditMarker !== undefined) {
    throw new Error(`the application holds the audit's code ("${auditMarker}"): src/cli/ must reach src/audit/ only through ${path.basename(auditfile)}, required at run time`);
  }
  // Wrapped as Node wraps a CommonJS module; the launcher calls it.
  const source = `(function (exports, require, module, __filename, __dirname) {${app}\n})`;
  const hash = createHash('sha256').update(source).digest('hex').slice(0, 16);
  // The launcher reads the application as latin1, which is exact only for ASCII
  // (esbuild's default charset escapes everything else; a comment or a plugin could not).
  const nonAscii = /[^\x00-\x7f]/.exec(source);
  if (nonAscii) {
    throw new Error(`the application is not pure ASCII (U+${nonAscii[0].codePointAt(0).toString(16).toUpperCase().padStart(4, '0')} near "${source.slice(Math.max(0, nonAscii.index - 40), nonAscii.index + 10)}"): the launcher reads it as latin1`);
  }
  // The first line names the build: the launcher checks it, so that an
  // application of another build (whose code cache could be taken for its
  // own, V8 checking only the source's length) is refused, not run.
  const appText = `${appHeader(hash)}${source}`;
  const text =
    '#!/usr/bin/env node\n' +
    // Before anything else, in syntax any Node parses: an old Node says so plainly (Helm 3, npm, Argo CD run
    // the bundle directly; the Helm 4 plugin checks earlier, bin/node-version-guard.cjs).
    'if(!(+process.versions.node.split(".")[0]>=20)){process.stderr.write("vram-preflight: Node.js 20 or newer is needed; this is Node.js "+process.version+" ("+process.execPath+")\\n");process.exit(1)}\n' +
    `var __vram_preflight_hash=${JSON.stringify(hash)},__vram_preflight_app=${JSON.stringify(appName)};\n` +
    launcher.outputFiles[0].text;
  for (const w of [...result.warnings, ...webhook.warnings, ...audit.warnings]) {
    if (!quiet) process.stderr.write(`build: warning: ${w.text}${w.location ? ` (${w.location.file}:${w.location.line})` : ''}\n`);
  }

  // Self-containment check: the bundle may only require Node's built-ins.
  const builtins = new Set([...builtinModules, ...builtinModules.map((m) => `node:${m}`)]);
  const external = [result, launcher, webhook, audit]
    .flatMap((r) => Object.values(r.metafile.outputs))
    .flatMap((o) => o.imports)
    .filter((i) => i.external && !builtins.has(i.path))
    .map((i) => i.path);
  if (external.length > 0) {
    throw new Error(`bundle is not self-contained, it requires: ${[...new Set(external)].join(', ')}`);
  }

  // The application first: a launcher never names an application not yet written.
  writeFileSync(appfile, appText, 'latin1');
  chmodSync(appfile, 0o644);
  writeFileSync(webhookfile, webhook.outputFiles[0].text.replace(/^#![^\n]*\n/, ''));
  chmodSync(webhookfile, 0o644);
  writeFileSync(auditfile, audit.outputFiles[0].text.replace(/^#![^\n]*\n/, ''));
  chmodSync(auditfile, 0o644);
  writeFileSync(outfile, text);
  chmodSync(outfile, 0o755);
  // Code caches of earlier builds at this path (src/cli/launcher.ts names them
  // <name>.<hash16>.node-….v8cache) can never be used again.
  const stem = path.basename(outfile).replace(/\.c?js$/, '');
  for (const f of readdirSync(path.dirname(outfile))) {
    if (f.startsWith(`${stem}.`) && f.endsWith('.v8cache') && !f.startsWith(`${stem}.${hash}.`)) rmSync(path.join(path.dirname(outfile), f), { force: true });
  }
  const size = statSync(outfile).size + statSync(appfile).size;
  if (!quiet) {
    process.stdout.write(
      `build: ${path.relative(root, outfile)} ${(statSync(outfile).size / 1024).toFixed(1)} KiB + ${path.relative(root, appfile)} ${(statSync(appfile).size / 1024).toFixed(1)} KiB` +
        ` (+ ${path.relative(root, webhookfile)} ${(statSync(webhookfile).size / 1024).toFixed(1)} KiB, for \`webhook\` only;` +
        ` ${path.relative(root, auditfile)} ${(statSync(auditfile).size / 1024).toFixed(1)} KiB, for \`audit\` and \`verify\` only)\n`,
    );
  }
  if (analyze) {
    const inputs = Object.values(result.metafile.outputs)[0].inputs;
    const byPackage = new Map();
    for (const [file, info] of Object.entries(inputs)) {
      const m = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(file);
      const key = m ? m[1] : file.startsWith('src/') ? 'src/' : file;
      byPackage.set(key, (byPackage.get(key) ?? 0) + info.bytesInOutput);
    }
    for (const [k, v] of [...byPackage].sort((a, b) => b[1] - a[1])) {
      process.stdout.write(`  ${(v / 1024).toFixed(1).padStart(8)} KiB  ${k}\n`);
    }
  }
  return { outfile, appfile, webhookfile, auditfile, size, hash };
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  buildBundle({ outfile: argValue('--outfile') ?? defaultOutfile, analyze: process.argv.includes('--analyze') }).catch((err) => {
    process.stderr.write(`build: ${err.message ?? err}\n`);
    if (err.errors) for (const e of err.errors) process.stderr.write(`  ${e.text}${e.location ? ` (${e.location.file}:${e.location.line})` : ''}\n`);
    process.exit(1);
  });
}
