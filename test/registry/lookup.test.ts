/**
 * The registry lookup against real docker-registry processes (the CNCF
 * distribution server) on 127.0.0.1: htpasswd Basic, token auth with a
 * token server whose JWTs the registry verifies, TLS behind a CONNECT proxy.
 * Images are synthetic OCI layouts pushed with skopeo. Nothing leaves the
 * machine.
 */
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isLookupFailure, lookupImageStarts, renderImageEntries, type ImageStartAnswer, type LookupFailure, type RegistryOptions } from '../../src/registry/index.js';
import * as h from './harness.js';

h.requireTools();

const root = mkdtempSync(path.join(tmpdir(), 'vram-preflight-registry-'));
let pki: h.Pki;
let tokens: h.TokenServer;
let accessTokens: h.TokenServer;
let basic: h.Registry; // htpasswd
let token: h.Registry; // token auth, `token` field
let token2: h.Registry; // token auth, `access_token` field
let secure: h.Registry; // TLS, no auth
const stops: (() => Promise<void>)[] = [];
let counter = 0;

function fresh(name: string): string {
  const dir = path.join(root, `${name}-${++counter}`);
  mkdirSync(dir, { recursive: true });
  return dir;
}

/** A Docker config directory holding `config`. */
function dockerConfig(config: unknown): string {
  const dir = fresh('docker');
  writeFileSync(path.join(dir, 'config.json'), JSON.stringify(config));
  return dir;
}

const basicAuth = (host: string) => ({ auths: { [host]: { auth: Buffer.from(`${h.USER}:${h.PASSWORD}`).toString('base64') } } });

function options(over: Partial<RegistryOptions> = {}, env: Record<string, string | undefined> = {}): RegistryOptions {
  const home = fresh('home');
  return {
    platform: 'linux/amd64',
    requestTimeoutMs: 4000,
    totalTimeoutMs: 12_000,
    cacheDir: fresh('cache'),
    ...over,
    env: { HOME: home, PATH: process.env.PATH, ...env },
  };
}

async function one(image: string, opts: RegistryOptions): Promise<ImageStartAnswer | LookupFailure> {
  const result = (await lookupImageStarts([image], opts)).get(image);
  expect(result).toBeDefined();
  return result!;
}

async function answer(image: string, opts: RegistryOptions): Promise<ImageStartAnswer> {
  const result = await one(image, opts);
  if (isLookupFailure(result)) throw new Error(`expected an answer, got: ${result.error}`);
  return result;
}

async function failure(image: string, opts: RegistryOptions): Promise<string> {
  const result = await one(image, opts);
  if (!isLookupFailure(result)) throw new Error(`expected a failure, got ${JSON.stringify(result)}`);
  return result.error;
}

beforeAll(async () => {
  pki = await h.makePki(path.join(root, 'pki'));
  tokens = await h.startTokenServer(pki.tokenKey);
  accessTokens = await h.startTokenServer(pki.tokenKey, { field: 'access_token' });
  stops.push(tokens.close, accessTokens.close);
  const storage = path.join(root, 'storage');
  basic = await h.startRegistry(path.join(root, 'basic'), storage, { kind: 'htpasswd', file: path.join(root, 'htpasswd') });
  stops.push(basic.stop);
  // Same storage: what is pushed once is served by all four.
  [token, token2, secure] = await Promise.all([
    h.startRegistry(path.join(root, 'token'), storage, { kind: 'token', realm: tokens.url, rootCert: pki.tokenCertPath }),
    h.startRegistry(path.join(root, 'token2'), storage, { kind: 'token', realm: accessTokens.url, rootCert: pki.tokenCertPath }),
    h.startRegistry(path.join(root, 'secure'), storage, { kind: 'none' }, { cert: pki.tlsCertPath, key: pki.tlsKeyPath }),
  ]);
  stops.push(token.stop, token2.stop, secure.stop);

  const single = h.writeOciLayout(path.join(root, 'oci-single'), [{ architecture: 'amd64', entrypoint: ['vllm', 'serve'], cmd: null }], false);
  const multi = h.writeOciLayout(
    path.join(root, 'oci-multi'),
    [
      { architecture: 'amd64', entrypoint: ['/opt/venv/bin/vllm', 'serve'], cmd: ['--port', '8000'] },
      { architecture: 'arm64', variant: 'v8', entrypoint: ['/opt/venv/bin/vllm-arm', 'serve'], cmd: [] },
    ],
    true,
  );
  const noEntry = h.writeOciLayout(path.join(root, 'oci-noentry'), [{ architecture: 'amd64', entrypoint: null, cmd: ['python3', '-m', 'server'] }], false);
  await Promise.all([
    h.push(single, `${basic.host}/test/single:v1`),
    h.push(multi, `${basic.host}/test/multi:v1`),
    h.push(multi, `${basic.host}/test/dlist:v1`, { format: 'v2s2' }),
    h.push(noEntry, `${basic.host}/test/noentry:v1`),
    h.push(single, `${basic.host}/private/model:v1`),
  ]);
}, 60_000);

