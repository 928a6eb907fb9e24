/**
 * Real registries for the lookup tests: the CNCF distribution server
 * (Debian `docker-registry`) on 127.0.0.1, with htpasswd Basic auth, with
 * token auth backed by a small token server of our own (JWTs the registry
 * really verifies), or with TLS; synthetic images written as OCI layouts and
 * pushed with skopeo. Plus the stubs the failure tests need: a counting or
 * corrupting reverse proxy, a CONNECT proxy, a 429 server, a stalled server.
 */
import { execFile, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createHash, createPrivateKey, createPublicKey, sign, type KeyObject } from 'node:crypto';
import { mkdirSync, writeFileSync, readFileSync, openSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import { promisify } from 'node:util';
import { gzipSync } from 'node:zlib';

const run = promisify(execFile);

export const REGISTRY_BIN = 'docker-registry';
export const USER = 'tester';
export const PASSWORD = 's3cret-pass';
/** bcrypt of PASSWORD (`htpasswd -nbB tester s3cret-pass`); the registry reads bcrypt only. */
const HTPASSWD = `${USER}:$2y$05$kUpKD5CVUkaSLZb3gTPBE.WyTWW1mi/CZyHjBn94Lx3MxlxmX3U3m\n`;

/** The tests need real tools; a missing one fails loudly instead of skipping. */
export function requireTools(): void {
  const missing = [REGISTRY_BIN, 'skopeo', 'openssl'].filter((tool) => spawnSync('sh', ['-c', `command -v ${tool}`]).status !== 0);
  if (missing.length > 0) {
    throw new Error(`registry tests need ${missing.join(', ')} on PATH (Debian packages docker-registry, skopeo, openssl): run ./scripts/test.sh, which installs them`);
  }
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
    server.on('error', reject);
  });
}

// ---------------------------------------------------------------- certificates

export interface Pki {
  /** Token signing key and its self-signed certificate (the registry's rootcertbundle). */
  tokenKey: KeyObject;
  tokenCertPath: string;
  /** TLS certificate for registry.test, localhost and 127.0.0.1 (self-signed: also its own CA). */
  tlsCertPath: string;
  tlsKeyPath: string;
}

export async function makePki(dir: string): Promise<Pki> {
  mkdirSync(dir, { recursive: true });
  const tokenKeyPath = path.join(dir, 'token.key');
  const tokenCertPath = path.join(dir, 'token.crt');
  const tlsKeyPath = path.join(dir, 'tls.key');
  const tlsCertPath = path.join(dir, 'tls.crt');
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '2'];
  await Promise.all([
    run('openssl', ['req', '-x509', ...ec, '-keyout', tokenKeyPath, '-out', tokenCertPath, '-subj', '/CN=test token issuer']),
    run('openssl', ['req', '-x509', ...ec, '-keyout', tlsKeyPath, '-out', tlsCertPath, '-subj', '/CN=registry.test', '-addext', 'subjectAltName=DNS:registry.test,DNS:localhost,IP:127.0.0.1']),
  ]);
  return { tokenKey: createPrivateKey(readFileSync(tokenKeyPath)), tokenCertPath, tlsCertPath, tlsKeyPath };
}

/** libtrust key ID: SHA-256 of the DER SubjectPublicKeyInfo, 240 bits, base32, 12 groups of 4. */
export function libtrustKeyId(key: KeyObject): string {
  const der = createPublicKey(key).export({ type: 'spki', format: 'der' });
  const bytes = createHash('sha256').update(der).digest().subarray(0, 30);
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ234567';
  let bits = '';
  for (const b of bytes) bits += b.toString(2).padStart(8, '0');
  let out = '';
  for (let i = 0; i < bits.length; i += 5) out += alphabet[parseInt(bits.slice(i, i + 5), 2)];
  return out.match(/.{4}/g)!.join(':');
}

function b64url(data: Buffer | string): string {
  return Buffer.from(data).toString('base64url');
}

