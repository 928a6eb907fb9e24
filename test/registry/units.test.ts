/** The pure parts of the registry lookup: NO_PROXY, platforms, challenges, YAML, modes. */
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { defaultCacheDir } from '../../src/registry/cache.js';
import { formatPlatform, parsePlatform, platformMatches } from '../../src/registry/client.js';
import { dockerConfigPath, parseChallenge } from '../../src/registry/credentials.js';
import { noProxyMatches, proxyFor } from '../../src/registry/http.js';
import { age, isLookupFailure, lookupImageStarts, renderImageEntries, type ImageStartAnswer } from '../../src/registry/index.js';

describe('NO_PROXY', () => {
  it.each([
    ['*', 'registry.example.com', '443', true],
    ['example.com', 'example.com', '443', true],
    ['example.com', 'registry.example.com', '443', true],
    ['example.com', 'badexample.com', '443', false],
    ['.example.com', 'registry.example.com', '443', true],
    ['.example.com', 'example.com', '443', false],
    ['*.example.com', 'registry.example.com', '443', true],
    ['registry.example.com:5000', 'registry.example.com', '5000', true],
    ['registry.example.com:5000', 'registry.example.com', '443', false],
    ['other.com, example.com', 'ghcr.example.com', '443', true],
    ['10.0.0.0/8', '10.1.2.3', '443', true],
    ['10.0.0.0/8', '11.1.2.3', '443', false],
    ['10.1.2.3', '10.1.2.3', '443', true],
    ['fd00::/8', '[fd00::1]', '443', true],
    ['fd00::/8', '[fe80::1]', '443', false],
    ['2001:db8:1::/48', '[2001:db8:1:ffff::7]', '443', true],
    ['10.0.0.0/33', '10.1.2.3', '443', false],
    ['10.0.0.0/8', '[::ffff:10.1.2.3]', '443', false],
    ['not-an-address/8', '10.1.2.3', '443', false],
    ['', 'example.com', '443', false],
  ])('NO_PROXY=%j, host %s:%s → %s', (noProxy, host, port, expected) => {
    expect(noProxyMatches(noProxy, host, port)).toBe(expected);
  });

  it('picks HTTPS_PROXY for https, HTTP_PROXY for http, lower-case too; never for loopback', () => {
    const env = { HTTPS_PROXY: 'http://proxy:3128', http_proxy: 'proxy2:8080', NO_PROXY: 'internal.corp' };
    expect(proxyFor(new URL('https://ghcr.io/v2/'), env)?.host).toBe('proxy:3128');
    expect(proxyFor(new URL('http://registry.lan/v2/'), env)?.host).toBe('proxy2:8080');
    expect(proxyFor(new URL('https://r.internal.corp/v2/'), env)).toBeUndefined();
    expect(proxyFor(new URL('https://127.0.0.1:5000/v2/'), env)).toBeUndefined();
    expect(proxyFor(new URL('https://localhost:5000/v2/'), env)).toBeUndefined();
    expect(proxyFor(new URL('https://ghcr.io/v2/'), {})).toBeUndefined();
  });
});

describe('platforms', () => {
  it('parses os/architecture[/variant], with the usual aliases', () => {
    expect(parsePlatform('linux/amd64')).toEqual({ os: 'linux', architecture: 'amd64' });
    expect(parsePlatform('linux/x86_64')).toEqual({ os: 'linux', architecture: 'amd64' });
    expect(parsePlatform('linux/arm64/v8')).toEqual({ os: 'linux', architecture: 'arm64', variant: 'v8' });
    expect(() => parsePlatform('amd64')).toThrow(/os\/architecture/);
    expect(formatPlatform({ os: 'linux', architecture: 'arm', variant: 'v7' })).toBe('linux/arm/v7');
  });

  it('arm64 without a variant is arm64/v8; a variant asked must match', () => {
    expect(platformMatches({ os: 'linux', architecture: 'arm64' }, parsePlatform('linux/arm64/v8'))).toBe(true);
    expect(platformMatches({ os: 'linux', architecture: 'arm64', variant: 'v8' }, parsePlatform('linux/arm64'))).toBe(true);
    expect(platformMatches({ os: 'linux', architecture: 'arm', variant: 'v6' }, parsePlatform('linux/arm/v7'))).toBe(false);
    expect(platformMatches({ os: 'windows', architecture: 'amd64' }, parsePlatform('linux/amd64'))).toBe(false);
  });

  it('a bad platform option fails every image with the reason, without network', async () => {
    const results = await lookupImageStarts(['vllm/vllm-openai:custom'], { platform: 'amd64', requestTimeoutMs: 100, totalTimeoutMs: 100, env: {} });
    const r = results.get('vllm/vllm-openai:custom')!;
    expect(isLookupFailure(r) && r.error).toMatch(/platform "amd64" is not os\/architecture/);
  });
});

