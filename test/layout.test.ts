/**
 * The layout is the architecture: one pure core, doors that call it (the CLI,
 * the webhook, the audit), edges that touch the world for the doors (registry,
 * config, kubernetes).
 * This test keeps the import directions true; tsconfig.core.json keeps Node
 * out of the core's types (npm run typecheck).
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

const ROOT = path.resolve(__dirname, '..');
const SRC = path.join(ROOT, 'src');

/** Top-level folders of src/ and what each may import (besides itself). */
const MAY_IMPORT: Record<string, readonly string[]> = {
  core: [],
  config: ['core'],
  registry: ['core'],
  kubernetes: ['core'],
  cli: ['core', 'config', 'registry'],
  webhook: ['core', 'config', 'registry', 'kubernetes'],
  audit: ['core', 'config', 'registry', 'kubernetes'],
  // verify reads the pod it restarts as the audit reads every pod; both are in one bundle (scripts/build.mjs).
  verify: ['core', 'config', 'registry', 'kubernetes', 'audit'],
};

/** Where one file may reach further, with why. The list only shrinks. */
// (None: `vram-preflight webhook` and `vram-preflight audit` are bundles of their own, which src/cli/bin.ts requires by path at run time.)
const EXCEPTIONS: readonly { from: string; to: string; why: string }[] = [];

/** The launcher runs before the application on every render: it may import only these. */
const LAUNCHER_IMPORTS = ['src/cli/process-io.ts', 'src/core/decide/target-words.ts'];

function filesUnder(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const full = path.join(dir, name);
    return statSync(full).isDirectory() ? filesUnder(full) : /\.(ts|js)$/.test(name) ? [full] : [];
  });
}

interface Import {
  file: string;
  spec: string;
  target?: string;
}

function importsOf(file: string): Import[] {
  const text = readFileSync(file, 'utf8');
  const found: Import[] = [];
  for (const [, spec] of text.matchAll(/(?:^|\s)(?:from|import)\s*\(?\s*'([^']+)'/gm)) {
    if (!spec) continue;
    const target = spec.startsWith('.') ? path.relative(ROOT, path.resolve(path.dirname(file), spec)).replace(/\.js$/, '.ts') : undefined;
    found.push({ file: path.relative(ROOT, file), spec, target });
  }
  return found;
}

const area = (repoPath: string): string => repoPath.split('/')[1] ?? '';
const all = filesUnder(SRC).flatMap(importsOf);

describe('layout: one core, several doors', () => {
  it('src/ holds only the known areas (and the published schemas)', () => {
    for (const name of readdirSync(SRC)) {
      if (name.endsWith('.schema.json')) continue;
      expect(Object.keys(MAY_IMPORT), `src/${name}`).toContain(name);
    }
  });

  it('the core imports no Node module, and nothing outside the core but the yaml package', () => {
    for (const imp of all.filter((i) => area(i.file) === 'core')) {
      if (imp.target) expect(area(imp.target), `${imp.file} → ${imp.spec}`).toBe('core');
      else expect(imp.spec, `${imp.file} → ${imp.spec}`).toBe('yaml');
    }
  });

  it('every import goes in an allowed direction', () => {
    for (const imp of all) {
      if (!imp.target || area(imp.target) === area(imp.file)) continue;
      if (EXCEPTIONS.some((e) => e.from === imp.file && e.to === imp.target)) continue;
      expect(MAY_IMPORT[area(imp.file)], `${imp.file} → ${imp.spec}`).toContain(area(imp.target));
    }
  });

  it('the launcher imports only what a pass-through needs', () => {
    const launcher = all.filter((i) => i.file === 'src/cli/launcher.ts');
    for (const imp of launcher) {
      if (imp.target) expect(LAUNCHER_IMPORTS, `launcher → ${imp.spec}`).toContain(imp.target);
      else expect(imp.spec, `launcher → ${imp.spec}`).toMatch(/^node:/);
    }
  });

  it('nothing imports the webhook, not even by import(): the CLI requires its own bundle (<launcher stem>.webhook.cjs) at run time, so a render never reads it', () => {
    const reaching = all.filter((i) => i.target?.startsWith('src/webhook/') && !i.file.startsWith('src/webhook/'));
    expect(reaching.map((i) => `${i.file} -> ${i.spec}`)).toEqual([]);
    const bin = readFileSync(path.join(SRC, 'cli/bin.ts'), 'utf8');
    // A path computed at run time (the launcher's directory + the name scripts/build.mjs gives), so esbuild bundles nothing.
    expect(bin).toMatch(/const file = join\(__dirname, __vram_preflight_webhook\)/);
    expect(bin).toMatch(/\brequire\(file\)/);
  });

  it('nothing imports the audit or verify, not even by import(), but verify the audit: the CLI requires their bundle (<launcher stem>.audit.cjs) at run time', () => {
    const reaching = all.filter((i) => (i.target?.startsWith('src/audit/') || i.target?.startsWith('src/verify/')) && !i.file.startsWith('src/audit/') && !i.file.startsWith('src/verify/'));
    expect(reaching.map((i) => `${i.file} -> ${i.spec}`)).toEqual([]);
    const bin = readFileSync(path.join(SRC, 'cli/bin.ts'), 'utf8');
    expect(bin).toMatch(/const file = join\(__dirname, __vram_preflight_audit\)/);
  });

  it('the registry client is loaded lazily (import()), never by a static import from a door', () => {
    for (const imp of all.filter((i) => i.target?.startsWith('src/registry/') && !i.file.startsWith('src/registry/'))) {
      const text = readFileSync(path.join(ROOT, imp.file), 'utf8');
      const statics = [...text.matchAll(/^import (?!type )[^;]*'([^']+)'/gm)].map((m) => m[1]);
      expect(statics, `${imp.file} imports the registry statically`).not.toContain(imp.spec);
    }
  });
});
