#!/usr/bin/env node
// Bundles src/bin.ts (and everything it imports: yaml, ajv, src/*.json) into
// ONE self-contained CommonJS file, dist/vram-preflight.cjs, that runs with
// plain `node` and needs no node_modules. Used by `npm run build`, by
// scripts/package-plugin.mjs and by the e2e tests.
//
//   node scripts/build.mjs                 build dist/vram-preflight.cjs
//   node scripts/build.mjs --analyze       also print what the bundle is made of
//   node scripts/build.mjs --outfile FILE  build elsewhere (the e2e tests build
//                                          into temp dirs so they never race dist/)
import { build } from 'esbuild';
import { chmodSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { builtinModules } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const entry = path.join(root, 'src/bin.ts');
const defaultOutfile = path.join(root, 'dist/vram-preflight.cjs');

function argValue(name) {
  const i = process.argv.findIndex((a) => a === name || a.startsWith(`${name}=`));
  if (i === -1) return undefined;
  const a = process.argv[i];
  return a.includes('=') ? a.slice(a.indexOf('=') + 1) : process.argv[i + 1];
}

export async function buildBundle({ outfile = defaultOutfile, quiet = false, analyze = false } = {}) {
  outfile = path.resolve(outfile);
  mkdirSync(path.dirname(outfile), { recursive: true });
  const entryText = readFileSync(entry, 'utf8');
  const hasShebang = entryText.startsWith('#!');
  const result = await build({
    absWorkingDir: root,
    entryPoints: [entry],
    outfile,
    bundle: true,
    platform: 'node',
    target: 'node20',
    format: 'cjs',
    minify: true,
    // Keep class/function names: error messages and stack traces stay readable.
    keepNames: true,
    legalComments: 'eof',
    sourcemap: false,
    metafile: true,
    logLevel: 'silent',
    // esbuild keeps an entry's own shebang (and puts it first); add one only
    // when src/bin.ts has none. ESM source compiled to CJS: `import.meta.url`
    // has no CJS meaning, so map it to the bundle's own file URL.
    banner: {
      js: `${hasShebang ? '' : '#!/usr/bin/env node\n'}var __vram_preflight_import_meta_url=require("url").pathToFileURL(__filename).href;`,
    },
    define: { 'import.meta.url': '__vram_preflight_import_meta_url' },
    loader: { '.json': 'json' },
  });
  for (const w of result.warnings) {
    if (!quiet) process.stderr.write(`build: warning: ${w.text}${w.location ? ` (${w.location.file}:${w.location.line})` : ''}\n`);
  }

  // Self-containment check: the bundle may only require Node's built-ins.
  const builtins = new Set([...builtinModules, ...builtinModules.map((m) => `node:${m}`)]);
  const external = Object.values(result.metafile.outputs)
    .flatMap((o) => o.imports)
    .filter((i) => i.external && !builtins.has(i.path))
    .map((i) => i.path);
  if (external.length > 0) {
    throw new Error(`bundle is not self-contained, it requires: ${[...new Set(external)].join(', ')}`);
  }

  const text = readFileSync(outfile, 'utf8');
  if (!text.startsWith('#!/usr/bin/env node\n')) {
    writeFileSync(outfile, `#!/usr/bin/env node\n${text.replace(/^#![^\n]*\n/, '')}`);
  }
  chmodSync(outfile, 0o755);
  const size = statSync(outfile).size;
  if (!quiet) {
    process.stdout.write(`build: ${path.relative(root, outfile)} ${(size / 1024).toFixed(1)} KiB\n`);
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
  return { outfile, size };
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  buildBundle({ outfile: argValue('--outfile') ?? defaultOutfile, analyze: process.argv.includes('--analyze') }).catch((err) => {
    process.stderr.write(`build: ${err.message ?? err}\n`);
    if (err.errors) for (const e of err.errors) process.stderr.write(`  ${e.text}${e.location ? ` (${e.location.file}:${e.location.line})` : ''}\n`);
    process.exit(1);
  });
}
