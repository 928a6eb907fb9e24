/**
 * The read path of the OCI distribution API: tag → digest with HEAD, the
 * manifest (index / list resolved for one platform), the config blob. Every
 * download is checked against its digest. Auth: Bearer token flow (anonymous
 * or with Docker-config credentials) and Basic.
 */
import type { LookupFailureKind } from '../core/index.js';
import type { ImageStart } from './cache.js';
import type { Credential, Credentials } from './credentials.js';
import { parseChallenge } from './credentials.js';
import { registryAllowed, type RegistryPolicy } from './allow.js';
import { httpRequest, isLoopbackHost, NetworkError, seconds, type Env, type HttpResponse } from './http.js';

export const OCI_INDEX = 'application/vnd.oci.image.index.v1+json';
export const OCI_MANIFEST = 'application/vnd.oci.image.manifest.v1+json';
export const DOCKER_LIST = 'application/vnd.docker.distribution.manifest.list.v2+json';
export const DOCKER_MANIFEST = 'application/vnd.docker.distribution.manifest.v2+json';
const SCHEMA1 = /application\/vnd\.docker\.distribution\.manifest\.v1/;
const MANIFEST_ACCEPT = [OCI_INDEX, OCI_MANIFEST, DOCKER_LIST, DOCKER_MANIFEST].join(', ');
const MAX_MANIFEST_BYTES = 4 * 1024 * 1024;
const MAX_CONFIG_BYTES = 16 * 1024 * 1024;

/** Why a lookup failed. `unreachable`: the registry gave no usable answer (network, timeout, 5xx, 429), so a cached answer may stand in. */
export class LookupError extends Error {
  /** What kind of failure, for the fix a door prints (a value: nobody reads the message for it). */
  readonly kind: LookupFailureKind;

  constructor(message: string, readonly unreachable = false, kind?: Exclude<LookupFailureKind, 'unreachable'>) {
    super(message);
    this.kind = unreachable ? 'unreachable' : (kind ?? 'invalid');
  }
}

export interface ClientContext {
  env: Env;
  requestTimeoutMs: number;
  /** Epoch ms after which no request starts. */
  deadline: number;
  totalTimeoutMs: number;
  insecureRegistries: readonly string[];
  ca?: readonly string[];
  credentials: Credentials;
  /** Which registries may be asked, at which addresses (./allow.ts); absent: any. */
  policy?: RegistryPolicy;
}

export interface Platform {
  os: string;
  architecture: string;
  variant?: string;
}

const ARCH_ALIASES: Record<string, string> = { x86_64: 'amd64', 'x86-64': 'amd64', aarch64: 'arm64', armhf: 'arm', armel: 'arm' };

export function parsePlatform(text: string): Platform {
  const parts = text.trim().toLowerCase().split('/');
  if (parts.length < 2 || parts.length > 3 || parts.some((p) => p === '')) throw new LookupError(`platform ${JSON.stringify(text)} is not os/architecture[/variant] (e.g. linux/amd64, linux/arm64/v8)`);
  const architecture = ARCH_ALIASES[parts[1]!] ?? parts[1]!;
  return { os: parts[0]!, architecture, ...(parts[2] ? { variant: parts[2] } : {}) };
}

export function formatPlatform(p: { os?: string; architecture?: string; variant?: string }): string {
  return [p.os ?? 'unknown', p.architecture ?? 'unknown', ...(p.variant ? [p.variant] : [])].join('/');
}

function normalVariant(p: Platform): string | undefined {
  if (p.architecture === 'arm64' && (p.variant === undefined || p.variant === '' || p.variant === 'v8')) return 'v8';
  return p.variant || undefined;
}

export function platformMatches(candidate: Platform, want: Platform): boolean {
  if (candidate.os !== want.os || (ARCH_ALIASES[candidate.architecture] ?? candidate.architecture) !== want.architecture) return false;
  if (want.variant === undefined) return true;
  return normalVariant({ ...candidate, architecture: want.architecture }) === normalVariant(want);
}

function digestOf(body: Buffer, algorithm: string): Promise<string> {
  return import('node:crypto').then(({ createHash }) => `${algorithm}:${createHash(algorithm).update(body).digest('hex')}`);
}

export const DIGEST_PATTERN = /^(sha256:[a-f0-9]{64}|sha512:[a-f0-9]{128})$/;