// ---------------------------------------------------------------- token server

export interface TokenServer {
  url: string;
  port: number;
  requests: { method: string; basicUser?: string; scope?: string; grant?: string }[];
  close(): Promise<void>;
}

export const SERVICE = 'vram-preflight-test-registry';
export const ISSUER = 'vram-preflight-test-issuer';
export const IDENTITY_TOKEN = 'identity-token-for-tester';

/**
 * Docker Hub's flow: GET /token?service=&scope= with or without Basic
 * credentials (or POST a refresh_token grant). Anonymous callers get `pull`
 * on every repository except private/*; the test user gets what it asks.
 */
export async function startTokenServer(key: KeyObject, options: { field?: 'token' | 'access_token' } = {}): Promise<TokenServer> {
  const kid = libtrustKeyId(key);
  const requests: TokenServer['requests'] = [];
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (d: Buffer) => (body += d.toString()));
    req.on('end', () => {
      const url = new URL(req.url ?? '/', 'http://x');
      let user: string | undefined;
      let authenticated = false;
      const authz = req.headers.authorization;
      if (authz?.startsWith('Basic ')) {
        const [u, p] = Buffer.from(authz.slice(6), 'base64').toString().split(':');
        user = u;
        if (u !== USER || p !== PASSWORD) {
          requests.push({ method: req.method!, basicUser: u, scope: url.searchParams.get('scope') ?? undefined });
          res.writeHead(401, { 'Content-Type': 'application/json' }).end('{"details":"incorrect username or password"}');
          return;
        }
        authenticated = true;
      }
      let scopes = url.searchParams.getAll('scope');
      let grant: string | undefined;
      if (req.method === 'POST') {
        const form = new URLSearchParams(body);
        grant = form.get('grant_type') ?? undefined;
        scopes = form.getAll('scope');
        if (grant !== 'refresh_token' || form.get('refresh_token') !== IDENTITY_TOKEN) {
          requests.push({ method: 'POST', grant });
          res.writeHead(401).end('{"error":"invalid_grant"}');
          return;
        }
        authenticated = true;
        user = USER;
      }
      requests.push({ method: req.method!, basicUser: user, scope: scopes.join(' '), grant });
      const access = scopes.flatMap((s) => {
        const [type, name, actions] = s.split(':');
        if (type !== 'repository' || !name || !actions) return [];
        const granted = authenticated ? actions.split(',') : name.startsWith('private/') ? [] : actions.split(',').filter((a) => a === 'pull');
        return [{ type, name, actions: granted }];
      });
      const now = Math.floor(Date.now() / 1000);
      const header = { typ: 'JWT', alg: 'ES256', kid };
      const claims = { iss: ISSUER, sub: user ?? '', aud: SERVICE, exp: now + 600, nbf: now - 10, iat: now, jti: String(Math.random()), access };
      const input = `${b64url(JSON.stringify(header))}.${b64url(JSON.stringify(claims))}`;
      const signature = sign('sha256', Buffer.from(input), { key, dsaEncoding: 'ieee-p1363' });
      const token = `${input}.${b64url(signature)}`;
      res.writeHead(200, { 'Content-Type': 'application/json' }).end(JSON.stringify({ [options.field ?? 'token']: token, expires_in: 600, issued_at: new Date().toISOString() }));
    });
  });
  const port = await listen(server);
  return { url: `http://127.0.0.1:${port}/token`, port, requests, close: () => closeServer(server) };
}

// ---------------------------------------------------------------- registry

export interface Registry {
  host: string;
  port: number;
  stop(): Promise<void>;
}

export type RegistryAuth = { kind: 'none' } | { kind: 'htpasswd'; file: string } | { kind: 'token'; realm: string; rootCert: string };

