/**
 * The fake GPU and the vLLM stand-in of the test node (test/README.md), run
 * here as processes on this machine against a ledger of their own: the
 * binary scripts/cluster.sh builds (.cache/cluster/bin/fake-gpu), called as
 * nvidia-smi, as vllm and as fake-gpu.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const ROOT = path.resolve(import.meta.dirname, '../..');
const BIN = path.join(ROOT, '.cache/cluster/bin/fake-gpu');
const UUID0 = 'GPU-7e57f00d-0000-4000-8000-000000000000';
const UUID1 = 'GPU-7e57f00d-0000-4000-8000-000000000001';
let ledger: string;
const children: ChildProcess[] = [];

function run(argv0: string, args: string[], env: Record<string, string> = {}) {
  return spawnSync(BIN, args, { argv0, encoding: 'utf8', env: { PATH: process.env.PATH, FAKE_GPU_DIR: ledger, ...env }, timeout: 20_000 });
}

const smi = (...args: string[]) => run('nvidia-smi', args);
const QUERY = ['--query-gpu=index,uuid,memory.total,memory.used,memory.free,memory.reserved', '--format=csv,noheader,nounits'];

function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const port = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(port));
    });
  });
}

/** `vllm serve …` as a process; resolves when /health answers 200 or the process ends. */
async function serve(args: string[], env: Record<string, string> = {}): Promise<{ child: ChildProcess; port: number; log: () => string; exited: Promise<number | null>; healthy: boolean }> {
  const port = await freePort();
  const child = spawn(BIN, ['serve', 'Qwen/Qwen3-0.6B', '--port', String(port), ...args], { argv0: 'vllm', env: { PATH: process.env.PATH, FAKE_GPU_DIR: ledger, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  children.push(child);
  let log = '';
  child.stdout!.on('data', (d: Buffer) => (log += d));
  child.stderr!.on('data', (d: Buffer) => (log += d));
  let done = false;
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => ((done = true), resolve(code))));
  for (let i = 0; i < 200 && !done; i++) {
    const ok = await fetch(`http://127.0.0.1:${port}/health`).then((r) => r.status === 200, () => false);
    if (ok) return { child, port, log: () => log, exited, healthy: true };
    await new Promise((r) => setTimeout(r, 50));
  }
  await exited.catch(() => undefined);
  return { child, port, log: () => log, exited, healthy: false };
}

function holderFiles(uuid: string): string[] {
  return readdirSync(path.join(ledger, uuid, 'holders')).filter((f) => !f.startsWith('.'));
}

beforeAll(() => {
  if (!existsSync(BIN)) throw new Error(`${BIN} is missing: run scripts/cluster.sh build (it builds the fake GPU with the test node)`);
  ledger = mkdtempSync(path.join(tmpdir(), 'vram-preflight-fake-gpu-'));
  const init = run('fake-gpu', ['init', ledger, '--count', '2', '--total-mib', '20142', '--reserved-mib', '150', '--name', 'NVIDIA A10G']);
  expect(init.status, init.stderr).toBe(0);
});

afterAll(() => {
  for (const c of children) c.kill('SIGKILL');
  rmSync(ledger, { recursive: true, force: true });
});

describe('nvidia-smi of the fake GPU', () => {
  it('answers the preflight\'s queries as the real one: csv, noheader, nounits; header and units otherwise; -i and --id', () => {
    expect(smi(...QUERY)).toMatchObject({ status: 0, stdout: `0, ${UUID0}, 20142, 0, 19992, 150\n1, ${UUID1}, 20142, 0, 19992, 150\n` });
    expect(smi('--query-gpu=index,memory.free,mig.mode.current', '--format=csv').stdout).toBe('index, memory.free [MiB], mig.mode.current\n0, 19992 MiB, Disabled\n1, 19992 MiB, Disabled\n');
    expect(smi('-i', '1', ...QUERY).stdout).toBe(`1, ${UUID1}, 20142, 0, 19992, 150\n`);
    expect(smi(`--id=${UUID1}`, ...QUERY).stdout).toBe(`1, ${UUID1}, 20142, 0, 19992, 150\n`);
    expect(smi('--query-compute-apps=pid,used_memory', '--format=csv,noheader,nounits')).toMatchObject({ status: 0, stdout: '' });
    expect(smi('-L').stdout).toBe(`GPU 0: NVIDIA A10G (UUID: ${UUID0})\nGPU 1: NVIDIA A10G (UUID: ${UUID1})\n`);
  });

  it('fails as the real one: an unknown field exits 2, an unknown id 6, no GPU (no driver) 9', () => {
    expect(smi('--query-gpu=index,memory.bogus', '--format=csv')).toMatchObject({ status: 2, stdout: 'Field "memory.bogus" is not a valid field to query.\n\n' });
    expect(smi('-i', '7', ...QUERY)).toMatchObject({ status: 6, stdout: 'No devices were found\n' });
    const none = run('nvidia-smi', QUERY, { FAKE_GPU_DIR: path.join(ledger, 'absent') });
    expect(none.status).toBe(9);
    expect(none.stdout).toMatch(/^NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver/);
  });

  it('counts a holder while a live process holds its file, or until its release; a file nobody holds with release=never until it is removed', () => {
    const file = path.join(ledger, UUID1, 'holders', 'by-hand');
    writeFileSync(file, 'pid=0\nprocess=test\nmib=5000\nrelease=never\n');
    expect(smi('-i', '1', ...QUERY).stdout).toBe(`1, ${UUID1}, 20142, 5000, 14992, 150\n`);
    expect(smi('-i', '1', '--query-compute-apps=pid,used_memory,process_name', '--format=csv,noheader').stdout).toBe('0, 5000 MiB, test\n');
    writeFileSync(file, `pid=0\nprocess=test\nmib=5000\nrelease=${Date.now() / 1000 - 1}\n`);
    expect(smi('-i', '1', ...QUERY).stdout, 'released a second ago: free, and the file gone').toBe(`1, ${UUID1}, 20142, 0, 19992, 150\n`);
    expect(existsSync(file)).toBe(false);
  });
});

describe('the vLLM stand-in', () => {
  it('passes vLLM\'s check on an idle GPU: its engine (another pid) holds ceil((total - reserved) x u), and /health answers', async () => {
    const s = await serve(['--gpu-memory-utilization', '0.5', '--gpu_memory_utilization=0.9']);
    expect(s.healthy, s.log()).toBe(true);
    // The last utilization wins, as with argparse: 0.9 of 19992 MiB, rounded up from bytes.
    const requested = Math.ceil(Math.ceil(19992 * 2 ** 20 * 0.9) / 2 ** 20);
    expect(smi('-i', '0', ...QUERY).stdout).toBe(`0, ${UUID0}, 20142, ${requested}, ${19992 - requested}, 150\n`);
    const [pid, used, name] = smi('--query-compute-apps=pid,used_memory,process_name', '--format=csv,noheader,nounits').stdout.trim().split(', ');
    expect({ used: Number(used), name }).toEqual({ used: requested, name: 'VLLM::EngineCore' });
    expect(Number(pid)).not.toBe(s.child.pid);
    expect(s.log()).toMatch(/gpu_memory_utilization=0\.9 port=\d+ tensor_parallel_size=1/);
    // SIGKILL of both (a container's end): the memory comes back at once, as a dead process's does.
    process.kill(Number(pid), 'SIGKILL');
    s.child.kill('SIGKILL');
    await s.exited;
    for (let i = 0; i < 100 && holderFiles(UUID0).length > 0 && smi('-i', '0', ...QUERY).stdout.includes(`, ${requested}, `); i++) await new Promise((r) => setTimeout(r, 50));
    expect(smi('-i', '0', ...QUERY).stdout).toBe(`0, ${UUID0}, 20142, 0, 19992, 150\n`);
  });

  it('fails vLLM\'s check when the GPU is short: vLLM\'s own error, exit 1, and its context given back', async () => {
    const held = path.join(ledger, UUID0, 'holders', 'other');
    writeFileSync(held, 'pid=0\nprocess=other\nmib=12000\nrelease=never\n');
    try {
      const s = await serve([]);
      expect(s.healthy).toBe(false);
      expect(await s.exited).toBe(1);
      // CUDA's total 19992 MiB = 19.52 GiB; free after the 600 MiB context 7392 MiB = 7.22 GiB; asked ceil(19992 MiB x 0.9) = 17.57 GiB.
      expect(s.log()).toMatch(/^\(EngineCore_DP0 pid=\d+\) ValueError: Free memory on device cuda:0 \(7\.22\/19\.52 GiB\) on startup is less than desired GPU memory utilization \(0\.9, 17\.57 GiB\)\. Decrease GPU memory utilization or reduce GPU memory used by other processes\.$/m);
      expect(s.log()).toMatch(/^RuntimeError: Engine core initialization failed\. See root cause above\. Failed core proc\(s\): \{'EngineCore_DP0': 1\}$/m);
      expect(smi('-i', '0', ...QUERY).stdout).toBe(`0, ${UUID0}, 20142, 12000, 7992, 150\n`);
    } finally {
      rmSync(held);
    }
  });

  it('SIGTERM: the server exits 0 at once, and its engine\'s memory outlives it for VLLM_STANDIN_RELEASE_SECONDS (never: until freed)', async () => {
    const s = await serve(['--gpu-memory-utilization=0.4'], { CUDA_VISIBLE_DEVICES: UUID1, VLLM_STANDIN_RELEASE_SECONDS: '30' });
    expect(s.healthy, s.log()).toBe(true);
    const requested = Math.ceil(Math.ceil(19992 * 2 ** 20 * 0.4) / 2 ** 20);
    expect(smi('-i', '1', ...QUERY).stdout).toBe(`1, ${UUID1}, 20142, ${requested}, ${19992 - requested}, 150\n`);
    const termAt = Date.now() / 1000;
    s.child.kill('SIGTERM');
    expect(await s.exited).toBe(0);
    const [file] = holderFiles(UUID1);
    const release = Number(/^release=(.*)$/m.exec(readFileSync(path.join(ledger, UUID1, 'holders', file!), 'utf8'))![1]);
    expect(release - termAt).toBeGreaterThan(29);
    expect(release - termAt).toBeLessThan(35);
    expect(smi('-i', '1', ...QUERY).stdout, 'still held after the server is gone').toBe(`1, ${UUID1}, 20142, ${requested}, ${19992 - requested}, 150\n`);
    expect(s.log()).toMatch(/the engine's \d+ MiB stay held for 30 s more/);
    // fake-gpu free gives back what no live process holds (the engine, outside a container, lives on: kill it first).
    const engine = Number(smi('--query-compute-apps=pid', '--format=csv,noheader').stdout.trim());
    process.kill(engine, 'SIGKILL');
    expect(run('fake-gpu', ['free', ledger, '--gpu', '1']).status).toBe(0);
    expect(smi('-i', '1', ...QUERY).stdout).toBe(`1, ${UUID1}, 20142, 0, 19992, 150\n`);
  });

  it('runs `serve` only, and refuses a utilization outside (0, 1] as vLLM does', () => {
    expect(run('vllm', ['chat'])).toMatchObject({ status: 2 });
    const over = run('vllm', ['serve', 'm', '--gpu-memory-utilization', '1.5']);
    expect(over.status).toBe(2);
    expect(over.stderr).toContain('GPU memory utilization must be within (0, 1]. Got 1.5.');
  });
});