function retryAfter(res: HttpResponse): string {
  const value = res.headers['retry-after'];
  if (!value) return 'no Retry-After given';
  return /^\d+$/.test(value) ? `retry after ${value} s` : `retry after ${value}`;
}

function registryErrors(res: HttpResponse): string {
  try {
    const parsed = JSON.parse(res.body.toString('utf8')) as { errors?: { code?: string; message?: string }[] };
    const first = parsed.errors?.[0];
    if (first) return [first.code, first.message].filter(Boolean).join(': ');
  } catch {
    // not JSON
  }
  return '';
}

const STATUS_TEXT: Record<number, string> = { 400: 'Bad Request', 401: 'Unauthorized', 403: 'Forbidden', 404: 'Not Found', 405: 'Method Not Allowed', 408: 'Request Timeout', 429: 'Too Many Requests', 500: 'Internal Server Error', 502: 'Bad Gateway', 503: 'Service Unavailable', 504: 'Gateway Timeout' };

function statusLine(status: number): string {
  return `${status} ${STATUS_TEXT[status] ?? ''}`.trim();
}

export class Registry {
  readonly apiHost: string;
  private scheme: 'https' | 'http' | undefined;
  private readonly insecure: boolean;
  /** Every connection of this registry's lookups (token server, redirects too) goes to a public address only. */
  private readonly publicOnly: boolean;
  /** Authorization header per repository (tokens are scoped to one). */
  private readonly auth = new Map<string, string>();
  /** Why the credentials were not sent to the token realm, once they were held back (the refusal that follows says so). */
  private withheld: string | undefined;

  constructor(
    readonly name: string,
    private readonly ctx: ClientContext,
  ) {
    this.apiHost = name === 'docker.io' ? 'registry-1.docker.io' : name;
    const hostname = new URL(`http://${this.apiHost}`).hostname;
    // Under a policy (the webhook), loopback is no exception: only the registries listed as insecure are.
    this.insecure = (!ctx.policy && isLoopbackHost(hostname)) || ctx.insecureRegistries.some((r) => r.toLowerCase() === name.toLowerCase() || r.toLowerCase() === hostname);
    this.publicOnly = !registryAllowed(name, ctx.policy).privateAddresses;
  }

  private timeout(): number {
    const left = this.ctx.deadline - Date.now();
    if (left <= 0) throw new LookupError(`${this.name}: the lookup budget of ${seconds(this.ctx.totalTimeoutMs)} was spent before it answered`, true);
    return Math.min(this.ctx.requestTimeoutMs, left);
  }

  private networkError(err: unknown, host: string): LookupError {
    if (err instanceof LookupError) return err;
    if (err instanceof NetworkError) {
      if (err.kind === 'timeout') {
        if (Date.now() >= this.ctx.deadline - 10) return new LookupError(`${host}: the lookup budget of ${seconds(this.ctx.totalTimeoutMs)} was spent before it answered`, true);
        return new LookupError(`${host}: ${err.message}`, true);
      }
      if (err.kind === 'tls') return new LookupError(`${host}: TLS failed (${err.message})`, true);
      return new LookupError(`${host}: cannot connect (${err.message})`, true);
    }
    return new LookupError(`${host}: ${(err as Error).message ?? String(err)}`, true);
  }

  private async send(method: 'GET' | 'HEAD', path: string, headers: Record<string, string>, maxBytes: number): Promise<HttpResponse> {
    const schemes: ('https' | 'http')[] = this.scheme ? [this.scheme] : this.insecure ? ['https', 'http'] : ['https'];
    for (const scheme of schemes) {
      try {
        const res = await httpRequest({ method, url: new URL(`${scheme}://${this.apiHost}${path}`), headers, timeoutMs: this.timeout(), env: this.ctx.env, ca: this.ctx.ca, insecureTls: this.insecure, publicOnly: this.publicOnly, maxBytes });
        this.scheme = scheme;
        return res;
      } catch (err) {
        // Docker's rule for insecure registries: HTTPS first, plain HTTP when that fails (but not after a timeout: never wait twice).
        if (err instanceof NetworkError && (err.kind === 'tls' || err.kind === 'network') && scheme === 'https' && schemes.length > 1) continue;
        throw this.networkError(err, this.name);
      }
    }
    throw new LookupError(`${this.name}: no scheme left to try`, true);
  }