describe('references', () => {
  it('a malformed reference fails without network', async () => {
    const results = await lookupImageStarts(['Registry.Example.com/UPPER Case:tag', 'repo/x@sha256:short'], { platform: 'linux/amd64', requestTimeoutMs: 100, totalTimeoutMs: 100, env: {} });
    expect([...results.values()].map((r) => (isLookupFailure(r) ? r.error : 'answer'))).toEqual([
      'not an image reference: repository "upper case" is not a valid name',
      'not an image reference: digest "sha256:short" is not sha256:<64 hex> or sha512:<128 hex>',
    ]);
  });
});

describe('auth challenge and file locations', () => {
  it('parses WWW-Authenticate', () => {
    expect(parseChallenge('Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:vllm/vllm-openai:pull"')).toEqual({
      scheme: 'bearer',
      params: { realm: 'https://auth.docker.io/token', service: 'registry.docker.io', scope: 'repository:vllm/vllm-openai:pull' },
    });
    expect(parseChallenge('Basic realm="Registry Realm"')).toEqual({ scheme: 'basic', params: { realm: 'Registry Realm' } });
    expect(parseChallenge(undefined)).toBeUndefined();
  });

  it('Docker config and cache directories follow DOCKER_CONFIG, XDG_CACHE_HOME, HOME', () => {
    const home = () => '/nonexistent';
    expect(dockerConfigPath({ DOCKER_CONFIG: '/etc/docker-cfg/' }, home)).toBe('/etc/docker-cfg/config.json');
    expect(dockerConfigPath({ HOME: '/home/argocd' }, home)).toBe('/home/argocd/.docker/config.json');
    expect(defaultCacheDir({ XDG_CACHE_HOME: '/var/cache', HOME: '/h' }, home)).toBe('/var/cache/vram-preflight');
    expect(defaultCacheDir({ HOME: '/h' }, home)).toBe('/h/.cache/vram-preflight');
    expect(defaultCacheDir({}, home)).toBe('/nonexistent/.cache/vram-preflight');
  });

  it('ages read as people say them', () => {
    const now = new Date('2026-12-02T12:00:00Z');
    expect(age('2026-12-02T11:59:30Z', now)).toBe('less than a minute');
    expect(age('2026-12-02T11:15:00Z', now)).toBe('45 min');
    expect(age('2026-12-01T09:30:00Z', now)).toBe('26 h 30 min');
    expect(age('2026-11-25T12:00:00Z', now)).toBe('7 days');
  });
});

describe('renderImageEntries', () => {
  const base: Omit<ImageStartAnswer, 'image'> = { entrypoint: ['/opt/venv/bin/vllm', 'serve'], cmd: [], digest: `sha256:${'a'.repeat(64)}`, platform: 'linux/amd64', source: 'registry', checkedAt: '2026-12-02T10:00:00.000Z' };
  it('Docker Hub names without library/, other registries with their host; tags that YAML would retype are quoted', () => {
    const text = renderImageEntries([
      { ...base, image: 'lmcache/vllm-openai:nightly-2026-08-18-cu129' },
      { ...base, image: 'ubuntu:24.04', entrypoint: [], cmd: ['/bin/bash'] },
      { ...base, image: 'nvcr.io/nim/meta/llama:true' },
      { ...base, image: `registry.example.com:5000/ml/vllm@sha256:${'b'.repeat(64)}`, digest: `sha256:${'b'.repeat(64)}`, source: 'stale-cache', checkedAt: '2026-11-30T08:00:00.000Z' },
      { ...base, image: 'corp/model', entrypoint: ['python3', '-c', 'print("a: b")'] },
    ]);
    expect(parse(text)).toEqual({
      images: [
        { repository: 'lmcache/vllm-openai', tag: 'nightly-2026-08-18-cu129', entrypoint: ['/opt/venv/bin/vllm', 'serve'], cmd: [] },
        { repository: 'ubuntu', tag: '24.04', entrypoint: [], cmd: ['/bin/bash'] },
        { repository: 'nvcr.io/nim/meta/llama', tag: 'true', entrypoint: ['/opt/venv/bin/vllm', 'serve'], cmd: [] },
        { repository: 'registry.example.com:5000/ml/vllm', digest: `sha256:${'b'.repeat(64)}`, entrypoint: ['/opt/venv/bin/vllm', 'serve'], cmd: [] },
        { repository: 'corp/model', tag: 'latest', entrypoint: ['python3', '-c', 'print("a: b")'], cmd: [] },
      ],
    });
    expect(text).toContain('    # lmcache/vllm-openai:nightly-2026-08-18-cu129 = sha256:aaaa');
    expect(text).toContain('from the cache (registry unreachable), last confirmed 2026-11-30');
  });
});
