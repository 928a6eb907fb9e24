/**
 * The registry lookup end to end, through the built bundle (bin → CLI →
 * transform → src/registry) against a real docker-registry on 127.0.0.1:
 * an image the table does not place (vllm-openai v0.12.0, in the releases
 * where its ENTRYPOINT changed) is refused offline, wrapped once the registry
 * answers, wrapped from the cache when the registry is gone, and pinned for
 * air-gapped CI by `resolve`. The registry is on loopback: a render may ask it
 * only once it is allowed (--registry-insecure here, for plain HTTP), and says
 * so when it is not; `resolve` asks the registry of an image typed on its
 * command line wherever it is.
 */
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parse } from 'yaml';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { run, runOk } from '../e2e/helpers.js';
import * as h from './harness.js';

h.requireTools();

const root = mkdtempSync(path.join(tmpdir(), 'vram-preflight-registry-cli-'));
const API_SERVER = ['python3', '-m', 'vllm.entrypoints.openai.api_server'];
let registry: h.Registry;
let bundle: string;
let image: string;

function manifest(ref: string): string {
  return `apiVersion: apps/v1
kind: Deployment
metadata:
  name: gap
spec:
  template:
    spec:
      containers:
        - name: model
          image: ${ref}
          args: [--model, Qwen/Qwen3-8B, --gpu-memory-utilization, "0.9"]
          resources:
            limits:
              nvidia.com/gpu: 1
`;
}

const env = (cache: string) => ({ PATH: process.env.PATH, HOME: root, XDG_CACHE_HOME: cache });

function cli(args: string[], input: string, cache: string) {
  return run(process.execPath, [bundle, ...args], { input, env: env(cache) });
}

/** A render allowed to ask the loopback registry (plain HTTP): --registry-insecure names it. */
const allowed = (args: string[] = []): string[] => [`--registry-insecure=${registry.host}`, ...args];

beforeAll(async () => {
  bundle = path.join(root, 'dist/vram-preflight.cjs');
  runOk(process.execPath, [path.resolve(import.meta.dirname, '../../scripts/build.mjs'), '--outfile', bundle]);
  registry = await h.startRegistry(path.join(root, 'registry'), path.join(root, 'storage'), { kind: 'none' });
  const layout = h.writeOciLayout(path.join(root, 'oci'), [
    { architecture: 'amd64', entrypoint: API_SERVER, cmd: null },
    { architecture: 'arm64', variant: 'v8', entrypoint: ['vllm', 'serve'], cmd: null },
  ], true);
  image = `${registry.host}/vllm/vllm-openai:v0.12.0`;
  await h.push(layout, image);
}, 60_000);

afterAll(async () => {
  await registry?.stop();
});