afterAll(async () => {
  await Promise.all(stops.map((stop) => stop()));
  rmSync(root, { recursive: true, force: true });
});

describe('images read from a registry (htpasswd Basic from the Docker config auths)', () => {
  it('a single OCI manifest: Entrypoint and Cmd as skopeo reads them', async () => {
    const image = `${basic.host}/test/single:v1`;
    const got = await answer(image, options({}, { DOCKER_CONFIG: dockerConfig(basicAuth(basic.host)) }));
    const reference = await h.skopeoConfig(image);
    expect(got).toMatchObject({ image, entrypoint: ['vllm', 'serve'], cmd: [], platform: 'linux/amd64', source: 'registry' });
    expect(reference.config?.Entrypoint).toEqual(got.entrypoint);
    expect(reference.config?.Cmd ?? []).toEqual(got.cmd);
    expect(got.digest).toMatch(/^sha256:[0-9a-f]{64}$/);
    expect(got.warning).toBeUndefined();
  });

  it('an OCI index: the entry for the platform asked (default linux/amd64; linux/arm64 and linux/arm64/v8)', async () => {
    const image = `${basic.host}/test/multi:v1`;
    const env = { DOCKER_CONFIG: dockerConfig(basicAuth(basic.host)) };
    expect(await answer(image, options({}, env))).toMatchObject({ entrypoint: ['/opt/venv/bin/vllm', 'serve'], cmd: ['--port', '8000'], platform: 'linux/amd64' });
    expect(await answer(image, options({ platform: 'linux/arm64' }, env))).toMatchObject({ entrypoint: ['/opt/venv/bin/vllm-arm', 'serve'], cmd: [], platform: 'linux/arm64/v8' });
    expect(await answer(image, options({ platform: 'linux/arm64/v8' }, env))).toMatchObject({ platform: 'linux/arm64/v8' });
    expect((await h.skopeoConfig(image, ['--override-arch', 'arm64'])).config?.Entrypoint).toEqual(['/opt/venv/bin/vllm-arm', 'serve']);
  });

  it('no entry for the platform: the failure lists the platforms there are', async () => {
    const error = await failure(`${basic.host}/test/multi:v1`, options({ platform: 'linux/s390x' }, { DOCKER_CONFIG: dockerConfig(basicAuth(basic.host)) }));
    expect(error).toContain('has no image for linux/s390x');
    expect(error).toContain('it has linux/amd64, linux/arm64/v8');
  });

  it('a Docker manifest list (v2s2) resolves like an index', async () => {
    const image = `${basic.host}/test/dlist:v1`;
    expect((await h.skopeoRawManifest(image)).mediaType).toBe('application/vnd.docker.distribution.manifest.list.v2+json');
    const env = { DOCKER_CONFIG: dockerConfig(basicAuth(basic.host)) };
    expect(await answer(image, options({}, env))).toMatchObject({ entrypoint: ['/opt/venv/bin/vllm', 'serve'], cmd: ['--port', '8000'], platform: 'linux/amd64' });
    expect(await answer(image, options({ platform: 'linux/arm64' }, env))).toMatchObject({ entrypoint: ['/opt/venv/bin/vllm-arm', 'serve'] });
  });

  it('Entrypoint null, Cmd set: entrypoint [] and the Cmd', async () => {
    const got = await answer(`${basic.host}/test/noentry:v1`, options({}, { DOCKER_CONFIG: dockerConfig(basicAuth(basic.host)) }));
    expect(got).toMatchObject({ entrypoint: [], cmd: ['python3', '-m', 'server'] });
  });

  it('a digest-pinned reference needs no HEAD; with tag@digest the digest wins', async () => {
    const env = { DOCKER_CONFIG: dockerConfig({}) };
    const proxy = await h.startReverseProxy(basic.port);
    try {
      const digest = (await answer(`${basic.host}/test/multi:v1`, options({}, { DOCKER_CONFIG: dockerConfig(basicAuth(basic.host)) }))).digest;
      env.DOCKER_CONFIG = dockerConfig(basicAuth(proxy.host));
      const got = await answer(`${proxy.host}/test/multi:nosuchtag@${digest}`, options({}, env));
      expect(got).toMatchObject({ digest, entrypoint: ['/opt/venv/bin/vllm', 'serve'], source: 'registry' });
      expect(proxy.requests.filter((r) => r.method === 'HEAD')).toEqual([]);
      expect(proxy.requests.some((r) => r.path.includes('nosuchtag'))).toBe(false);
    } finally {
      await proxy.close();
    }
  });

  it('401 without credentials: the failure says there are none, and where it looked', async () => {
    const dir = dockerConfig({ auths: { 'other.example.com': { auth: 'eDp5' } } });
    const error = await failure(`${basic.host}/test/single:v1`, options({}, { DOCKER_CONFIG: dir }));
    expect(error).toBe(`${basic.host}: 401 Unauthorized (no credentials for it in ${dir}/config.json)`);
  });

  it('401 with wrong credentials: the failure names their source', async () => {
    const dir = dockerConfig({ auths: { [`https://${basic.host}`]: { username: h.USER, password: 'wrong' } } });
    const error = await failure(`${basic.host}/test/single:v1`, options({}, { DOCKER_CONFIG: dir }));
    expect(error).toContain(`401 Unauthorized for test/single (credentials from ${dir}/config.json auths["https://${basic.host}"] were refused)`);
  });

  it('404: a tag that does not exist', async () => {
    const error = await failure(`${basic.host}/test/single:v9`, options({}, { DOCKER_CONFIG: dockerConfig(basicAuth(basic.host)) }));
    expect(error).toBe(`${basic.host}: test/single:v9 not found (404: no such repository, tag or digest)`);
  });

  it('each failure carries its kind, the value a door picks its fix by: denied, not-found, unreachable, invalid', async () => {
    const kind = async (image: string, opts: RegistryOptions) => {
      const result = await one(image, opts);
      return isLookupFailure(result) ? result.kind : 'answered';
    };
    expect(await kind(`${basic.host}/test/single:v1`, options({}, { DOCKER_CONFIG: dockerConfig({}) }))).toBe('denied');
    expect(await kind(`${basic.host}/test/single:v9`, options({}, { DOCKER_CONFIG: dockerConfig(basicAuth(basic.host)) }))).toBe('not-found');
    expect(await kind(`127.0.0.1:${await h.freePort()}/test/single:v1`, options({}, { DOCKER_CONFIG: dockerConfig({}) }))).toBe('unreachable');
    expect(await kind(`${basic.host}/test/single:-bad-tag`, options({}, { DOCKER_CONFIG: dockerConfig({}) }))).toBe('invalid');
  });

  it('a credential helper from credHelpers answers with the server URL on stdin', async () => {
    const bin = fresh('bin');
    const seen = path.join(bin, 'seen');
    writeFileSync(
      path.join(bin, 'docker-credential-vpt'),
      `#!/bin/sh\nread -r url || true\nprintf '%s %s' "$1" "$url" > '${seen}'\nif [ "$url" = '${basic.host}' ]; then printf '{"ServerURL":"%s","Username":"${h.USER}","Secret":"${h.PASSWORD}"}' "$url"; else echo 'credentials not found in native keychain'; exit 1; fi\n`,
    );
    chmodSync(path.join(bin, 'docker-credential-vpt'), 0o755);
    const dir = dockerConfig({ credHelpers: { [basic.host]: 'vpt' } });
    const got = await answer(`${basic.host}/test/single:v1`, options({}, { DOCKER_CONFIG: dir, PATH: `${bin}:${process.env.PATH}` }));
    expect(got.entrypoint).toEqual(['vllm', 'serve']);
    expect(readFileSync(seen, 'utf8')).toBe(`get ${basic.host}`);
  });
});

