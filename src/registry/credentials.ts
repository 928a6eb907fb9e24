/**
 * Credentials from the Docker config file, as `docker login` leaves them:
 * `credHelpers[registry]`, then `credsStore`, then `auths`.
 */
import type { Env } from './http.js';

export type Credential =
  | { kind: 'basic'; username: string; password: string; source: string }
  | { kind: 'identity-token'; token: string; source: string };

export interface CredentialLookup {
  credential?: Credential;
  /** Why there is none (for the refusal message), e.g. "no credentials for it in /root/.docker/config.json". */
  none: string;
}

interface DockerConfigFile {
  auths?: Record<string, { auth?: string; username?: string; password?: string; identitytoken?: string }>;
  credHelpers?: Record<string, string>;
  credsStore?: string;
}

export function dockerConfigPath(env: Env, homedir: () => string): string {
  const dir = env.DOCKER_CONFIG;
  if (dir) return `${dir.replace(/\/+$/, '')}/config.json`;
  return `${env.HOME ?? homedir()}/.docker/config.json`;
}

/** The name Docker files Docker Hub credentials under. */
export const DOCKER_HUB_AUTH_KEY = 'https://index.docker.io/v1/';

function keyHost(key: string): string {
  return key.replace(/^[a-z]+:\/\//i, '').replace(/\/.*$/, '').toLowerCase();
}

function sameRegistry(key: string, registry: string): boolean {
  const host = keyHost(key);
  if (registry === 'docker.io') return ['docker.io', 'index.docker.io', 'registry-1.docker.io'].includes(host);
  return host === registry.toLowerCase();
}

export class Credentials {
  private config: DockerConfigFile | undefined;
  private problem: string | undefined;
  private loaded = false;
  private readonly cache = new Map<string, Promise<CredentialLookup>>();

  constructor(
    private readonly env: Env,
    private readonly path: string,
    /** How long a docker-credential-* helper may take (the request timeout, capped by what is left of the budget). */
    private readonly helperTimeoutMs: () => number,
  ) {}

  private async load(): Promise<void> {
    if (this.loaded) return;
    this.loaded = true;
    const { readFile } = await import('node:fs/promises');
    let text: string;
    try {
      text = await readFile(this.path, 'utf8');
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      this.problem = code === 'ENOENT' ? `${this.path} does not exist` : `${this.path} could not be read (${code ?? String(err)})`;
      return;
    }
    try {
      const parsed = JSON.parse(text) as unknown;
      if (parsed === null || typeof parsed !== 'object') throw new Error('not an object');
      this.config = parsed as DockerConfigFile;
    } catch (err) {
      this.problem = `${this.path} is not valid JSON (${(err as Error).message})`;
    }
  }

  lookup(registry: string): Promise<CredentialLookup> {
    let found = this.cache.get(registry);
    if (!found) {
      found = this.find(registry);
      this.cache.set(registry, found);
    }
    return found;
  }

  private async find(registry: string): Promise<CredentialLookup> {
    await this.load();
    const none = this.problem ? `no credentials for it: ${this.problem}` : `no credentials for it in ${this.path}`;
    const config = this.config;
    if (!config) return { none };
    const serverUrl = registry === 'docker.io' ? DOCKER_HUB_AUTH_KEY : registry;
    const helpers = config.credHelpers ?? {};
    const helperKey = Object.keys(helpers).find((k) => sameRegistry(k, registry));
    const helper = helperKey !== undefined ? helpers[helperKey] : config.credsStore;
    if (helper) {
      const fromHelper = await this.runHelper(helper, serverUrl);
      if (fromHelper.credential) return fromHelper;
      if (helperKey !== undefined) return fromHelper;
      // A credsStore that has nothing for this registry: `auths` may still.
    }
    for (const [key, entry] of Object.entries(config.auths ?? {})) {
      if (!sameRegistry(key, registry) || !entry) continue;
      const source = `${this.path} auths["${key}"]`;
      if (entry.identitytoken) return { credential: { kind: 'identity-token', token: entry.identitytoken, source }, none };
      if (entry.auth) {
        const decoded = Buffer.from(entry.auth, 'base64').toString('utf8');
        const colon = decoded.indexOf(':');
        if (colon > 0) return { credential: { kind: 'basic', username: decoded.slice(0, colon), password: decoded.slice(colon + 1), source }, none };
      }
      if (entry.username && entry.password) return { credential: { kind: 'basic', username: entry.username, password: entry.password, source }, none };
    }
    return { none };
  }

  private async runHelper(name: string, serverUrl: string): Promise<CredentialLookup> {
    const program = `docker-credential-${name}`;
    const { spawn } = await import('node:child_process');
    return new Promise<CredentialLookup>((resolve) => {
      let out = '';
      let err = '';
      let done = false;
      const finish = (result: CredentialLookup) => {
        if (done) return;
        done = true;
        clearTimeout(timer);
        resolve(result);
      };
      const child = spawn(program, ['get'], { env: { ...this.env } as NodeJS.ProcessEnv, stdio: ['pipe', 'pipe', 'pipe'] });
      const timeoutMs = Math.max(1, this.helperTimeoutMs());
      const timer = setTimeout(() => {
        child.kill('SIGKILL');
        finish({ none: `${program} did not answer within ${Math.round(timeoutMs / 100) / 10} s` });
      }, timeoutMs);
      child.stdout.on('data', (d: Buffer) => (out += d.toString('utf8')));
      child.stderr.on('data', (d: Buffer) => (err += d.toString('utf8')));
      child.stdin.on('error', () => {});
      child.on('error', (e: NodeJS.ErrnoException) => finish({ none: e.code === 'ENOENT' ? `${program} (named in ${this.path}) is not on PATH` : `${program} failed: ${e.message}` }));
      child.on('close', (code) => {
        if (code !== 0) {
          const said = (out.trim() || err.trim()).split('\n')[0] ?? '';
          if (/credentials not found/i.test(said)) return finish({ none: `no credentials for it in ${program}` });
          return finish({ none: `${program} get failed (exit ${code}${said ? `: ${said}` : ''})` });
        }
        try {
          const parsed = JSON.parse(out) as { Username?: string; Secret?: string };
          if (!parsed.Secret) return finish({ none: `no credentials for it in ${program}` });
          const source = `${program}`;
          if (parsed.Username === '<token>') return finish({ credential: { kind: 'identity-token', token: parsed.Secret, source }, none: '' });
          finish({ credential: { kind: 'basic', username: parsed.Username ?? '', password: parsed.Secret, source }, none: '' });
        } catch {
          finish({ none: `${program} get printed no JSON` });
        }
      });
      child.stdin.end(serverUrl);
    });
  }
}

/** `Bearer realm="…",service="…",scope="…"` → scheme and parameters. */
export function parseChallenge(header: string | string[] | undefined): { scheme: string; params: Record<string, string> } | undefined {
  const text = Array.isArray(header) ? header.find((h) => /^\s*bearer/i.test(h)) ?? header[0] : header;
  if (!text) return undefined;
  const m = /^\s*(\w+)\s*(.*)$/s.exec(text);
  if (!m) return undefined;
  const params: Record<string, string> = {};
  const re = /([\w-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^,\s]*))/g;
  let p: RegExpExecArray | null;
  while ((p = re.exec(m[2] ?? '')) !== null) params[p[1]!.toLowerCase()] = p[2] !== undefined ? p[2].replace(/\\(.)/g, '$1') : p[3] ?? '';
  return { scheme: m[1]!.toLowerCase(), params };
}