describe('registry lookup through the CLI', () => {
  const cache = path.join(root, 'cache');

  it('refuses the uncertain tag with lookups off, naming what was tried', () => {
    const r = cli(['--registry-lookup=never'], manifest(image), cache);
    expect(r.status).toBe(1);
    expect(r.stdout).toBe('');
    expect(r.stderr).toContain('error UNKNOWN_START');
    expect(r.stderr).toContain('v0.11.1-v0.14.0');
    expect(r.stderr).toContain('not looked up (registryLookup: never)');
    // The registry was not asked: resolve, which asks it, is the way to read the entry.
    expect(r.stderr).toContain(`\`vram-preflight resolve ${image}\` prints this entry from the registry`);
  });

  it('refuses to ask a registry no one allowed (here: on loopback), naming the flag that allows it; nothing connects there', async () => {
    // A listener where a registry could be, counting who connects.
    let connections = 0;
    const listener = net.createServer((socket) => {
      connections++;
      socket.destroy();
    });
    await new Promise<void>((resolve) => listener.listen(0, '127.0.0.1', resolve));
    const there = `127.0.0.1:${(listener.address() as net.AddressInfo).port}`;
    const r = cli([], manifest(`${there}/vllm/vllm-openai:v0.12.0`), cache);
    await new Promise<void>((resolve) => listener.close(() => resolve()));
    expect(connections).toBe(0);
    expect(r.status).toBe(1);
    expect(r.stdout).toBe('');
    expect(r.stderr).toContain(`lookup failed: its registry ${there} is not one the lookups are allowed to reach`);
    expect(r.stderr).toContain(`--registry-allow ${there} (registryAllow in the config file) allows it; a registry over plain HTTP (a local one) goes in --registry-insecure ${there} instead`);
    expect(r.stderr).toContain('its registry is not one lookups may ask (registryAllow in the config would let it)');
    // Allowed by name, but not as plain HTTP: the lookup is tried over HTTPS only, and fails.
    const https = cli([`--registry-allow=${registry.host}`], manifest(image), cache);
    expect(https.status).toBe(1);
    expect(https.stderr).not.toContain('is not one the lookups are allowed to reach');
  });

  it('resolve of an image the registry does not have: the failure and a fix for it', () => {
    const r = cli(['resolve', `${registry.host}/vllm/vllm-openai:v9.9.9`], '', cache);
    expect(r.status).toBe(1);
    expect(r.stdout).toBe('');
    expect(r.stderr).toContain(`  fix: check the repository and tag: the registry has no ${registry.host}/vllm/vllm-openai:v9.9.9 (skopeo list-tags docker://${registry.host}/vllm/vllm-openai lists the tags)`);
  });

  it('wraps it with the ENTRYPOINT the registry holds for linux/amd64, and explain names the digest', () => {
    const r = cli(allowed(), manifest(image), cache);
    expect(r.status, r.stderr).toBe(0);
    const container = parse(r.stdout).spec.template.spec.containers[0];
    expect(container.command).toEqual(['/bin/sh', '-ec']);
    expect(container.args.slice(1)).toEqual(['--', ...API_SERVER, '--model', 'Qwen/Qwen3-8B', '--gpu-memory-utilization', '0.9']);
    const report = JSON.parse(cli(['explain', '--output', 'json', ...allowed()], manifest(image), cache).stdout);
    expect(report.containers[0].action).toBe('wrap');
    expect(report.containers[0].start.source).toBe('registry');
    expect(report.containers[0].start.digest).toMatch(/^sha256:[0-9a-f]{64}$/);
    const arm = cli(allowed(['--registry-platform=linux/arm64']), manifest(image), cache);
    expect(parse(arm.stdout).spec.template.spec.containers[0].args.slice(2, 4)).toEqual(['vllm', 'serve']);
  });

  it('uses the cached answer, with a warning, when the registry is gone; resolve pins it for air-gapped CI', async () => {
    const pinned = cli(['resolve', image], '', cache);
    expect(pinned.status, pinned.stderr).toBe(0);
    expect(pinned.stdout).toContain('entrypoint: ["python3", "-m", "vllm.entrypoints.openai.api_server"]');
    const config = path.join(root, 'pinned.yaml');
    writeFileSync(config, pinned.stdout);
    await registry.stop();
    const stale = cli(allowed(), manifest(image), cache);
    expect(stale.status, stale.stderr).toBe(0);
    expect(stale.stderr).toMatch(/warning: .*cached/);
    const airGapped = cli(['--registry-lookup=never', `--config=${config}`], manifest(image), path.join(root, 'empty-cache'));
    expect(airGapped.status, airGapped.stderr).toBe(0);
    expect(parse(airGapped.stdout).spec.template.spec.containers[0].args.slice(2, 5)).toEqual(API_SERVER);
    const nothing = cli(allowed(), manifest(image), path.join(root, 'other-cache'));
    expect(nothing.status).toBe(1);
    expect(nothing.stderr).toContain('lookup failed');
    // Right after the registry proved unreachable, resolve (the same registry) is not the fix: reading the image where it can be pulled is.
    expect(nothing.stderr).not.toContain('vram-preflight resolve');
    // resolve against the registry that is gone: the failure, and a fix for an unreachable registry.
    const unreachable = cli(['resolve', image], '', path.join(root, 'other-cache'));
    expect(unreachable.status).toBe(1);
    expect(unreachable.stdout).toBe('');
    expect(unreachable.stderr).toMatch(new RegExp(`^vram-preflight: error IO: image "${image.replace(/[.]/g, '\\.')}": .*cannot connect.*\n  fix: the registry cannot be reached from here: check the way to it \\(HTTPS_PROXY`));
    expect(nothing.stderr).toContain(`the registry did not answer from here, so read the image's ENTRYPOINT where it can be pulled (\`skopeo inspect --config docker://${image}\``);
    expect(parse(readFileSync(config, 'utf8')).images[0]).toMatchObject({ repository: `${registry.host}/vllm/vllm-openai`, tag: 'v0.12.0', entrypoint: API_SERVER, cmd: [] });
  }, 60_000);
});
