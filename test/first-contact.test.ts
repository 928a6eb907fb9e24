/**
 * A new user's first minutes, from a fresh clone with the README's Node.js:
 * `npm ci` says nothing it need not (no dependency whose engines exclude the
 * Node.js it runs on, no install script npm has not been told about), and
 * `npm run example` fits a screen: a summary, then the lines that changed.
 * README says what the test command installs, that it needs root, and how
 * long it takes, as scripts/test.sh does it.
 */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

const ROOT = path.join(import.meta.dirname, '..');
const read = (rel: string) => readFileSync(path.join(ROOT, rel), 'utf8');
const pkg = JSON.parse(read('package.json')) as { engines: { node: string }; allowScripts?: Record<string, boolean> };
const lock = JSON.parse(read('package-lock.json')) as { packages: Record<string, { engines?: { node?: string } | string[]; hasInstallScript?: boolean; version?: string }> };

/** node-semver's range check, for the forms lockfiles hold: `||` of space-separated `>=`, `>`, `<`, `<=`, `^`, `~`, `=` or bare versions. */
export function satisfies(version: string, range: string): boolean {
  const v = version.replace(/^v/, '').split('.').map(Number) as [number, number, number];
  const cmp = (a: number[], b: number[]) => {
    for (let i = 0; i < 3; i++) if ((a[i] ?? 0) !== (b[i] ?? 0)) return (a[i] ?? 0) - (b[i] ?? 0);
    return 0;
  };
  const parse = (text: string) => text.split('.').map((p) => (p === 'x' || p === '*' ? 0 : Number(p)));
  return range.split('||').some((alternative) =>
    alternative
      .trim()
      .replace(/([<>=^~]+)\s+/g, '$1')
      .split(/\s+/)
      .filter((c) => c !== '')
      .every((comparator) => {
        const [, op = '', text = ''] = /^(>=|<=|>|<|\^|~|=)?(.*)$/.exec(comparator)!;
        const target = parse(text);
        const c = cmp(v, target);
        if (op === '>=') return c >= 0;
        if (op === '>') return c > 0;
        if (op === '<=') return c <= 0;
        if (op === '<') return c < 0;
        if (op === '^') return c >= 0 && (target[0]! > 0 ? v[0] === target[0] : v[1] === target[1]);
        if (op === '~') return c >= 0 && v[0] === target[0] && v[1] === (target[1] ?? v[1]);
        // A bare major (or major.minor) is a range of its own.
        return text.split('.').length < 3 ? v.slice(0, text.split('.').length).join('.') === text : c === 0;
      }),
  );
}

describe('npm ci on the README\'s Node.js says nothing it need not', () => {
  it('satisfies: the range forms of the lockfile', () => {
    expect(satisfies('20.20.2', '^20.19.0 || >=22.12.0')).toBe(true);
    expect(satisfies('20.18.0', '^20.19.0 || >=22.12.0')).toBe(false);
    expect(satisfies('20.20.2', '>=22')).toBe(false);
    expect(satisfies('20.20.2', '>= 14.6')).toBe(true);
    expect(satisfies('20.20.2', '^10 || ^12 || >=14')).toBe(true);
    expect(satisfies('20.20.2', '^20.0.0 || ^22.0.0 || >=24.0.0')).toBe(true);
  });

  it('no dependency in package-lock.json wants another Node.js than this one (EBADENGINE)', () => {
    // CI runs the README's Node.js, 20; package.json says so.
    expect(pkg.engines.node).toBe('>=20');
    expect(process.versions.node.split('.')[0]).toBe('20');
    const excluding = Object.entries(lock.packages)
      .map(([where, entry]) => ({ where, range: Array.isArray(entry.engines) ? undefined : entry.engines?.node }))
      .filter((e): e is { where: string; range: string } => e.range !== undefined && !satisfies(process.versions.node, e.range));
    expect(excluding).toEqual([]);
  });

  it('every dependency with an install script is one package.json allowScripts decides on (npm 11.16+ warns of the others)', () => {
    const withScripts = Object.entries(lock.packages)
      .filter(([, entry]) => entry.hasInstallScript)
      .map(([where]) => where.replace(/^.*node_modules\//, ''));
    expect(withScripts.length).toBeGreaterThan(0);
    for (const name of withScripts) expect(Object.keys(pkg.allowScripts ?? {}), name).toContain(name);
  });
});

describe('npm run example fits a screen', () => {
  const run = spawnSync(process.execPath, [path.join(ROOT, 'scripts/example.mjs')], { encoding: 'utf8' });
  const lines = run.stdout.trimEnd().split('\n');

  it('at most 40 lines of at most 100 characters, nothing on stderr', () => {
    expect(run.stderr).toBe('');
    expect(run.status).toBe(0);
    expect(lines.length).toBeLessThanOrEqual(40);
    for (const line of lines) expect([...line].length, line).toBeLessThanOrEqual(100);
  });

  it('a summary of the decisions, then the lines that changed, the preflight script and the start shortened', () => {
    expect(lines[1]).toMatch(/^\d+ documents, 2 containers that mention vLLM: 1 wrapped, 1 left alone\.$/);
    expect(run.stdout).toContain('Deployment/fixture-vllm-main, container model (lmcache/vllm-openai:v0.5.2): WRAPPED');
    expect(run.stdout).toContain('Job/fixture-vllm-seed, container seed (python:3.12-slim): left alone');
    expect(run.stdout).toMatch(/^ {2}\+ {12}- "\/bin\/sh"$/m);
    expect(run.stdout).toMatch(/^ {2}\+ {14}… \d+ more lines: the preflight script/m);
    expect(run.stdout).toMatch(/^ {2}\+ {12}- "--"$/m);
  });

  it("each container's reason in full, folded between words (none cut mid-word)", () => {
    const report = JSON.parse(
      spawnSync(process.execPath, [path.join(ROOT, 'dist/vram-preflight.cjs'), 'explain', '--output', 'json'], { input: read('fixtures/real/vllm.input.yaml'), encoding: 'utf8' }).stdout,
    ) as { containers: Array<{ reason: string }> };
    const summary = lines.slice(4, lines.indexOf('', 4));
    // The lines under each container's line (indented by 4) are its reason.
    const shown: string[] = [];
    for (const line of summary) {
      if (/^ {4}\S/.test(line)) shown[shown.length - 1] += ` ${line.trim()}`;
      else shown.push('');
    }
    expect(shown.map((s) => s.trim())).toEqual(report.containers.map((c) => c.reason.replace(/\s+/g, ' ')));
    expect(summary.join('\n')).not.toContain('…');
  });
});

describe('README on the test command', () => {
  const readme = read('README.md');
  const testSh = read('scripts/test.sh');

  it('names every Debian package scripts/test.sh installs, and that it needs root', () => {
    const section = readme.slice(readme.indexOf('./scripts/test.sh'), readme.indexOf('## Use'));
    const listed = testSh.slice(testSh.indexOf('packages=('), testSh.indexOf(')', testSh.indexOf('packages=(')));
    const installed = [...new Set([...listed.matchAll(/:([\w.-]+)/g)].map((m) => m[1]!)), 'python3-jsonpatch'];
    expect(installed.length).toBeGreaterThan(15);
    for (const name of installed) expect(section, name).toContain(name);
    expect(section).toMatch(/as root/);
    expect(section).toMatch(/about \d+ minutes/);
  });
});
