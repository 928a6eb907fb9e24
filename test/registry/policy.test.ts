/**
 * Lookups under a policy (src/registry/allow.ts), as the webhook makes them:
 * registries asked by name only when allowed, connections only to public
 * addresses (checked on the address a name resolves to), and a process-wide
 * cap on lookups in flight. A TCP listener on loopback counts every
 * connection that reaches it.
 */
import net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { isPublicAddress, registryAllowed } from '../../src/registry/allow.js';
import { lookupImageStarts, lookupsInFlight, setLookupLimit, type RegistryOptions } from '../../src/registry/index.js';
import { listen, closeServer } from './harness.js';

describe('which registries a policy allows', () => {
  const policy = { registries: ['docker.io', 'registry.example.com', 'mirror.example.com:5000', '*.corp.example'], privateRegistries: ['mirror.example.com:5000'] };
  it.each([
    ['docker.io', true, false],
    ['registry.example.com', true, false],
    ['REGISTRY.example.com', true, false],
    // A host allows its default port only: another port is another service.
    ['registry.example.com:5000', false, false],
    ['mirror.example.com:5000', true, true],
    ['mirror.example.com', false, false],
    ['a.corp.example', true, false],
    ['a.b.corp.example', true, false],
    ['corp.example', false, false],
    ['a.corp.example:8443', false, false],
    ['evilcorp.example', false, false],
    ['127.0.0.1:5000', false, false],
    ['169.254.169.254', false, false],
  ])('%s: allowed %s, private addresses %s', (registry, allowed, privateAddresses) => {
    expect(registryAllowed(registry, policy)).toEqual({ allowed, privateAddresses });
  });

  it('without a policy (the CLI) every registry, at any address', () => {
    expect(registryAllowed('127.0.0.1:5000', undefined)).toEqual({ allowed: true, privateAddresses: true });
  });

  it.each([
    ['8.8.8.8', true],
    ['140.82.112.3', true],
    ['127.0.0.1', false],
    ['127.9.9.9', false],
    ['10.1.2.3', false],
    ['172.16.0.1', false],
    ['172.32.0.1', true],
    ['192.168.1.1', false],
    ['169.254.169.254', false],
    ['100.64.0.1', false],
    ['0.0.0.0', false],
    ['224.0.0.1', false],
    ['255.255.255.255', false],
    ['2606:4700::1111', true],
    ['::1', false],
    ['::', false],
    ['fe80::1', false],
    ['fd00::1', false],
    ['fc00::1', false],
    ['::ffff:127.0.0.1', false],
    ['::ffff:7f00:1', false],
    ['::ffff:8.8.8.8', true],
    ['64:ff9b::a9fe:a9fe', false],
    ['[::1]', false],
    ['not-an-address', false],
  ])('%s public: %s', (address, expected) => {
    expect(isPublicAddress(address)).toBe(expected);
  });
});

/** A TCP listener that never answers and counts the connections it gets, and the most at once. */
async function counting(): Promise<{ port: number; total: () => number; most: () => number; close(): Promise<void> }> {
  let total = 0;
  let open = 0;
  let most = 0;
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    total++;
    most = Math.max(most, ++open);
    sockets.add(socket);
    socket.on('error', () => {});
    socket.on('close', () => open--);
    // Read (and drop) what comes: a socket not read never sees the client's close.
    socket.resume();
  });
  const port = await listen(server);
  return {
    port,
    total: () => total,
    most: () => most,
    close: async () => {
      for (const s of sockets) s.destroy();
      await closeServer(server);
    },
  };
}

const options = (policy: RegistryOptions['policy'], over: Partial<RegistryOptions> = {}): RegistryOptions => ({ platform: 'linux/amd64', requestTimeoutMs: 1500, totalTimeoutMs: 1500, env: {}, cacheDir: '/nonexistent/cache', policy, ...over });

afterEach(() => setLookupLimit(8));

describe('lookups under a policy', () => {
  it('a registry the policy does not name is not connected to: the failure says it is not allowed', async () => {
    const target = await counting();
    try {
      const image = `127.0.0.1:${target.port}/vllm/vllm-openai:v0.12.0`;
      const answer = (await lookupImageStarts([image], options({ registries: ['docker.io'], privateRegistries: [] }))).get(image)!;
      expect(answer).toMatchObject({ notAllowed: true, error: expect.stringMatching(/is not one the lookups are allowed to reach/) });
      expect(target.total()).toBe(0);
    } finally {
      await target.close();
    }
  });

  it('an allowed name that resolves to a private address (loopback here) is refused on the address, before any connection; named as private, it is reached', async () => {
    const target = await counting();
    try {
      const registry = `localhost:${target.port}`;
      const image = `${registry}/vllm/vllm-openai:v0.12.0`;
      const refused = (await lookupImageStarts([image], options({ registries: [registry], privateRegistries: [] }))).get(image)!;
      expect(refused).toMatchObject({ error: expect.stringMatching(/resolves to no public address/) });
      expect(refused).not.toHaveProperty('notAllowed');
      expect(target.total()).toBe(0);
      // An address written as one is checked as it is.
      const literal = `127.0.0.1:${target.port}`;
      expect((await lookupImageStarts([`${literal}/x/y:1`], options({ registries: [literal], privateRegistries: [] }))).get(`${literal}/x/y:1`)).toMatchObject({ error: expect.stringMatching(/not a public address/) });
      expect(target.total()).toBe(0);
      // Named as private (an operator's in-cluster mirror): connected to (and it never answers).
      await lookupImageStarts([image], options({ registries: [registry], privateRegistries: [registry] }, { requestTimeoutMs: 300, totalTimeoutMs: 300 }));
      expect(target.total()).toBeGreaterThan(0);
    } finally {
      await target.close();
    }
  });

  it('200 distinct images of a registry that never answers: at most the process-wide cap of lookups connect at once, from every call together', async () => {
    const target = await counting();
    try {
      setLookupLimit(8);
      const registry = `127.0.0.1:${target.port}`;
      const policy = { registries: [registry], privateRegistries: [registry] };
      // As the webhook asks: one call per image, all at once.
      const calls = Array.from({ length: 200 }, (_, i) => lookupImageStarts([`${registry}/vllm/vllm-openai:t${i}`], options(policy, { requestTimeoutMs: 400, totalTimeoutMs: 1200, insecureRegistries: [registry] })));
      await new Promise((resolve) => setTimeout(resolve, 200));
      expect(lookupsInFlight()).toBe(8);
      const answers = await Promise.all(calls);
      expect(target.most()).toBeLessThanOrEqual(8);
      expect(answers.every((a) => 'error' in [...a.values()][0]!)).toBe(true);
      // Those that waited past their own deadline for a slot say so.
      expect(answers.some((a) => /too many lookups in flight/.test(String((([...a.values()][0] as { error?: string }).error))))).toBe(true);
    } finally {
      await target.close();
    }
  }, 20_000);
});
