/**
 * KubeRay decides how a Ray pod's Ray container starts. These tests apply
 * KubeRay's rule (BuildPod in ray-operator/controllers/ray/common/pod.go,
 * written out below) to what vram-preflight renders, and RUN the resulting
 * start in a real bash with a fake nvidia-smi, vllm and ray first on PATH:
 * a wrapped start must wait, then exec the same vLLM argv it had before, and
 * leave KubeRay's `&& ray start` to run after it.
 */
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { runCli } from './run-cli.js';

const caseDir = join(import.meta.dirname, '../../fixtures/cases/kuberay-start-rule');

const IMAGE_ENTRYPOINT = ['vllm', 'serve'];

type Container = { name: string; command?: string[]; args?: string[] };
type Template = { metadata?: { annotations?: Record<string, string> }; spec: { containers: Container[] } };

/** KubeRay's convertCmdToString: each item as " %s ", nothing quoted. */
function convertCmdToString(items: readonly string[] | undefined): string {
  return (items ?? []).map((item) => ` ${item} `).join('');
}

/** The argv KubeRay gives the Ray container (containers[0]) of a pod built from this template. */
/**
 * Releases since the `--block` fix put the container's text first (`cmd && ray start`); earlier ones put
 * `ray start` first (`ray start && cmd`). Both are run: the wrap must survive either.
 */
type Order = 'cmd-first' | 'ray-first';

function kuberayBuild(template: Template, objectAnnotations: Record<string, string>, order: Order = 'cmd-first'): string[] {
  const container = template.spec.containers[0]!;
  const cmd = convertCmdToString(container.command) + convertCmdToString(container.args);
  const overwrite = [objectAnnotations, template.metadata?.annotations ?? {}].some((a) => a['ray.io/overwrite-container-cmd']?.toLowerCase() === 'true');
  // Kept as written, the kubelet runs it: without a command, the image's ENTRYPOINT (vllm/vllm-openai:v0.26.0's) + args.
  if (overwrite || cmd.includes('ray start')) return [...(container.command ?? IMAGE_ENTRYPOINT), ...(container.args ?? [])];
  // The generated part: ulimit, then ray start (our fake `ray` says so).
  const generated = 'ulimit -n 65536; ray start --address=head:6379';
  if (cmd === '') return ['/bin/bash', '-lc', '--', generated];
  return ['/bin/bash', '-lc', '--', order === 'cmd-first' ? `${cmd} && ${generated}` : `${generated} && ${cmd}`];
}

let bin: string;

beforeAll(() => {
  bin = mkdtempSync(join(tmpdir(), 'vp-kuberay-'));
  const fake = (name: string, body: string): void => {
    writeFileSync(join(bin, name), `#!/bin/sh\n${body}\n`);
    chmodSync(join(bin, name), 0o755);
  };
  // One idle 80 GiB GPU.
  fake('nvidia-smi', 'case "$*" in *--query-gpu*) echo "0, GPU-0aaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee, 81559, 81000" ;; esac');
  fake('vllm', 'echo "VLLM-RAN $*"');
  fake('ray', 'echo "RAY-RAN $*"');
  // KubeRay's bash is a login shell: /etc/profile resets PATH, the user's profile puts the fakes first again.
  writeFileSync(join(bin, '.bash_profile'), `PATH=${bin}:$PATH\n`);
});

afterAll(() => rmSync(bin, { recursive: true, force: true }));

