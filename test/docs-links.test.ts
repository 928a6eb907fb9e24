/**
 * Every link in the documentation leads somewhere: a relative link (or a link
 * to this repository on GitHub) names a file that exists, and its #anchor a
 * heading of that file, as GitHub makes anchors of headings; a "file.md §N"
 * reference names a section N that the file has; no issue of this project is
 * cited by number. For README.md, CHANGELOG.md, docs/ and the webhook chart's
 * README; and the last two for the tests' own code too (test/), which names the
 * docs section a case comes from, never an issue.
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

const ROOT = path.join(import.meta.dirname, '..');
const REPOSITORY = 'https://github.com/vram-preflight/vram-preflight/blob/';

const markdown = (dir: string): string[] =>
  (readdirSync(path.join(ROOT, dir), { recursive: true }) as string[]).filter((f) => f.endsWith('.md')).map((f) => path.join(dir, f));
const FILES = ['README.md', 'CHANGELOG.md', 'deploy/webhook/README.md', ...markdown('docs')];
/** The tests' code: not the charts and Go modules they hold, nor the GPU runs' recorded output. */
const TEST_CODE = (readdirSync(path.join(ROOT, 'test'), { recursive: true }) as string[])
  .filter((f) => /\.(ts|mjs|py|sh)$/.test(f) && !/^(charts|cluster)\/|^gpu\/(results|out)\//.test(f))
  .map((f) => path.join('test', f));

/** The text outside fenced code blocks and inline code (a link shown as code is no link). */
function prose(text: string): string {
  return text.replace(/^```[\s\S]*?^```/gm, '').replace(/`[^`\n]*`/g, '');
}

/** GitHub's anchors of a file's headings (github-slugger: lower case, punctuation dropped, spaces to -, repeats numbered). */
export function anchors(text: string): Set<string> {
  const seen = new Map<string, number>();
  const result = new Set<string>();
  for (const [, heading] of text.replace(/^```[\s\S]*?^```/gm, '').matchAll(/^#{1,6}\s+(.+?)\s*#*\s*$/gm)) {
    const base = heading!
      .replace(/\[([^\]]*)\]\([^)]*\)/g, '$1')
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\p{M}\s_-]/gu, '')
      .replace(/ /g, '-');
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    result.add(n === 0 ? base : `${base}-${n}`);
  }
  return result;
}

interface Link {
  file: string;
  target: string;
}

function links(file: string): Link[] {
  const text = prose(readFileSync(path.join(ROOT, file), 'utf8'));
  return [...text.matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)].map((m) => ({ file, target: m[1]! }));
}

/** The repository path and anchor a link leads to; undefined for a link outside the repository. */
function resolve(link: Link): { file: string; anchor?: string } | undefined {
  let target = link.target;
  if (target.startsWith(REPOSITORY)) target = `/${target.slice(REPOSITORY.length).split('/').slice(1).join('/')}`;
  else if (/^[a-z][a-z0-9+.-]*:/i.test(target)) return undefined;
  const [where, anchor] = target.split('#') as [string, string | undefined];
  const file = where === '' ? link.file : where.startsWith('/') ? where.slice(1) : path.normalize(path.join(path.dirname(link.file), where));
  return { file, anchor };
}

describe('documentation links', () => {
  const all = FILES.flatMap(links);

  it('there are links to check', () => {
    expect(all.length).toBeGreaterThan(80);
    expect(all.filter((l) => l.target.includes('#')).length).toBeGreaterThan(15);
  });

  it.each(FILES)('%s: every link to a file of the repository names one that exists', (file) => {
    const broken = links(file).flatMap((link) => {
      const to = resolve(link);
      return to && !existsSync(path.join(ROOT, to.file)) ? [`${link.target} (no ${to.file})`] : [];
    });
    expect(broken).toEqual([]);
  });

  it.each(FILES)('%s: every #anchor names a heading of its file', (file) => {
    const broken = links(file).flatMap((link) => {
      const to = resolve(link);
      if (!to?.anchor || !to.file.endsWith('.md') || !existsSync(path.join(ROOT, to.file)) || statSync(path.join(ROOT, to.file)).isDirectory()) return [];
      const known = anchors(readFileSync(path.join(ROOT, to.file), 'utf8'));
      return known.has(to.anchor) ? [] : [`${link.target} (${to.file} has no heading #${to.anchor})`];
    });
    expect(broken).toEqual([]);
  });

  it.each([...FILES, ...TEST_CODE])('%s: every "file.md §N" names a section N of that file', (file) => {
    const text = prose(readFileSync(path.join(ROOT, file), 'utf8'));
    const broken = [...text.matchAll(/([\w./-]+\.md)\)?\s+§(\d+)/g)].flatMap(([whole, target, n]) => {
      const name = target!.replace(/^.*\(/, '');
      const to = path.normalize(path.join(path.dirname(file), name));
      const candidates = [to, path.join('docs', path.basename(name))].filter((p) => existsSync(path.join(ROOT, p)));
      if (candidates.length === 0) return [`${whole} (no ${name})`];
      const headings = readFileSync(path.join(ROOT, candidates[0]!), 'utf8');
      return new RegExp(`^#{2,3} ${n}\\. `, 'm').test(headings) ? [] : [`${whole} (${candidates[0]} has no section ${n})`];
    });
    expect(broken).toEqual([]);
  });

  it.each([...FILES, ...TEST_CODE])('%s: cites no issue of this project by number (a reader cannot follow it; other projects\' owner/repo#N are links of their own)', (file) => {
    const text = readFileSync(path.join(ROOT, file), 'utf8');
    const cited = [...(file.endsWith('.md') ? prose(text) : text).matchAll(/\b(?:issues?|task) #?\d+/gi)].map((m) => m[0]);
    expect(cited).toEqual([]);
  });

  it('the tests\' code is read too', () => {
    expect(TEST_CODE.length).toBeGreaterThan(80);
    expect(TEST_CODE).toContain('test/gpu/proof.py');
    expect(TEST_CODE).toContain('test/docs-links.test.ts');
  });

  it('anchors: as GitHub makes them', () => {
    expect([...anchors('## 8. Per-workload control\n## Air-gapped CI: `vram-preflight resolve IMAGE…`\n## Run of 2026-12-04 04:28 UTC: the 0.3.0 script\n## A\n## A\n')]).toEqual([
      '8-per-workload-control',
      'air-gapped-ci-vram-preflight-resolve-image',
      'run-of-2026-12-04-0428-utc-the-030-script',
      'a',
      'a-1',
    ]);
  });
});
