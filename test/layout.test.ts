/**
 * The layout is the architecture: one pure core, doors that call it (the CLI,
 * the webhook, the audit), edges that touch the world for the doors (registry,
 * config, kubernetes).
 * Inside the core, floors: the base, the stages, the decisions, the pipeline,
 * the reports, and the face (src/core/index.ts), through which the doors and
 * edges reach it.
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

/**
 * The core's floors, lowest first: a core file imports its own folder and lower floors only
 * (the root files of one floor count as one folder). So the base knows no stage, the stages
 * that read YAML, hold the tables and write the script know no decision, the decisions know
 * not the pipeline that runs them, and nothing inside the core imports its face.
 */
const CORE_FLOORS: readonly (readonly string[])[] = [
  ['values.ts', 'errors.ts', 'options.ts', 'version.ts', 'char-classes.ts', 'python-float.ts'], // the base
  ['yaml/', 'tables/', 'preflight/'], // stages that need only the base
  ['decide/'], // the decisions: which containers, which start, which utilization
  ['transform.ts', 'patch.ts', 'lookups.ts'], // the pipeline: a stream, one object, registry lookups around them
  ['report/'], // what a run is reported as
  ['index.ts'], // the face
];

/**
 * Outside the core, the core is reached through its face (src/core/index.ts) only, but where a
 * bundle needs a narrower door. The list only shrinks.
 */
const AROUND_THE_FACE: readonly { from: string; to: string; why: string }[] = [
  {
    from: 'src/cli/launcher.ts',
    to: 'src/core/decide/target-words.ts',
    why: 'the launcher runs before the application on every render and must not bundle the core (LAUNCHER_IMPORTS)',
  },
  {
    from: 'src/registry/index.ts',
    to: 'src/core/tables/image-ref.ts',
    why: "the registry is loaded lazily (import()): through the face, esbuild would wrap every module of the face in a lazy initialiser (+4 KiB, each core module's top level run through a call at every render)",
  },
];

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

  it("the core's files each stand on a floor, and import only their own folder and lower floors", () => {
    const floorOf = (repoPath: string): { floor: number; folder: string } => {
      const inCore = repoPath.slice('src/core/'.length);
      const folder = inCore.includes('/') ? `${inCore.split('/')[0]}/` : inCore;
      const floor = CORE_FLOORS.findIndex((names) => names.includes(folder));
      // The root files of a floor are one folder.
      return { floor, folder: folder.endsWith('/') ? folder : `floor ${floor}` };
    };
    const coreFiles = filesUnder(path.join(SRC, 'core')).map((f) => path.relative(ROOT, f));
    for (const file of coreFiles) expect(floorOf(file).floor, `${file} has no floor in CORE_FLOORS`).not.toBe(-1);
    const crossing = all.filter((i) => area(i.file) === 'core' && i.target && area(i.target) === 'core' && floorOf(i.file).folder !== floorOf(i.target).folder);
    expect(crossing.length).toBeGreaterThan(50);
    const upOrSideways = crossing.filter((i) => floorOf(i.target!).floor >= floorOf(i.file).floor);
    expect(upOrSideways.map((i) => `${i.file} -> ${i.spec}`)).toEqual([]);
  });

  it("outside the core, the core is reached through its face, src/core/index.ts", () => {
    const around = all.filter((i) => area(i.file) !== 'core' && i.target && area(i.target) === 'core' && i.target !== 'src/core/index.ts');
    const unexplained = around.filter((i) => !AROUND_THE_FACE.some((e) => e.from === i.file && e.to === i.target));
    expect(unexplained.map((i) => `${i.file} -> ${i.spec}`)).toEqual([]);
    // Each exception is still needed.
    for (const e of AROUND_THE_FACE) expect(around.some((i) => i.file === e.from && i.target === e.to), `${e.from} -> ${e.to}`).toBe(true);
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

  it('the registry client is loaded lazily (import()), never by a static import from a door; its options (src/registry/options.ts) may be, and load no Node module', () => {
    for (const imp of all.filter((i) => i.target?.startsWith('src/registry/') && !i.file.startsWith('src/registry/') && i.target !== 'src/registry/options.ts')) {
      const text = readFileSync(path.join(ROOT, imp.file), 'utf8');
      const statics = [...text.matchAll(/^import (?!type )[^;]*'([^']+)'/gm)].map((m) => m[1]);
      expect(statics, `${imp.file} imports the registry statically`).not.toContain(imp.spec);
    }
    // What src/registry/options.ts imports at run time: the core only (the registry's own types are erased).
    const options = readFileSync(path.join(SRC, 'registry/options.ts'), 'utf8');
    const runtime = [...options.matchAll(/^import (?!type )[^;']*'([^']+)'/gm)].map((m) => m[1]!);
    expect(runtime.filter((spec) => !spec.startsWith('../core/')), 'src/registry/options.ts imports at run time').toEqual([]);
  });
});