describe('token auth (the bearer flow of Docker Hub, ghcr.io, quay.io, nvcr.io)', () => {
  it('anonymous: a pull token from the realm, then the image', async () => {
    const before = tokens.requests.length;
    const got = await answer(`${token.host}/test/multi:v1`, options({}, { DOCKER_CONFIG: dockerConfig({}) }));
    expect(got.entrypoint).toEqual(['/opt/venv/bin/vllm', 'serve']);
    expect(tokens.requests.slice(before)).toEqual([{ method: 'GET', basicUser: undefined, scope: 'repository:test/multi:pull', grant: undefined }]);
  });

  it('an `access_token` answer works like `token`', async () => {
    const got = await answer(`${token2.host}/test/single:v1`, options({}, { DOCKER_CONFIG: dockerConfig({}) }));
    expect(got.entrypoint).toEqual(['vllm', 'serve']);
  });

  it('a private repository without credentials: 401, no credentials', async () => {
    const dir = dockerConfig({});
    const error = await failure(`${token.host}/private/model:v1`, options({}, { DOCKER_CONFIG: dir }));
    expect(error).toMatch(new RegExp(`^${token.host}: 401 Unauthorized for private/model \\(no credentials for it in ${dir}/config.json; a repository that does not exist gets the same answer\\)`));
  });

  it('a private repository with auths credentials: the realm is asked with Basic', async () => {
    const before = tokens.requests.length;
    const got = await answer(`${token.host}/private/model:v1`, options({}, { DOCKER_CONFIG: dockerConfig(basicAuth(token.host)) }));
    expect(got.entrypoint).toEqual(['vllm', 'serve']);
    expect(tokens.requests.slice(before)).toEqual([{ method: 'GET', basicUser: h.USER, scope: 'repository:private/model:pull', grant: undefined }]);
  });

  it("under a policy (the webhook's lookups), credentials go to a plain-HTTP token realm only on a host registryInsecure names: elsewhere the token is asked for anonymously, and a refusal says why", async () => {
    // The registry is named (insecure, private addresses allowed); its realm is plain HTTP on 127.0.0.1, another port.
    const realmHost = new URL(tokens.url).host;
    const policy = { registries: [token.host], privateRegistries: [token.host] };
    const withCredentials = { DOCKER_CONFIG: dockerConfig(basicAuth(token.host)) };

    let before = tokens.requests.length;
    const open = await answer(`${token.host}/test/multi:v1`, options({ policy, insecureRegistries: [token.host] }, withCredentials));
    expect(open.entrypoint).toEqual(['/opt/venv/bin/vllm', 'serve']);
    expect(tokens.requests.slice(before)).toEqual([{ method: 'GET', basicUser: undefined, scope: 'repository:test/multi:pull', grant: undefined }]);

    before = tokens.requests.length;
    const error = await failure(`${token.host}/private/model:v1`, options({ policy, insecureRegistries: [token.host] }, withCredentials));
    expect(error).toContain(`${token.host}: 401 Unauthorized for private/model (credentials from ${withCredentials.DOCKER_CONFIG}/config.json auths["${token.host}"] were not sent to its token realm http://${realmHost}: plain HTTP to a host registryInsecure does not name (name it there to send them))`);
    expect(tokens.requests.slice(before).every((r) => r.basicUser === undefined)).toBe(true);

    // The realm's host named as insecure too: the credentials go there.
    before = tokens.requests.length;
    const allowed = await answer(`${token.host}/private/model:v1`, options({ policy, insecureRegistries: [token.host, realmHost] }, withCredentials));
    expect(allowed.entrypoint).toEqual(['vllm', 'serve']);
    expect(tokens.requests.slice(before)).toEqual([{ method: 'GET', basicUser: h.USER, scope: 'repository:private/model:pull', grant: undefined }]);
  });

  it('credsStore helper answering `<token>`: an identity token, sent as a refresh_token grant', async () => {
    const bin = fresh('bin');
    writeFileSync(path.join(bin, 'docker-credential-store'), `#!/bin/sh\ncat >/dev/null\nprintf '{"Username":"<token>","Secret":"${h.IDENTITY_TOKEN}"}'\n`);
    chmodSync(path.join(bin, 'docker-credential-store'), 0o755);
    const before = tokens.requests.length;
    const got = await answer(`${token.host}/private/model:v1`, options({}, { DOCKER_CONFIG: dockerConfig({ credsStore: 'store' }), PATH: `${bin}:${process.env.PATH}` }));
    expect(got.entrypoint).toEqual(['vllm', 'serve']);
    expect(tokens.requests.slice(before)).toEqual([{ method: 'POST', basicUser: h.USER, scope: 'repository:private/model:pull', grant: 'refresh_token' }]);
  });
});