/** A docker-registry process on 127.0.0.1 serving `storage` (several may share one). */
export async function startRegistry(dir: string, storage: string, auth: RegistryAuth, tls?: { cert: string; key: string }): Promise<Registry> {
  mkdirSync(dir, { recursive: true });
  const port = await freePort();
  const lines = [
    'version: 0.1',
    'log:',
    '  level: warn',
    '  accesslog:',
    '    disabled: true',
    'storage:',
    '  filesystem:',
    `    rootdirectory: ${storage}`,
    '  maintenance:',
    '    uploadpurging:',
    '      enabled: false',
    'http:',
    `  addr: 127.0.0.1:${port}`,
    `  secret: test-secret`,
    ...(tls ? ['  tls:', `    certificate: ${tls.cert}`, `    key: ${tls.key}`] : []),
  ];
  if (auth.kind === 'htpasswd') {
    writeFileSync(auth.file, HTPASSWD);
    lines.push('auth:', '  htpasswd:', '    realm: test-realm', `    path: ${auth.file}`);
  } else if (auth.kind === 'token') {
    lines.push('auth:', '  token:', `    realm: ${auth.realm}`, `    service: ${SERVICE}`, `    issuer: ${ISSUER}`, `    rootcertbundle: ${auth.rootCert}`);
  }
  const config = path.join(dir, 'config.yml');
  writeFileSync(config, `${lines.join('\n')}\n`);
  const logPath = path.join(dir, 'registry.log');
  const log = openSync(logPath, 'a');
  const child: ChildProcess = spawn(REGISTRY_BIN, ['serve', config], { stdio: ['ignore', log, log] });
  let exited = false;
  child.on('exit', () => (exited = true));
  const deadline = Date.now() + 15_000;
  for (;;) {
    if (exited) throw new Error(`docker-registry exited at start:\n${readFileSync(logPath, 'utf8')}`);
    if (await answers(port)) break;
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`docker-registry did not listen on ${port}:\n${readFileSync(logPath, 'utf8')}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    host: `127.0.0.1:${port}`,
    port,
    stop: () =>
      new Promise<void>((resolve) => {
        if (exited) return resolve();
        child.on('exit', () => resolve());
        child.kill('SIGTERM');
        setTimeout(() => child.kill('SIGKILL'), 2000).unref();
      }),
  };
}

function answers(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    socket.on('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.on('error', () => resolve(false));
  });
}

// ---------------------------------------------------------------- images

export const OCI_INDEX = 'application/vnd.oci.image.index.v1+json';
export const OCI_MANIFEST = 'application/vnd.oci.image.manifest.v1+json';

export interface SyntheticImage {
  os?: string;
  architecture: string;
  variant?: string;
  entrypoint: string[] | null;
  cmd: string[] | null;
}

function blob(dir: string, content: Buffer | string): { digest: string; size: number } {
  const data = Buffer.from(content);
  const hex = createHash('sha256').update(data).digest('hex');
  writeFileSync(path.join(dir, 'blobs', 'sha256', hex), data);
  return { digest: `sha256:${hex}`, size: data.length };
}

/**
 * Writes an OCI layout holding one image (one platform) or an index of
 * several, under the ref name `image`, and returns the layout directory.
 */
export function writeOciLayout(dir: string, images: SyntheticImage[], asIndex: boolean): string {
  mkdirSync(path.join(dir, 'blobs', 'sha256'), { recursive: true });
  writeFileSync(path.join(dir, 'oci-layout'), '{"imageLayoutVersion":"1.0.0"}');
  const tar = Buffer.alloc(1024); // an empty tar archive
  const layer = blob(dir, gzipSync(tar));
  const diffId = `sha256:${createHash('sha256').update(tar).digest('hex')}`;
  const manifests = images.map((image) => {
    const os = image.os ?? 'linux';
    const config = blob(
      dir,
      JSON.stringify({
        created: '2026-01-01T00:00:00Z',
        architecture: image.architecture,
        os,
        ...(image.variant ? { variant: image.variant } : {}),
        config: { Env: ['PATH=/usr/bin:/bin'], Entrypoint: image.entrypoint, Cmd: image.cmd },
        rootfs: { type: 'layers', diff_ids: [diffId] },
      }),
    );
    const manifest = blob(
      dir,
      JSON.stringify({
        schemaVersion: 2,
        mediaType: OCI_MANIFEST,
        config: { mediaType: 'application/vnd.oci.image.config.v1+json', ...config },
        layers: [{ mediaType: 'application/vnd.oci.image.layer.v1.tar+gzip', ...layer }],
      }),
    );
    return { mediaType: OCI_MANIFEST, ...manifest, platform: { architecture: image.architecture, os, ...(image.variant ? { variant: image.variant } : {}) } };
  });
  let top: { mediaType: string; digest: string; size: number };
  if (asIndex) {
    top = { mediaType: OCI_INDEX, ...blob(dir, JSON.stringify({ schemaVersion: 2, mediaType: OCI_INDEX, manifests })) };
  } else {
    const only = manifests[0]!;
    top = { mediaType: only.mediaType, digest: only.digest, size: only.size };
  }
  writeFileSync(path.join(dir, 'index.json'), JSON.stringify({ schemaVersion: 2, manifests: [{ ...top, annotations: { 'org.opencontainers.image.ref.name': 'image' } }] }));
  return dir;
}

/** skopeo copy of an OCI layout into the registry (`format: 'v2s2'` converts to Docker media types: manifest list for an index). */
export async function push(layout: string, destination: string, options: { format?: 'v2s2' | 'oci' } = {}): Promise<void> {
  const args = ['--insecure-policy', 'copy', '--all', '--quiet', '--dest-tls-verify=false', '--dest-creds', `${USER}:${PASSWORD}`];
  if (options.format) args.push('--format', options.format);
  args.push(`oci:${layout}:image`, `docker://${destination}`);
  await run('skopeo', args, { timeout: 30_000 });
}

/** What skopeo itself reads as the image config (the reference answer). */
export async function skopeoConfig(image: string, extra: string[] = []): Promise<{ config?: { Entrypoint?: string[] | null; Cmd?: string[] | null }; architecture: string }> {
  const { stdout } = await run('skopeo', ['--insecure-policy', 'inspect', '--config', '--tls-verify=false', '--creds', `${USER}:${PASSWORD}`, ...extra, `docker://${image}`], { timeout: 30_000 });
  return JSON.parse(stdout) as { config?: { Entrypoint?: string[] | null; Cmd?: string[] | null }; architecture: string };
}

/** The raw manifest as the registry serves it (for media types). */
export async function skopeoRawManifest(image: string): Promise<{ mediaType?: string }> {
  const { stdout } = await run('skopeo', ['--insecure-policy', 'inspect', '--raw', '--tls-verify=false', '--creds', `${USER}:${PASSWORD}`, `docker://${image}`], { timeout: 30_000 });
  return JSON.parse(stdout) as { mediaType?: string };
}

// ---------------------------------------------------------------- stubs

export function listen(server: net.Server): Promise<number> {
  return new Promise((resolve, reject) => {
    server.listen(0, '127.0.0.1', () => resolve((server.address() as net.AddressInfo).port));
    server.on('error', reject);
  });
}

export function closeServer(server: net.Server): Promise<void> {
  return new Promise((resolve) => {
    (server as http.Server).closeAllConnections?.();
    server.close(() => resolve());
  });
}

export interface ReverseProxy {
  host: string;
  requests: { method: string; path: string }[];
  /** Stops listening: the "registry" behind this address becomes unreachable. */
  close(): Promise<void>;
}

/**
 * A reverse proxy in front of a registry that records each request;
 * `corrupt` flips a byte of matching answers, `rateLimit` answers 429 instead.
 */
export async function startReverseProxy(target: number, options: { corrupt?: (method: string, path: string) => boolean; rateLimit?: (method: string, path: string) => boolean } = {}): Promise<ReverseProxy> {
  const requests: ReverseProxy['requests'] = [];
  const sockets = new Set<net.Socket>();
  const server = http.createServer((req, res) => {
    requests.push({ method: req.method!, path: req.url! });
    if (options.rateLimit?.(req.method!, req.url!)) {
      req.resume();
      res.writeHead(429, { 'Retry-After': '3600' }).end();
      return;
    }
    const upstream = http.request({ host: '127.0.0.1', port: target, method: req.method, path: req.url, headers: req.headers }, (up) => {
      const chunks: Buffer[] = [];
      up.on('data', (d: Buffer) => chunks.push(d));
      up.on('end', () => {
        const body = Buffer.concat(chunks);
        if (body.length > 1 && options.corrupt?.(req.method!, req.url!)) body[body.length - 2] = body[body.length - 2]! ^ 0x01;
        res.writeHead(up.statusCode ?? 502, up.headers).end(body);
      });
    });
    upstream.on('error', () => res.writeHead(502).end());
    req.pipe(upstream);
  });
  server.on('connection', (s: net.Socket) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  const port = await listen(server);
  return {
    host: `127.0.0.1:${port}`,
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

export interface ConnectProxy {
  url: string;
  /** host:port of each CONNECT tunnel asked for. */
  connects: string[];
  /** Absolute-form requests (plain HTTP through the proxy): METHOD URL. */
  forwarded: string[];
  close(): Promise<void>;
}

/** An HTTP proxy (CONNECT, and absolute-form for plain HTTP); `*.test` hosts resolve to 127.0.0.1 (there is no DNS for them). */
export async function startConnectProxy(): Promise<ConnectProxy> {
  const connects: string[] = [];
  const forwarded: string[] = [];
  const sockets = new Set<net.Socket>();
  const server = http.createServer((req, res) => {
    forwarded.push(`${req.method} ${req.url}`);
    let target: URL;
    try {
      target = new URL(req.url ?? '');
    } catch {
      res.writeHead(400).end();
      return;
    }
    const upstream = http.request({ host: target.hostname.endsWith('.test') ? '127.0.0.1' : target.hostname, port: target.port || 80, method: req.method, path: `${target.pathname}${target.search}`, headers: req.headers }, (up) => {
      res.writeHead(up.statusCode ?? 502, up.headers);
      up.pipe(res);
    });
    upstream.on('error', () => res.writeHead(502).end());
    req.pipe(upstream);
  });
  server.on('connect', (req: http.IncomingMessage, client: net.Socket, head: Buffer) => {
    connects.push(req.url ?? '');
    sockets.add(client);
    const [host, port] = (req.url ?? '').split(':');
    const upstream = net.connect(Number(port), host?.endsWith('.test') ? '127.0.0.1' : host!, () => {
      client.write('HTTP/1.1 200 Connection Established\r\n\r\n');
      upstream.write(head);
      upstream.pipe(client);
      client.pipe(upstream);
    });
    sockets.add(upstream);
    upstream.on('error', () => client.destroy());
    client.on('error', () => upstream.destroy());
  });
  const port = await listen(server);
  return {
    url: `http://127.0.0.1:${port}`,
    connects,
    forwarded,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

/** Answers every request with 429 and a Retry-After, counting them. */
export async function startRateLimited(): Promise<{ host: string; count: () => number; close(): Promise<void> }> {
  let count = 0;
  const server = http.createServer((_req, res) => {
    count++;
    res.writeHead(429, { 'Retry-After': '120', 'Content-Type': 'application/json' }).end('{"errors":[{"code":"TOOMANYREQUESTS","message":"You have reached your pull rate limit."}]}');
  });
  const port = await listen(server);
  return { host: `127.0.0.1:${port}`, count: () => count, close: () => closeServer(server) };
}

/** Accepts connections and never says a word. */
export async function startStalled(): Promise<{ host: string; close(): Promise<void> }> {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((s) => {
    sockets.add(s);
    s.on('error', () => {});
  });
  const port = await listen(server);
  return {
    host: `127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}
