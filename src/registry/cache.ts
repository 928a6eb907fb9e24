/**
 * The lookup cache on disk:
 *   configs/sha256-<hex>.json        what a manifest digest runs, per platform (immutable)
 *   tags/<registry>/<repo>/<tag>.json  {digest, checkedAt}: what a tag pointed at, and when
 * Every write is temp file + rename. A cache that cannot be written is a
 * warning, never a failure (Argo CD's repo-server may have a read-only HOME).
 */
import type { Env } from './http.js';

export interface ImageStart {
  entrypoint: string[];
  cmd: string[];
  /** The platform of the image that was read, e.g. linux/arm64/v8. */
  platform: string;
  /** The digest of the image manifest (inside an index, the chosen entry). */
  manifest: string;
}

export interface CachedConfig {
  /** The digest this file is named after: what the reference resolved to. */
  digest: string;
  /** A single image manifest: its start, whatever platform is asked for. */
  image?: ImageStart;
  /** An index or manifest list: the start per requested platform. */
  platforms?: Record<string, ImageStart>;
}

export interface CachedTag {
  digest: string;
  checkedAt: string;
}

export function defaultCacheDir(env: Env, homedir: () => string): string {
  if (env.XDG_CACHE_HOME) return `${env.XDG_CACHE_HOME.replace(/\/+$/, '')}/vram-preflight`;
  return `${env.HOME ?? homedir()}/.cache/vram-preflight`;
}

function safeSegment(s: string): string {
  const cleaned = s.replace(/[^A-Za-z0-9._:-]/g, (c) => `%${c.charCodeAt(0).toString(16).padStart(2, '0')}`);
  return cleaned === '.' || cleaned === '..' || cleaned === '' ? `%2e${cleaned}` : cleaned;
}

function isStringArray(v: unknown): v is string[] {
  return Array.isArray(v) && v.every((x) => typeof x === 'string');
}

function isStart(v: unknown): v is ImageStart {
  const s = v as ImageStart;
  return !!s && isStringArray(s.entrypoint) && isStringArray(s.cmd) && typeof s.platform === 'string' && typeof s.manifest === 'string';
}

export class DiskCache {
  private writeProblem: string | undefined;

  constructor(readonly dir: string) {}

  configPath(digest: string): string {
    return `${this.dir}/configs/${safeSegment(digest.replace(':', '-'))}.json`;
  }

  tagPath(registry: string, repository: string, tag: string): string {
    return `${this.dir}/tags/${safeSegment(registry)}/${repository.split('/').map(safeSegment).join('/')}/${safeSegment(tag)}.json`;
  }

  /** Why writing failed in this run (the same text each time), if it did. */
  problem(): string | undefined {
    return this.writeProblem;
  }

  async readConfig(digest: string): Promise<CachedConfig | undefined> {
    const data = await this.read(this.configPath(digest));
    if (!data || typeof data !== 'object') return undefined;
    const c = data as CachedConfig;
    if (c.digest !== digest) return undefined;
    if (c.image !== undefined && !isStart(c.image)) return undefined;
    if (c.platforms !== undefined && (typeof c.platforms !== 'object' || !Object.values(c.platforms).every(isStart))) return undefined;
    return c;
  }

  async readTag(registry: string, repository: string, tag: string): Promise<CachedTag | undefined> {
    const data = (await this.read(this.tagPath(registry, repository, tag))) as CachedTag | undefined;
    if (!data || typeof data.digest !== 'string' || typeof data.checkedAt !== 'string' || Number.isNaN(Date.parse(data.checkedAt))) return undefined;
    return data;
  }

  async writeConfig(config: CachedConfig): Promise<void> {
    await this.write(this.configPath(config.digest), config);
  }

  async writeTag(registry: string, repository: string, tag: string, entry: CachedTag): Promise<void> {
    await this.write(this.tagPath(registry, repository, tag), entry);
  }

  private async read(path: string): Promise<unknown> {
    const { readFile } = await import('node:fs/promises');
    try {
      return JSON.parse(await readFile(path, 'utf8')) as unknown;
    } catch {
      return undefined;
    }
  }

  private async write(path: string, data: unknown): Promise<void> {
    if (this.writeProblem) return;
    const { mkdir, writeFile, rename, rm } = await import('node:fs/promises');
    const tmp = `${path}.${process.pid}.${Math.random().toString(36).slice(2)}.tmp`;
    try {
      await mkdir(path.slice(0, path.lastIndexOf('/')), { recursive: true });
      await writeFile(tmp, `${JSON.stringify(data, null, 2)}\n`);
      await rename(tmp, path);
    } catch (err) {
      await rm(tmp, { force: true }).catch(() => {});
      const e = err as NodeJS.ErrnoException;
      this.writeProblem = `cache directory ${this.dir} is not writable (${e.code ?? e.message}); answers are not cached, so every run asks the registry again (set the cache directory option or XDG_CACHE_HOME to a writable place)`;
    }
  }
}