describe('failures that must not hang helm', () => {
  it('429: fails at once with Retry-After, one request, no retries', async () => {
    const limited = await h.startRateLimited();
    try {
      const error = await failure(`${limited.host}/test/single:v1`, options());
      expect(error).toContain(`${limited.host}: 429 Too Many Requests (retry after 120 s)`);
      expect(limited.count()).toBe(1);
    } finally {
      await limited.close();
    }
  });

  it('a registry that accepts and never answers: fails within the request timeout', async () => {
    const stalled = await h.startStalled();
    try {
      const started = Date.now();
      const error = await failure(`${stalled.host}/test/single:v1`, options({ requestTimeoutMs: 700 }));
      const took = Date.now() - started;
      expect(error).toContain(`${stalled.host}: no answer within 0.7 s`);
      expect(took).toBeGreaterThanOrEqual(650);
      expect(took).toBeLessThan(2500);
    } finally {
      await stalled.close();
    }
  });

  it('the total budget bounds a run of many stalled lookups', async () => {
    const stalled = await h.startStalled();
    try {
      const images = ['a', 'b', 'c', 'd', 'e'].map((n) => `${stalled.host}/test/${n}:v1`);
      const started = Date.now();
      const results = await lookupImageStarts(images, options({ requestTimeoutMs: 5000, totalTimeoutMs: 900, concurrency: 2 }));
      const took = Date.now() - started;
      expect(took).toBeLessThan(2500);
      for (const image of images) {
        const r = results.get(image)!;
        expect(isLookupFailure(r) && r.error).toContain('the lookup budget of 0.9 s was spent');
      }
    } finally {
      await stalled.close();
    }
  });

  it('a body that does not match its digest is refused', async () => {
    const proxy = await h.startReverseProxy(basic.port, { corrupt: (method, p) => method === 'GET' && p.includes('/manifests/') });
    try {
      const error = await failure(`${proxy.host}/test/single:v1`, options({}, { DOCKER_CONFIG: dockerConfig(basicAuth(proxy.host)) }));
      expect(error).toMatch(/manifest test\/single@sha256:[0-9a-f]{64} does not match its digest \(expected sha256:[0-9a-f]{64}, got sha256:[0-9a-f]{64}\); refusing it/);
    } finally {
      await proxy.close();
    }
    const blobs = await h.startReverseProxy(basic.port, { corrupt: (method, p) => method === 'GET' && p.includes('/blobs/') });
    try {
      const error = await failure(`${blobs.host}/test/single:v1`, options({}, { DOCKER_CONFIG: dockerConfig(basicAuth(blobs.host)) }));
      expect(error).toMatch(/config blob sha256:[0-9a-f]{64} of test\/single does not match its digest/);
    } finally {
      await blobs.close();
    }
  });
});

