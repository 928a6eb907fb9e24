/**
 * The webhook and Argo CD sidecar images, built by scripts/build-image.sh
 * (buildah, vfs storage, from scratch, offline): the same inputs give the same
 * digest; pushed with skopeo to a real docker-registry (TLS, htpasswd) their
 * config says what runs and as whom; unpacked with umoci, their root
 * filesystems run vram-preflight (chroot: podman and crun cannot start
 * containers here) with nothing from this machine but the kernel.
 */
import { execFile, spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { cpSync, copyFileSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import https from 'node:https';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseAllDocuments, parse as parseYaml } from 'yaml';
import { PASSWORD, USER, makePki, startRegistry, type Registry } from '../registry/harness.js';

const run = promisify(execFile);
const ROOT = path.join(import.meta.dirname, '../..');
const VERSION = (JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { version: string }).version;
const TOOLS = ['buildah', 'umoci', 'skopeo', 'docker-registry', 'chroot', 'openssl'];

let work = '';
let registry: Registry | undefined;
let certDir = '';
const archives = { webhook: '', webhookAgain: '', cmp: '' };

async function build(target: 'webhook' | 'argocd-cmp', out: string): Promise<string> {
  await run('bash', [path.join(ROOT, 'scripts/build-image.sh'), target], { cwd: ROOT, env: { ...process.env, IMAGE_OUT: out }, timeout: 120_000 });
  return out;
}
const skopeo = async (args: string[]) => (await run('skopeo', ['--insecure-policy', ...args], { timeout: 30_000 })).stdout;
const creds = () => ['--creds', `${USER}:${PASSWORD}`, '--cert-dir', certDir];
const digest = (archive: string) => skopeo(['inspect', '--format', '{{.Digest}}', `oci-archive:${archive}`]).then((s) => s.trim());

/** umoci unpack of the archive's image; returns the root filesystem. */
async function unpack(archive: string, name: string): Promise<string> {
  const layout = path.join(work, `${name}-layout`);
  const bundle = path.join(work, `${name}-bundle`);
  mkdirSync(layout);
  await run('tar', ['-xf', archive, '-C', layout]);
  await run('umoci', ['unpack', '--image', `${layout}:${name}:${VERSION}`, bundle], { timeout: 60_000 });
  return path.join(bundle, 'rootfs');
}
/** A command in the root filesystem, with no environment but the image's, as a given user. */
function inRootfs(rootfs: string, user: string, env: Record<string, string>, argv: string[]) {
  const chroot = spawnSync('sh', ['-c', 'command -v chroot'], { encoding: 'utf8' }).stdout.trim();
  return spawnSync('env', ['-i', ...Object.entries(env).map(([k, v]) => `${k}=${v}`), chroot, `--userspec=${user}`, rootfs, ...argv], { encoding: 'utf8', timeout: 60_000 });
}
const envOf = (config: { config: { Env?: string[] } }) => Object.fromEntries((config.config.Env ?? []).map((kv) => [kv.slice(0, kv.indexOf('=')), kv.slice(kv.indexOf('=') + 1)]));
const cacheFiles = (dir: string) => readdirSync(dir).filter((f) => f.endsWith('.v8cache'));

beforeAll(async () => {
  const missing = TOOLS.filter((tool) => spawnSync('sh', ['-c', `command -v ${tool}`]).status !== 0);
  if (missing.length > 0) throw new Error(`the image tests need ${missing.join(', ')} (Debian packages buildah, umoci, skopeo, docker-registry): run ./scripts/test.sh, which installs them`);
  if (!statSync(path.join(ROOT, '.cache/helm/v3/helm'), { throwIfNoEntry: false })) throw new Error('no .cache/helm/v3/helm: run scripts/fetch-helm.sh');
  work = mkdtempSync(path.join(tmpdir(), 'image-test-'));
  const pki = await makePki(path.join(work, 'pki'));
  certDir = path.join(work, 'certs');
  mkdirSync(certDir);
  copyFileSync(pki.tlsCertPath, path.join(certDir, 'ca.crt'));
  const [webhook, webhookAgain, cmp, started] = await Promise.all([
    build('webhook', path.join(work, 'webhook.oci.tar')),
    build('webhook', path.join(work, 'webhook-again.oci.tar')),
    build('argocd-cmp', path.join(work, 'cmp.oci.tar')),
    startRegistry(path.join(work, 'registry'), path.join(work, 'storage'), { kind: 'htpasswd', file: path.join(work, 'htpasswd') }, { cert: pki.tlsCertPath, key: pki.tlsKeyPath }),
  ]);
  Object.assign(archives, { webhook, webhookAgain, cmp });
  registry = started;
}, 240_000);

afterAll(async () => {
  await registry?.stop();
  if (work) rmSync(work, { recursive: true, force: true });
});

describe('the webhook image', () => {
  type Config = { config: { User?: string; Entrypoint?: string[]; Cmd?: string[]; Env?: string[]; Labels?: Record<string, string> }; architecture: string; os: string; history?: unknown[] };
  let config: Config;
  let rootfs = '';
  const ref = () => `docker://${registry!.host}/vram-preflight/webhook:${VERSION}`;

  beforeAll(async () => {
    await skopeo(['copy', '--quiet', '--dest-creds', `${USER}:${PASSWORD}`, '--dest-cert-dir', certDir, `oci-archive:${archives.webhook}`, ref()]);
    config = JSON.parse(await skopeo(['inspect', '--config', ...creds(), ref()])) as Config;
    rootfs = await unpack(archives.webhook, 'vram-preflight-webhook');
  }, 120_000);

  it('is the same image, in the same archive bytes, when built twice from the same inputs', async () => {
    const [first, second] = await Promise.all([digest(archives.webhook), digest(archives.webhookAgain)]);
    expect(first).toMatch(/^sha256:[0-9a-f]{64}$/);
    expect(second).toBe(first);
    expect(readFileSync(archives.webhookAgain).equals(readFileSync(archives.webhook))).toBe(true);
  });

  it('keeps its digest in the registry', async () => {
    const pushed = JSON.parse(await skopeo(['inspect', ...creds(), ref()])) as { Digest: string };
    expect(pushed.Digest).toBe(await digest(archives.webhook));
  });

  it('runs the webhook as a non-root user, with the OCI labels', () => {
    expect(config.os).toBe('linux');
    expect(config.architecture).toBe('amd64');
    expect(config.config.Entrypoint).toEqual(['/nodejs/bin/node', '/app/vram-preflight.cjs']);
    expect(config.config.Cmd).toEqual(['webhook']);
    expect(config.config.User).toBe('65532:65532');
    expect(config.config.Labels).toEqual({
      'org.opencontainers.image.title': 'vram-preflight-webhook',
      'org.opencontainers.image.description': expect.any(String),
      'org.opencontainers.image.version': VERSION,
      'org.opencontainers.image.source': 'https://github.com/vram-preflight/vram-preflight',
      'org.opencontainers.image.licenses': 'MIT',
    });
    // The chart's runAsUser is the image's user, and it has a name.
    expect(readFileSync(path.join(rootfs, 'etc/passwd'), 'utf8')).toMatch(/^nonroot:x:65532:65532:/m);
  });

  it('holds Node, its libraries, the bundle and its code cache, and no shell', () => {
    expect(readdirSync(path.join(rootfs, 'app')).sort()).toEqual(['vram-preflight.app.js', 'vram-preflight.audit.cjs', 'vram-preflight.cjs', 'vram-preflight.webhook.cjs', ...cacheFiles(path.join(rootfs, 'app'))].sort());
    expect(cacheFiles(path.join(rootfs, 'app'))).toHaveLength(1);
    for (const f of ['vram-preflight.app.js', 'vram-preflight.webhook.cjs', 'vram-preflight.audit.cjs']) expect(readFileSync(path.join(rootfs, 'app', f))).toEqual(readFileSync(path.join(ROOT, 'dist', f)));
    for (const shell of ['bin/sh', 'usr/bin/sh', 'bin/bash', 'usr/bin/bash']) expect(statSync(path.join(rootfs, shell), { throwIfNoEntry: false }), shell).toBeUndefined();
  });

  it('runs vram-preflight from its root filesystem, as its user, with the code cache it was built with', () => {
    const appDir = path.join(rootfs, 'app');
    const [cache] = cacheFiles(appDir);
    const before = readFileSync(path.join(appDir, cache!));
    const r = inRootfs(rootfs, '65532:65532', envOf(config), [...config.config.Entrypoint!, '--version']);
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    expect(r.stdout.trim()).toBe(VERSION);
    // As root (the directory is writable then), a rejected cache would be rewritten: it is not.
    const asRoot = inRootfs(rootfs, '0:0', envOf(config), [...config.config.Entrypoint!, '--version']);
    expect(asRoot.status).toBe(0);
    expect(cacheFiles(appDir)).toEqual([cache]);
    expect(readFileSync(path.join(appDir, cache!))).toEqual(before);
  });

  it('prints the webhook help', () => {
    const r = inRootfs(rootfs, '65532:65532', envOf(config), [...config.config.Entrypoint!, ...config.config.Cmd!, '--help']);
    expect(r.status).toBe(0);
    expect(r.stdout).toContain('vram-preflight webhook --tls-cert-file');
  });

  it("serves HTTPS with the chart's generated certificate and config, started as the chart's Deployment starts it", async () => {
    // What the kubelet would mount: the chart's Secret and ConfigMap, at the Deployment's mount paths.
    type Obj = { kind: string; metadata: { name: string }; data: Record<string, string>; spec: { template: { spec: { containers: { args: string[]; volumeMounts: { name: string; mountPath: string }[] }[] } } } };
    const rendered = spawnSync(path.join(ROOT, '.cache/helm/v3/helm'), ['template', 'gate', path.join(ROOT, 'deploy/webhook'), '--namespace', 'vram-preflight', '--set', 'config.timeoutSeconds=600'], { encoding: 'utf8' });
    expect(rendered.status).toBe(0);
    const objs = parseAllDocuments(rendered.stdout).map((d) => d.toJS() as Obj);
    const secret = objs.find((o) => o.kind === 'Secret' && o.metadata.name.endsWith('-tls'))!;
    const configMap = objs.find((o) => o.kind === 'ConfigMap')!;
    const container = objs.find((o) => o.kind === 'Deployment')!.spec.template.spec.containers[0]!;
    const mount = (name: string) => path.join(rootfs, container.volumeMounts.find((m) => m.name === name)!.mountPath);
    mkdirSync(mount('tls'), { recursive: true });
    mkdirSync(mount('config'), { recursive: true });
    for (const key of ['tls.crt', 'tls.key', 'ca.crt']) writeFileSync(path.join(mount('tls'), key), Buffer.from(secret.data[key]!, 'base64'));
    writeFileSync(path.join(mount('config'), 'config.yaml'), configMap.data['config.yaml']!);
    expect(parseYaml(configMap.data['config.yaml']!)).toEqual({ timeoutSeconds: 600 });

    const args = container.args.map((a) => (a.startsWith('--port=') ? '--port=0' : a));
    const chroot = spawnSync('sh', ['-c', 'command -v chroot'], { encoding: 'utf8' }).stdout.trim();
    const env = Object.entries(envOf(config)).map(([k, v]) => `${k}=${v}`);
    const server = spawn('env', ['-i', ...env, chroot, '--userspec=65532:65532', rootfs, ...config.config.Entrypoint!, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    server.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
    const exited = new Promise<number | null>((resolve) => server.on('exit', (code) => resolve(code)));
    try {
      const port = await new Promise<number>((resolve, reject) => {
        let out = '';
        server.stdout!.on('data', (d: Buffer) => {
          out += d.toString();
          const m = /listening (\d+)/.exec(out);
          if (m) resolve(Number(m[1]));
        });
        void exited.then((code) => reject(new Error(`webhook exited ${code}: ${stderr}`)));
      });
      // As the API server and the kubelet reach it: the Service's name, the chart's CA.
      const get = (p: string) =>
        new Promise<number>((resolve, reject) => {
          https
            .get({ host: '127.0.0.1', port, path: p, servername: 'gate-vram-preflight-webhook.vram-preflight.svc', ca: Buffer.from(secret.data['ca.crt']!, 'base64') }, (res) => {
              res.resume();
              resolve(res.statusCode!);
            })
            .on('error', reject);
        });
      expect(await get('/healthz')).toBe(200);
      expect(await get('/readyz')).toBe(200);
    } finally {
      server.kill('SIGTERM');
    }
    expect(await exited).toBe(0);
  });
});

describe('the Argo CD sidecar image', () => {
  type Config = { config: { User?: string; Entrypoint?: string[] | null; Env?: string[]; Labels?: Record<string, string> } };
  let config: Config;
  let rootfs = '';
  const ref = () => `docker://${registry!.host}/vram-preflight/cmp:${VERSION}`;

  beforeAll(async () => {
    await skopeo(['copy', '--quiet', '--dest-creds', `${USER}:${PASSWORD}`, '--dest-cert-dir', certDir, `oci-archive:${archives.cmp}`, ref()]);
    config = JSON.parse(await skopeo(['inspect', '--config', ...creds(), ref()])) as Config;
    rootfs = await unpack(archives.cmp, 'vram-preflight-cmp');
  }, 120_000);

  it('runs as uid 999 with helm homes under /tmp, and carries the OCI labels', () => {
    expect(config.config.User).toBe('999:999');
    expect(envOf(config)).toMatchObject({ HELM_CACHE_HOME: '/tmp/helm/cache', HELM_CONFIG_HOME: '/tmp/helm/config', HELM_DATA_HOME: '/tmp/helm/data' });
    expect(config.config.Labels).toMatchObject({ 'org.opencontainers.image.title': 'vram-preflight-cmp', 'org.opencontainers.image.version': VERSION, 'org.opencontainers.image.licenses': 'MIT' });
  });

  it('has the commands plugin.yaml names, vram-preflight and helm v3 on PATH', () => {
    const plugin = parseAllDocuments(readFileSync(path.join(ROOT, 'deploy/argocd/plugin.yaml'), 'utf8'))[0]!.toJS() as { spec: { init: { command: string[] }; generate: { command: string[] } } };
    for (const command of [plugin.spec.init.command[0]!, plugin.spec.generate.command[0]!]) {
      expect(statSync(path.join(rootfs, command)).mode & 0o111, command).not.toBe(0);
    }
    const version = inRootfs(rootfs, '999:999', envOf(config), ['vram-preflight', '--version']);
    expect(version.stderr).toBe('');
    expect(version.stdout.trim()).toBe(VERSION);
    const helm = inRootfs(rootfs, '999:999', envOf(config), ['helm', 'version', '--template', '{{.Version}}']);
    expect(helm.stdout).toMatch(/^v3\./);
  });

  it('its helm is the binary scripts/fetch-helm.sh pins by sha256, and the build refuses any other', () => {
    const pinned = /^ {4}3\) echo "\S+ \S+ v3\.\S+ ([0-9a-f]{64})" ;;$/m.exec(readFileSync(path.join(ROOT, 'scripts/fetch-helm.sh'), 'utf8'))![1]!;
    expect(createHash('sha256').update(readFileSync(path.join(rootfs, 'usr/local/bin/helm'))).digest('hex')).toBe(pinned);
    // A cached helm that is not those bytes (but may well say it is v3.17.2) is refused.
    const cache = path.join(work, 'helm-cache');
    mkdirSync(path.join(cache, 'v3'), { recursive: true });
    writeFileSync(path.join(cache, 'v3/helm'), Buffer.concat([readFileSync(path.join(ROOT, '.cache/helm/v3/helm')), Buffer.from('x')]));
    const check = spawnSync('bash', [path.join(ROOT, 'scripts/fetch-helm.sh'), '--check', '3'], { encoding: 'utf8', env: { ...process.env, HELM_BIN_CACHE: cache } });
    expect(check.status).toBe(1);
    expect(check.stderr).toContain(`is not the pinned helm (sha256 ${pinned})`);
    expect(spawnSync('bash', [path.join(ROOT, 'scripts/fetch-helm.sh'), '--check', '3']).status).toBe(0);
  });

  it('renders a chart through generate.sh inside its root filesystem, as argocd-cmp-server would run it', () => {
    // The source path Argo CD would check out, inside the sidecar's /tmp.
    const source = path.join(rootfs, 'tmp/src');
    cpSync(path.join(ROOT, 'test/argocd/charts/vllm-app'), source, { recursive: true });
    spawnSync('chown', ['-R', '999:999', path.join(rootfs, 'tmp')]);
    const env = { ...envOf(config), ARGOCD_APP_NAME: 'demo', ARGOCD_APP_NAMESPACE: 'ml', ARGOCD_APP_SOURCE_PATH: '.' };
    const r = inRootfs(rootfs, '999:999', env, ['bash', '-c', 'cd /tmp/src && /opt/vram-preflight/cmp/init.sh && exec /opt/vram-preflight/cmp/generate.sh']);
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    const docs = parseAllDocuments(r.stdout).map((d) => d.toJS() as { kind?: string; spec?: { template?: { spec?: { containers?: { command?: string[] }[] } } } });
    const wrapped = docs.flatMap((d) => d?.spec?.template?.spec?.containers ?? []).filter((c) => c.command?.[0] === '/bin/sh');
    expect(wrapped).toHaveLength(1);
  });
});