function run(argv: readonly string[]): { status: number | null; stdout: string; stderr: string } {
  const r = spawnSync(argv[0]!, argv.slice(1), {
    encoding: 'utf8',
    env: { PATH: `${bin}:/usr/bin:/bin`, MODEL_NAME: 'qwen', RAY_ADDRESS: 'head:6379', HOME: bin },
    timeout: 60_000,
  });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

describe('KubeRay runs what vram-preflight renders', () => {
  it('every Ray container KubeRay starts: waits, then runs the same vLLM argv, then ray start', async () => {
    const input = readFileSync(join(caseDir, 'input.yaml'), 'utf8');
    const rendered = await runCli([], input);
    expect(rendered.code).toBe(0);
    const cluster = parseAllDocuments(rendered.stdout)[0]!.toJS() as { metadata: { annotations?: Record<string, string> }; spec: { headGroupSpec: { template: Template }; workerGroupSpecs: { groupName: string; template: Template }[] } };
    const original = parseAllDocuments(input)[0]!.toJS() as typeof cluster;
    const groups = new Map(cluster.spec.workerGroupSpecs.map((g) => [g.groupName, g.template]));
    const before = new Map(original.spec.workerGroupSpecs.map((g) => [g.groupName, g.template]));
    const annotations = cluster.metadata.annotations ?? {};

    // The head has no command: KubeRay runs ray start, and vram-preflight left it so.
    expect(cluster.spec.headGroupSpec.template).toEqual(original.spec.headGroupSpec.template);
    const head = run(kuberayBuild(cluster.spec.headGroupSpec.template, annotations));
    expect(head.stdout).toBe('RAY-RAN start --address=head:6379\n');

    const expectations: [string, string][] = [
      // Joined by KubeRay: bash expands $MODEL_NAME exactly as it would have without the wrap.
      ['joined', 'VLLM-RAN serve /models/m --gpu-memory-utilization 0.85 --served-model-name qwen\nRAY-RAN start --address=head:6379\n'],
      ['args-only', 'VLLM-RAN serve /models/m --gpu-memory-utilization=0.75\nRAY-RAN start --address=head:6379\n'],
      // Kept as written (it starts Ray itself; the annotation): the kubelet's argv.
      ['starts-ray-itself', 'RAY-RAN start --address=head:6379\nVLLM-RAN serve /models/m --gpu-memory-utilization 0.8\n'],
      ['overwritten', 'VLLM-RAN serve /models/m --gpu-memory-utilization 0.7\n'],
    ];
    for (const order of ['cmd-first', 'ray-first'] as const) {
      for (const [group, cmdFirst] of expectations) {
        const template = groups.get(group)!;
        expect(template.spec.containers[0]!.command, group).toEqual(['/bin/sh', '-ec']);
        // Joined starts run after `ray start` in the earlier order.
        const lines = cmdFirst.trimEnd().split('\n');
        const joined = lines.length === 2 && lines[1]!.startsWith('RAY-RAN');
        const stdout = order === 'ray-first' && joined ? `${lines[1]}\n${lines[0]}\n` : cmdFirst;
        const wrapped = run(kuberayBuild(template, annotations, order));
        expect(wrapped.stderr, group).toContain('vram-preflight');
        expect({ order, group, status: wrapped.status, stdout: wrapped.stdout }).toEqual({ order, group, status: 0, stdout });
        // Without the wrap KubeRay would have run the same thing (minus the wait).
        const unwrapped = run(kuberayBuild(before.get(group)!, annotations, order));
        expect({ order, group, stdout: unwrapped.stdout }).toEqual({ order, group, stdout });
      }
    }
  });

  it('the pod KubeRay builds from a wrapped start is not wrapped again (the webhook sees that pod)', async () => {
    const rendered = await runCli([], readFileSync(join(caseDir, 'input.yaml'), 'utf8'));
    const cluster = parseAllDocuments(rendered.stdout)[0]!.toJS() as { spec: { workerGroupSpecs: { groupName: string; template: Template }[] } };
    const template = cluster.spec.workerGroupSpecs.find((g) => g.groupName === 'joined')!.template;
    const [program, ...rest] = kuberayBuild(template, {});
    const pod = {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: 'serve-worker-joined-x1' },
      spec: { containers: [{ name: 'standalone', image: 'vllm/vllm-openai:v0.26.0', command: [program, ...rest], resources: { limits: { 'nvidia.com/gpu': '1' } } }] },
    };
    const text = JSON.stringify(pod);
    const run = await runCli(['explain', '--output', 'json'], text);
    const report = JSON.parse(run.stdout) as { containers: { action: string; reason: string }[] };
    expect(report.containers).toMatchObject([{ action: 'skip', reason: expect.stringContaining('already runs the vram-preflight wait') }]);
    expect((await runCli([], text)).stdout).toBe(text);
  });

  it('the joined form is idempotent and unwraps to the original start', async () => {
    const input = readFileSync(join(caseDir, 'input.yaml'), 'utf8');
    const once = await runCli([], input);
    const twice = await runCli([], once.stdout);
    expect(twice.stdout).toBe(once.stdout);
    // Opting out restores what the chart wrote.
    const optedOut = once.stdout.replace('kind: RayCluster\nmetadata:\n  name: serve\n', 'kind: RayCluster\nmetadata:\n  name: serve\n  annotations:\n    vram-preflight.io/skip: "true"\n');
    expect(optedOut).not.toBe(once.stdout);
    const restored = await runCli([], optedOut);
    expect(restored.code).toBe(0);
    // What KubeRay runs is the chart's start again (an args-only start comes back as command: the same joined text).
    type Cluster = { spec: { workerGroupSpecs: { template: Template }[] } };
    const starts = (text: string) => (parseAllDocuments(text)[0]!.toJS() as Cluster).spec.workerGroupSpecs.map((g) => kuberayBuild(g.template, {}).join(' ').replace(/\s+/g, ' '));
    expect(starts(restored.stdout)).toEqual(starts(input));
  });
});