describe('the cache on disk', () => {
  it('a second run does one HEAD per image (after its 401) and downloads nothing; a pinned digest asks nothing', async () => {
    const proxy = await h.startReverseProxy(basic.port);
    try {
      const cacheDir = fresh('cache');
      const env = { DOCKER_CONFIG: dockerConfig(basicAuth(proxy.host)) };
      const image = `${proxy.host}/test/multi:v1`;
      const first = await answer(image, options({ cacheDir }, env));
      expect(first.source).toBe('registry');
      expect(proxy.requests.filter((r) => r.method === 'GET').length).toBeGreaterThanOrEqual(3); // index, manifest, config
      proxy.requests.length = 0;
      const second = await answer(image, options({ cacheDir }, env));
      expect(second).toMatchObject({ source: 'cache', entrypoint: first.entrypoint, cmd: first.cmd, digest: first.digest });
      expect(new Set(proxy.requests.map((r) => `${r.method} ${r.path}`))).toEqual(new Set(['HEAD /v2/test/multi/manifests/v1']));
      // The layout the docs promise.
      expect(readdirSync(path.join(cacheDir, 'configs'))).toContain(`${first.digest.replace(':', '-')}.json`);
      const tagFile = JSON.parse(readFileSync(path.join(cacheDir, 'tags', proxy.host, 'test', 'multi', 'v1.json'), 'utf8')) as { digest: string; checkedAt: string };
      expect(tagFile.digest).toBe(first.digest);
      // Another platform of the same index is not in the cache yet: read once, then cached too.
      expect(await answer(image, options({ cacheDir, platform: 'linux/arm64' }, env))).toMatchObject({ source: 'registry', platform: 'linux/arm64/v8' });
      proxy.requests.length = 0;
      expect(await answer(`${proxy.host}/test/multi@${first.digest}`, options({ cacheDir }, env))).toMatchObject({ source: 'cache', entrypoint: first.entrypoint });
      expect(proxy.requests).toEqual([]);
    } finally {
      await proxy.close();
    }
  });

  it('registry unreachable: the last answer for the tag, with a warning saying its age; none cached: the failure says why', async () => {
    const proxy = await h.startReverseProxy(basic.port);
    const cacheDir = fresh('cache');
    const env = { DOCKER_CONFIG: dockerConfig(basicAuth(proxy.host)) };
    const image = `${proxy.host}/test/single:v1`;
    const first = await answer(image, options({ cacheDir, now: () => new Date('2026-12-02T09:00:00Z') }, env));
    await proxy.close();
    const stale = await answer(image, options({ cacheDir, now: () => new Date('2026-12-02T12:05:00Z') }, env));
    expect(stale).toMatchObject({ source: 'stale-cache', entrypoint: ['vllm', 'serve'], digest: first.digest, checkedAt: '2026-12-02T09:00:00.000Z' });
    expect(stale.warning).toContain(`${proxy.host}: cannot connect (`);
    expect(stale.warning).toContain(`using the answer cached 3 h 5 min ago (2026-12-02T09:00:00.000Z, ${first.digest})`);
    const error = await failure(`${proxy.host}/test/multi:v1`, options({ cacheDir }, env));
    expect(error).toMatch(/cannot connect \(.*ECONNREFUSED.*\) \(and no earlier answer for this tag is cached\)$/);
  });

  it('the tag moved but the new digest cannot be read (a pull-limit 429 on GET after a free HEAD): the last answer, with a warning', async () => {
    const layout = (entrypoint: string[]) => h.writeOciLayout(fresh('oci'), [{ architecture: 'amd64', entrypoint, cmd: null }], false);
    await h.push(layout(['/old']), `${basic.host}/test/moving:v1`);
    let limited = false;
    const proxy = await h.startReverseProxy(basic.port, { rateLimit: (method) => limited && method === 'GET' });
    try {
      const cacheDir = fresh('cache');
      const env = { DOCKER_CONFIG: dockerConfig(basicAuth(proxy.host)) };
      const image = `${proxy.host}/test/moving:v1`;
      const first = await answer(image, options({ cacheDir, now: () => new Date('2026-12-02T09:00:00Z') }, env));
      await h.push(layout(['/new']), `${basic.host}/test/moving:v1`);
      limited = true;
      const got = await answer(image, options({ cacheDir, now: () => new Date('2026-12-02T09:30:00Z') }, env));
      expect(got).toMatchObject({ source: 'stale-cache', entrypoint: ['/old'], digest: first.digest });
      expect(got.warning).toMatch(/429 Too Many Requests \(retry after 3600 s\); the tag now points at sha256:[0-9a-f]{64}, which could not be read, so using the answer cached 30 min ago/);
      limited = false;
      expect(await answer(image, options({ cacheDir }, env))).toMatchObject({ source: 'registry', entrypoint: ['/new'] });
    } finally {
      await proxy.close();
    }
  });

  it('an unwritable cache directory is a warning; the lookup still answers', async () => {
    const file = path.join(fresh('ro'), 'not-a-directory');
    writeFileSync(file, '');
    const got = await answer(`${basic.host}/test/single:v1`, options({ cacheDir: path.join(file, 'cache') }, { DOCKER_CONFIG: dockerConfig(basicAuth(basic.host)) }));
    expect(got).toMatchObject({ source: 'registry', entrypoint: ['vllm', 'serve'] });
    expect(got.warning).toMatch(/^cache directory .*not-a-directory\/cache is not writable \(ENOTDIR\); answers are not cached/);
  });

  it('XDG_CACHE_HOME is the default place', async () => {
    const xdg = fresh('xdg');
    await answer(`${basic.host}/test/single:v1`, { ...options({}, { DOCKER_CONFIG: dockerConfig(basicAuth(basic.host)), XDG_CACHE_HOME: xdg }), cacheDir: undefined });
    expect(readdirSync(path.join(xdg, 'vram-preflight')).sort()).toEqual(['configs', 'tags']);
  });
});