  /** A request with auth: tries what it has, answers a 401 challenge once. */
  async request(repository: string, method: 'GET' | 'HEAD', path: string, headers: Record<string, string>, maxBytes: number): Promise<HttpResponse> {
    const known = this.auth.get(repository);
    let res = await this.send(method, path, { ...headers, ...(known ? { Authorization: known } : {}) }, maxBytes);
    if (res.status !== 401) return res;
    const lookup = await this.ctx.credentials.lookup(this.name);
    const credential = lookup.credential;
    const challenge = parseChallenge(res.headers['www-authenticate']);
    let authorization: string;
    if (challenge?.scheme === 'bearer' && challenge.params.realm) {
      authorization = `Bearer ${await this.token(challenge.params, repository, credential, lookup.none)}`;
    } else if (challenge?.scheme === 'basic' || !challenge) {
      if (credential?.kind !== 'basic') throw new LookupError(`${this.name}: 401 Unauthorized (${credential ? `${credential.source} holds an identity token, but the registry asks for Basic auth` : lookup.none})`, false, 'denied');
      authorization = `Basic ${Buffer.from(`${credential.username}:${credential.password}`).toString('base64')}`;
    } else {
      throw new LookupError(`${this.name}: 401 Unauthorized (unsupported auth scheme ${challenge.scheme})`, false, 'denied');
    }
    this.auth.set(repository, authorization);
    res = await this.send(method, path, { ...headers, Authorization: authorization }, maxBytes);
    if (res.status === 401 || res.status === 403) {
      const detail = registryErrors(res);
      const why = this.withheld ?? (credential ? `credentials from ${credential.source} were refused` : `${lookup.none}; a repository that does not exist gets the same answer`);
      throw new LookupError(`${this.name}: ${statusLine(res.status)} for ${repository} (${why})${detail ? `: ${detail}` : ''}`, false, 'denied');
    }
    return res;
  }

  /**
   * Whether credentials may travel to this host over plain HTTP: only to one
   * the operator listed in registryInsecure (by host:port or host), or,
   * without a policy (a render), a loopback one: the hosts this registry
   * itself may be asked over plain HTTP by (Docker's rule for registries).
   */
  private plainHttpTrusted(url: URL): boolean {
    const host = url.host.toLowerCase();
    const hostname = url.hostname.toLowerCase();
    return (!this.ctx.policy && isLoopbackHost(url.hostname)) || this.ctx.insecureRegistries.some((r) => r.toLowerCase() === host || r.toLowerCase() === hostname);
  }

  private async token(params: Record<string, string>, repository: string, offered: Credential | undefined, none: string): Promise<string> {
    let url: URL;
    try {
      url = new URL(params.realm!);
    } catch {
      throw new LookupError(`${this.name}: 401 Unauthorized, and its token realm ${JSON.stringify(params.realm)} is not a URL`, false, 'denied');
    }
    // The realm a 401 names may be any host. Over HTTPS it gets the registry's credentials, as Docker's client sends them to any
    // realm; over plain HTTP only a host trusted with plain HTTP does: elsewhere the token is asked for anonymously (enough for a
    // public image) and a refusal says why the credentials stayed here (docs/registry-lookup.md, "Authentication").
    let credential = offered;
    this.withheld = undefined;
    if (credential && url.protocol === 'http:' && !this.plainHttpTrusted(url)) {
      this.withheld = `credentials from ${credential.source} were not sent to its token realm ${url.origin}: plain HTTP to a host registryInsecure does not name (name it there to send them)`;
      credential = undefined;
    }
    const scope = params.scope ?? `repository:${repository}:pull`;
    let res: HttpResponse;
    const where = `${this.name}: token server ${url.host}`;
    try {
      if (credential?.kind === 'identity-token') {
        const form = new URLSearchParams({ grant_type: 'refresh_token', refresh_token: credential.token, client_id: 'vram-preflight', ...(params.service ? { service: params.service } : {}), scope });
        res = await httpRequest({ method: 'POST', url, headers: { 'Content-Type': 'application/x-www-form-urlencoded' }, body: form.toString(), timeoutMs: this.timeout(), env: this.ctx.env, ca: this.ctx.ca, insecureTls: isLoopbackHost(url.hostname) && this.insecure, publicOnly: this.publicOnly, maxBytes: 1024 * 1024 });
      } else {
        if (params.service) url.searchParams.set('service', params.service);
        url.searchParams.set('scope', scope);
        const headers: Record<string, string> = credential?.kind === 'basic' ? { Authorization: `Basic ${Buffer.from(`${credential.username}:${credential.password}`).toString('base64')}` } : {};
        res = await httpRequest({ method: 'GET', url, headers, timeoutMs: this.timeout(), env: this.ctx.env, ca: this.ctx.ca, insecureTls: isLoopbackHost(url.hostname) && this.insecure, publicOnly: this.publicOnly, maxBytes: 1024 * 1024 });
      }
    } catch (err) {
      throw this.networkError(err, where);
    }
    if (res.status === 429) throw new LookupError(`${where}: 429 Too Many Requests (${retryAfter(res)})`, true);
    if (res.status === 401 || res.status === 403) throw new LookupError(`${where}: ${statusLine(res.status)} (${this.withheld ?? (credential ? `credentials from ${credential.source} were refused` : `anonymous access refused; ${none}`)})`, false, 'denied');
    if (res.status >= 500) throw new LookupError(`${where}: ${statusLine(res.status)}`, true);
    if (res.status !== 200) throw new LookupError(`${where}: ${statusLine(res.status)}`);
    let token: string | undefined;
    try {
      const parsed = JSON.parse(res.body.toString('utf8')) as { token?: unknown; access_token?: unknown };
      token = typeof parsed.token === 'string' && parsed.token ? parsed.token : typeof parsed.access_token === 'string' && parsed.access_token ? parsed.access_token : undefined;
    } catch {
      // handled below
    }
    if (!token) throw new LookupError(`${where}: answer has no token`);
    return token;
  }

