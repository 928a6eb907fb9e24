/**
 * The exec over the WebSocket client (src/kubernetes/pod-exec.ts) against the
 * server side Kubernetes itself uses: test/cluster/wsexec, a small Go program
 * made of k8s.io/streaming's wsstream (the API server's v5.channel.k8s.io,
 * the kubelet's v4.channel.k8s.io) and golang.org/x/net/websocket under it,
 * built from the test cluster's Go module. A server written apart from the
 * client, so that a misreading of RFC 6455 or of the channel protocol shared
 * by both sides of test/verify/websocket.test.ts shows here.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { KubernetesClient } from '../../src/kubernetes/client.js';
import { execInContainer } from '../../src/kubernetes/pod-exec.js';
import { removeDir, ROOT, servingPki, tempDir } from '../apiserver/harness.js';

let dir = '';
let server: ChildProcess | undefined;
let client: KubernetesClient;

beforeAll(async () => {
  dir = tempDir('wsexec');
  const binary = path.join(dir, 'wsexec');
  const build = spawnSync('go', ['build', '-o', binary, './wsexec'], { cwd: path.join(ROOT, 'test/cluster'), encoding: 'utf8', env: { ...process.env, GOTOOLCHAIN: 'local', GOFLAGS: '-mod=readonly' }, timeout: 600_000 });
  if (build.status !== 0) throw new Error(`go build ./wsexec in test/cluster failed (Go 1.26 is needed, as for scripts/cluster.sh): ${build.error?.message ?? ''}${build.stderr}`);
  const pki = servingPki(dir);
  // Its stderr is klog's, which reports every connection it closes itself as a receive error.
  server = spawn(binary, [pki.cert, pki.key], { stdio: ['ignore', 'pipe', 'ignore'] });
  const port = await new Promise<string>((resolve, reject) => {
    server!.stdout!.once('data', (d: Buffer) => resolve(/listening (\d+)/.exec(d.toString())?.[1] ?? ''));
    server!.once('exit', (code) => reject(new Error(`wsexec exited ${code}`)));
  });
  client = new KubernetesClient({ server: `https://127.0.0.1:${port}`, ca: readFileSync(pki.caCert, 'utf8'), insecureSkipTlsVerify: false, token: 't', origin: 'test' }, { requestTimeoutMs: 10_000, env: {}, maxBodyBytes: 8 << 20, maxSockets: 4, userAgent: 'vram-preflight-test' });
}, 660_000);

afterAll(() => {
  server?.kill();
  client?.close();
  removeDir(dir);
});

const exec = (container: string, command: string[]) => execInContainer(client, { namespace: 'ml', pod: 'p', container, command, deadline: Date.now() + 20_000 });

describe('exec against Kubernetes\' own WebSocket server code', () => {
  it('v5.channel.k8s.io, as the API server serves it: stdout, stderr, and Success on the error channel', async () => {
    expect(await exec('model', ['/bin/sh', '-c', 'echo out; echo err >&2'])).toEqual({ protocol: 'v5.channel.k8s.io', stdout: 'out\n', stderr: 'err\n', status: { metadata: {}, status: 'Success' }, exitCode: 0 });
  });

  it('v4.channel.k8s.io, as a kubelet serves it, taken when v5 is not', async () => {
    const result = await exec('v4', ['/bin/sh', '-c', 'echo v4']);
    expect([result.protocol, result.stdout, result.exitCode]).toEqual(['v4.channel.k8s.io', 'v4\n', 0]);
  });

  it('an exit code, as NonZeroExitCode with its cause', async () => {
    const result = await exec('model', ['/bin/sh', '-c', 'echo "kill: (1) - Operation not permitted" >&2; exit 1']);
    expect(result.exitCode).toBe(1);
    expect(result.status).toMatchObject({ status: 'Failure', reason: 'NonZeroExitCode', details: { causes: [{ reason: 'ExitCode', message: '1' }] } });
    expect(result.stderr).toBe('kill: (1) - Operation not permitted\n');
  });

  it('output larger than one frame is read whole, and kept up to its bound (64 KiB a channel)', async () => {
    const result = await exec('model', ['/bin/sh', '-c', 'head -c 300000 /dev/zero | tr "\\0" x']);
    expect(result.exitCode).toBe(0);
    expect(result.stdout).toBe('x'.repeat(64 << 10));
  });
});