describe('HTTPS through a proxy (CONNECT), NO_PROXY', () => {
  it('an HTTPS registry through HTTPS_PROXY, verified against the CA given', async () => {
    const proxy = await h.startConnectProxy();
    try {
      const image = `registry.test:${secure.port}/test/single:v1`;
      const got = await answer(image, options({ caFile: pki.tlsCertPath }, { HTTPS_PROXY: proxy.url, NO_PROXY: 'example.com,.corp' }));
      expect(got.entrypoint).toEqual(['vllm', 'serve']);
      expect(new Set(proxy.connects)).toEqual(new Set([`registry.test:${secure.port}`]));
      // Without the CA the certificate is refused.
      const error = await failure(image, options({}, { HTTPS_PROXY: proxy.url }));
      expect(error).toMatch(/^registry\.test:\d+: TLS failed \(.*self[- ]signed certificate/);
      // Listed as insecure: TLS without verification, as Docker does.
      expect((await answer(image, options({ insecureRegistries: [`registry.test:${secure.port}`] }, { HTTPS_PROXY: proxy.url }))).entrypoint).toEqual(['vllm', 'serve']);
    } finally {
      await proxy.close();
    }
  });

  it('a plain-HTTP registry listed as insecure: HTTPS tried first, then HTTP through HTTP_PROXY (absolute-form)', async () => {
    const proxy = await h.startConnectProxy();
    try {
      const host = `plain.test:${basic.port}`;
      const got = await answer(`${host}/test/single:v1`, options({ insecureRegistries: [host] }, { HTTPS_PROXY: proxy.url, HTTP_PROXY: proxy.url, DOCKER_CONFIG: dockerConfig(basicAuth(host)) }));
      expect(got.entrypoint).toEqual(['vllm', 'serve']);
      expect(proxy.connects).toEqual([host]); // the HTTPS attempt, refused by a plain-HTTP server
      expect(proxy.forwarded[0]).toBe(`HEAD http://${host}/v2/test/single/manifests/v1`);
      // Not listed as insecure: HTTPS only, so it fails.
      const error = await failure(`${host}/test/single:v1`, options({}, { HTTPS_PROXY: proxy.url, HTTP_PROXY: proxy.url }));
      expect(error).toMatch(/^plain\.test:\d+: TLS failed/);
    } finally {
      await proxy.close();
    }
  });

  it('NO_PROXY (suffix, host:port, *) and loopback registries go direct', async () => {
    const proxy = await h.startConnectProxy();
    try {
      for (const noProxy of ['.test', `registry.test:${secure.port}`, '*']) {
        const error = await failure(`registry.test:${secure.port}/test/single:v1`, options({ caFile: pki.tlsCertPath, requestTimeoutMs: 2000 }, { HTTPS_PROXY: proxy.url, NO_PROXY: noProxy }));
        expect(error).toMatch(/^registry\.test:\d+: (cannot connect \(.*(ENOTFOUND|EAI_AGAIN)|no answer within)/);
      }
      const got = await answer(`${basic.host}/test/single:v1`, options({}, { HTTPS_PROXY: proxy.url, DOCKER_CONFIG: dockerConfig(basicAuth(basic.host)) }));
      expect(got.entrypoint).toEqual(['vllm', 'serve']);
      expect(proxy.connects).toEqual([]);
    } finally {
      await proxy.close();
    }
  });
});

describe('resolve: config entries that pin the answers', () => {
  it('renders tag and digest entries from real answers', async () => {
    const env = { DOCKER_CONFIG: dockerConfig(basicAuth(basic.host)) };
    const tagged = await answer(`${basic.host}/test/multi:v1`, options({ now: () => new Date('2026-12-02T10:00:00Z') }, env));
    const pinned = await answer(`${basic.host}/test/noentry@${(await answer(`${basic.host}/test/noentry:v1`, options({}, env))).digest}`, options({ now: () => new Date('2026-12-02T10:00:00Z') }, env));
    const text = renderImageEntries([tagged, pinned]);
    expect(text).toBe(
      [
        'images:',
        `  - repository: "${basic.host}/test/multi"`,
        '    tag: v1',
        '    entrypoint: ["/opt/venv/bin/vllm", "serve"]',
        '    cmd: ["--port", "8000"]',
        `    # ${basic.host}/test/multi:v1 = ${tagged.digest}, linux/amd64, read from the registry 2026-12-02`,
        `  - repository: "${basic.host}/test/noentry"`,
        `    digest: ${pinned.digest}`,
        '    # the image has no ENTRYPOINT: a container that gives only args runs args[0] as the program',
        '    entrypoint: []',
        '    cmd: ["python3", "-m", "server"]',
        `    # ${pinned.image}, linux/amd64, read from the registry 2026-12-02`,
        '',
      ].join('\n'),
    );
  });
});