  private check(res: HttpResponse, what: string): void {
    if (res.status >= 200 && res.status < 300) return;
    if (res.status === 404) {
      const detail = registryErrors(res);
      throw new LookupError(`${this.name}: ${what} not found (404${detail ? ` ${detail}` : ': no such repository, tag or digest'})`, false, 'not-found');
    }
    if (res.status === 429) throw new LookupError(`${this.name}: 429 Too Many Requests (${retryAfter(res)})`, true);
    const detail = registryErrors(res);
    throw new LookupError(`${this.name}: ${statusLine(res.status)} for ${what}${detail ? ` (${detail})` : ''}`, res.status >= 500 || res.status === 408);
  }

  /** Tag → digest with one HEAD (Docker Hub does not count HEAD against the pull limit). */
  async resolveTag(repository: string, tag: string): Promise<string> {
    const what = `${repository}:${tag}`;
    const head = await this.request(repository, 'HEAD', `/v2/${repository}/manifests/${encodeURIComponent(tag)}`, { Accept: MANIFEST_ACCEPT }, MAX_MANIFEST_BYTES);
    if (head.status !== 405 && head.status !== 501) {
      this.check(head, what);
      const digest = head.headers['docker-content-digest'];
      if (typeof digest === 'string' && DIGEST_PATTERN.test(digest)) return digest;
    }
    // No HEAD, or no digest header: fetch the manifest and hash it.
    const get = await this.request(repository, 'GET', `/v2/${repository}/manifests/${encodeURIComponent(tag)}`, { Accept: MANIFEST_ACCEPT }, MAX_MANIFEST_BYTES);
    this.check(get, what);
    return digestOf(get.body, 'sha256');
  }

  private async fetchVerified(repository: string, kind: 'manifests' | 'blobs', digest: string, maxBytes: number, what: string): Promise<HttpResponse> {
    const res = await this.request(repository, 'GET', `/v2/${repository}/${kind}/${digest}`, kind === 'manifests' ? { Accept: MANIFEST_ACCEPT } : {}, maxBytes);
    this.check(res, what);
    const algorithm = digest.slice(0, digest.indexOf(':'));
    const actual = await digestOf(res.body, algorithm);
    if (actual !== digest) throw new LookupError(`${this.name}: ${what} does not match its digest (expected ${digest}, got ${actual}); refusing it`);
    return res;
  }

  private async manifest(repository: string, digest: string): Promise<{ mediaType: string; json: Record<string, unknown> }> {
    const res = await this.fetchVerified(repository, 'manifests', digest, MAX_MANIFEST_BYTES, `manifest ${repository}@${digest}`);
    let json: Record<string, unknown>;
    try {
      json = JSON.parse(res.body.toString('utf8')) as Record<string, unknown>;
    } catch {
      throw new LookupError(`${this.name}: manifest ${repository}@${digest} is not JSON`);
    }
    const header = (res.headers['content-type'] ?? '').split(';')[0]!.trim();
    const mediaType = typeof json.mediaType === 'string' ? json.mediaType : header;
    if (SCHEMA1.test(mediaType) || SCHEMA1.test(header) || json.schemaVersion === 1) {
      throw new LookupError(`${this.name}: ${repository}@${digest} is a Docker schema 1 manifest, which has no image config to read; push the image again with a current client, or name its start in the config file`);
    }
    if (mediaType === '' && Array.isArray(json.manifests)) return { mediaType: OCI_INDEX, json };
    if (mediaType === '' && json.config) return { mediaType: OCI_MANIFEST, json };
    return { mediaType, json };
  }

  /**
   * What the digest runs for the platform. `kind: 'image'` when the digest
   * is a single image manifest (its start holds whatever platform is asked).
   */
  async readStart(repository: string, digest: string, want: Platform): Promise<{ kind: 'image' | 'index'; start: ImageStart; warning?: string }> {
    const top = await this.manifest(repository, digest);
    if (top.mediaType === OCI_INDEX || top.mediaType === DOCKER_LIST) {
      const entries = (Array.isArray(top.json.manifests) ? top.json.manifests : []) as { digest?: string; mediaType?: string; platform?: { os?: string; architecture?: string; variant?: string } }[];
      const usable = entries.filter((e) => e.platform && e.platform.os !== 'unknown' && e.platform.architecture !== 'unknown' && typeof e.digest === 'string' && DIGEST_PATTERN.test(e.digest));
      const matching = usable.filter((e) => platformMatches({ os: e.platform!.os ?? '', architecture: e.platform!.architecture ?? '', variant: e.platform!.variant }, want));
      // With no variant asked, the base variant first (arm64/v8 over others).
      const chosen = matching.find((e) => want.variant !== undefined || normalVariant({ os: '', architecture: want.architecture, variant: e.platform!.variant }) === normalVariant({ os: '', architecture: want.architecture })) ?? matching[0];
      if (!chosen) {
        const available = [...new Set(usable.map((e) => formatPlatform(e.platform!)))];
        throw new LookupError(`${this.name}: ${repository}@${digest} has no image for ${formatPlatform(want)} (it has ${available.length > 0 ? available.join(', ') : 'no platform entries'}); set the platform option`);
      }
      const image = await this.manifest(repository, chosen.digest!);
      if (image.mediaType === OCI_INDEX || image.mediaType === DOCKER_LIST) throw new LookupError(`${this.name}: ${repository}@${digest}: nested index for ${formatPlatform(want)} is not supported`);
      const start = await this.imageStart(repository, chosen.digest!, image.json);
      return { kind: 'index', start };
    }
    if (top.mediaType !== OCI_MANIFEST && top.mediaType !== DOCKER_MANIFEST) throw new LookupError(`${this.name}: ${repository}@${digest} has media type ${top.mediaType || '(none)'}, not an image manifest or index`);
    const start = await this.imageStart(repository, digest, top.json);
    const actual = parsePlatform(start.platform.split('/').length >= 2 ? start.platform : 'unknown/unknown');
    const warning = platformMatches(actual, want) ? undefined : `${repository}@${digest} is a single image for ${start.platform}, not ${formatPlatform(want)}; its start is used anyway`;
    return { kind: 'image', start, ...(warning ? { warning } : {}) };
  }

  private async imageStart(repository: string, manifestDigest: string, manifest: Record<string, unknown>): Promise<ImageStart> {
    const config = manifest.config as { digest?: string } | undefined;
    if (!config || typeof config.digest !== 'string' || !DIGEST_PATTERN.test(config.digest)) throw new LookupError(`${this.name}: manifest ${repository}@${manifestDigest} names no config blob`);
    const res = await this.fetchVerified(repository, 'blobs', config.digest, MAX_CONFIG_BYTES, `config blob ${config.digest} of ${repository}`);
    let parsed: { os?: string; architecture?: string; variant?: string; config?: { Entrypoint?: unknown; Cmd?: unknown } | null };
    try {
      parsed = JSON.parse(res.body.toString('utf8')) as typeof parsed;
    } catch {
      throw new LookupError(`${this.name}: config blob ${config.digest} of ${repository} is not JSON`);
    }
    const list = (v: unknown): string[] => (Array.isArray(v) ? v.map(String) : typeof v === 'string' ? [v] : []);
    return { entrypoint: list(parsed.config?.Entrypoint), cmd: list(parsed.config?.Cmd), platform: formatPlatform(parsed), manifest: manifestDigest };
  }
}
