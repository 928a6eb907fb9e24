/**
 * Found by trying 0.3.0 on public operator sources (docs/detection.md §4, §5): a start that passes vLLM's own
 * engine flag (KAITO), aibrix's RayClusterFleet, `ray start` workers, accelerators other than
 * NVIDIA's, and probes that cannot fail. Decided through patchObject (the webhook's door) and
 * the CLI's explain (the render's), the way a user meets them.
 */
import { describe, expect, it } from 'vitest';
import { DEFAULT_OPTIONS, patchObject, type ContainerReport } from '../../src/core/index.js';
import { runCli } from './run-cli.js';
import type { Plain } from '../../src/core/values.js';


function pod(container: Plain, spec: Plain = {}): Plain {
  return { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'p', namespace: 'n' }, spec: { containers: [{ name: 'model', ...container }], ...spec } };
}

function decide(object: Plain): ContainerReport {
  const result = patchObject(object, DEFAULT_OPTIONS);
  expect(result.errors).toEqual([]);
  return result.containers.find((c) => c.container === 'model')!;
}

const GPU = { resources: { limits: { 'nvidia.com/gpu': '1' } } };

// KAITO's vLLM preset (kaito-project/kaito pkg/model/interface.go, buildVLLMInferenceCommand):
// utils.ShellCmd(BaseCommand + params) is ["/bin/sh", "-c", "python3 /workspace/vllm/inference_api.py --k=v …"].
const KAITO = [
  '/bin/sh',
  '-c',
  'python3 /workspace/vllm/inference_api.py --served-model-name=phi-4-mini-instruct --gpu-memory-utilization=0.84 --kaito-config-file=/mnt/config/inference_config.yaml --tensor-parallel-size=1 --max-model-len=131072 --dtype=bfloat16',
];

describe("a start that passes vLLM's engine flag is vLLM (KAITO)", () => {
  it('KAITO inference_api.py under /bin/sh -c on nvidia.com/gpu: wrapped, at its 0.84', () => {
    const report = decide(pod({ image: 'mcr.microsoft.com/aks/kaito/kaito-base:0.0.8', command: KAITO, ...GPU }));
    expect(report.action).toBe('wrap');
    expect(report.reason).toContain("its start passes vLLM's engine flag --gpu-memory-utilization to python3 /workspace/vllm/inference_api.py, which runs vLLM's engine (and its start-up check) in its process, run by its shell script");
    expect(report.utilization?.value).toBe(0.84);
  });

  it('any program that takes the flag as its own item, written in command: the same rule', () => {
    const report = decide(pod({ image: 'registry.example.com/team/serve:1', command: ['/app/serve.py', '--gpu-memory-utilization', '0.7'], ...GPU }));
    expect(report.action).toBe('wrap');
    expect(report.utilization?.value).toBe(0.7);
  });

  it.each([
    [['python3', '-m', 'sglang.launch_server', '--gpu-memory-utilization', '0.8'], /runs SGLang, not vLLM/],
    [['ray', 'start', '--block', '--gpu-memory-utilization=0.8'], /a Ray node/],
    [['/app/serve.py', '--mem-fraction', '0.8'], /not vLLM/],
    // huggingfaceserver takes vLLM's flags whatever backend it picks: its own rule decides
    [['python3', '-m', 'huggingfaceserver', '--model_id=m', '--gpu-memory-utilization', '0.8'], /KServe huggingfaceserver without --backend=vllm/],
  ])('%j: not vLLM', (command, reason) => {
    const report = decide(pod({ image: 'registry.example.com/team/serve:1', command, ...GPU }));
    expect(report.action).toBe('skip');
    expect(report.reason).toMatch(reason);
  });

  it('args only, on an image not known to run vLLM: not wrapped (its start is the image\'s), with the warning', () => {
    const report = decide(pod({ image: 'registry.example.com/team/serve:1', args: ['--gpu-memory-utilization', '0.7'], ...GPU }));
    expect(report.action).toBe('skip');
    expect(report.warnings.join('\n')).toMatch(/its args pass --gpu-memory-utilization \(a vLLM flag\) but the image is not known to run vLLM/);
  });
});

describe('other accelerators: the reason names them, never "vLLM runs on CPU"', () => {
  it.each([
    [{ 'huawei.com/Ascend910': '1' }, 'no NVIDIA GPU: it asks for Huawei Ascend NPU (huawei.com/Ascend910=1)'],
    [{ 'huawei.com/Ascend310P': '2' }, 'Huawei Ascend NPU (huawei.com/Ascend310P=2)'],
    [{ 'cambricon.com/mlu': '1' }, 'Cambricon MLU (cambricon.com/mlu=1)'],
    [{ 'example.com/npu': '1', 'hugepages-2Mi': '1Gi' }, 'it asks for the device example.com/npu=1'],
  ])('%j', (limits, reason) => {
    const report = decide(pod({ image: 'quay.io/ascend/vllm-ascend:v0.9.1', command: ['vllm', 'serve', 'm'], resources: { limits } }));
    expect(report.action).toBe('skip');
    expect(report.reason).toContain(reason);
    expect(report.reason).not.toMatch(/runs on CPU/);
  });

  it('no accelerator at all: says none was found, not that vLLM runs on CPU', () => {
    const report = decide(pod({ image: 'vllm/vllm-openai:v0.26.0', command: ['vllm', 'serve', 'm'] }));
    expect(report.reason).toMatch(/^no NVIDIA GPU: checked .*, none found, so there is no nvidia-smi to wait on/);
  });

  it('a device of another vendor does not hide a CUDA_VISIBLE_DEVICES signal unless it is an accelerator the table names', () => {
    const env = [{ name: 'CUDA_VISIBLE_DEVICES', value: '0' }];
    expect(decide(pod({ image: 'vllm/vllm-openai:v0.26.0', command: ['vllm', 'serve', 'm'], env, resources: { limits: { 'smarter-devices/fuse': '1' } } })).action).toBe('wrap');
    expect(decide(pod({ image: 'vllm/vllm-openai:v0.26.0', command: ['vllm', 'serve', 'm'], env, resources: { limits: { 'hygon.com/dcunum': '1' } } })).action).toBe('skip');
  });
});

describe('the probe budget warning: only for a probe that can fail', () => {
  const probe = (exec: string[]) => ({ exec: { command: exec }, periodSeconds: 10, failureThreshold: 3 });
  const warned = (container: Plain) => decide(pod({ image: 'vllm/vllm-openai:v0.26.0', command: ['vllm', 'serve', 'm'], ...GPU, ...container })).warnings.some((w) => w.includes('budget'));

  it.each([
    [['echo', 'TBD']],
    [['true']],
    [['/bin/true']],
    [['sh', '-c', 'echo TBD']],
    [['/bin/sh', '-c', 'exit 0']],
    [['sh', '-c', ': ; printf ok']],
  ])('an exec probe %j cannot fail: no warning', (command) => {
    expect(warned({ livenessProbe: probe(command) })).toBe(false);
  });

  it.each([
    [['cat', '/tmp/healthy']],
    [['sh', '-c', 'echo ok > /tmp/x']],
    [['sh', '-c', 'curl -f localhost:8000/health']],
    [['sh', '-c', 'echo $(curl localhost:8000/health)']],
    [['false']],
  ])('an exec probe %j can fail: warned (30 s budget, timeout 300 s)', (command) => {
    expect(warned({ livenessProbe: probe(command) })).toBe(true);
  });

  it('an HTTP probe can fail; a startupProbe that cannot fail leaves the livenessProbe to count', () => {
    expect(warned({ livenessProbe: { httpGet: { path: '/health', port: 8000 }, periodSeconds: 10, failureThreshold: 3 } })).toBe(true);
    expect(warned({ startupProbe: probe(['true']), livenessProbe: { httpGet: { path: '/health', port: 8000 } } })).toBe(true);
    expect(warned({ startupProbe: probe(['true']), livenessProbe: probe(['echo', 'TBD']) })).toBe(false);
  });
});

describe('aibrix RayClusterFleet', () => {
  const fleet = (worker: string) => `apiVersion: orchestration.aibrix.ai/v1alpha1
kind: RayClusterFleet
metadata:
  name: qwen-fleet
spec:
  replicas: 1
  selector:
    matchLabels:
      app: qwen
  template:
    metadata:
      labels:
        app: qwen
    spec:
      headGroupSpec:
        rayStartParams:
          dashboard-host: 0.0.0.0
        template:
          spec:
            containers:
              - name: ray-head
                image: vllm/vllm-openai:v0.26.0
                command: ["vllm", "serve", "Qwen/Qwen3-8B", "--tensor-parallel-size", "2", "--distributed-executor-backend", "ray"]
                resources:
                  limits:
                    nvidia.com/gpu: 1
      workerGroupSpecs:
        - groupName: worker
          replicas: 1
          rayStartParams: {}
          template:
            spec:
              containers:
                - name: ray-worker
                  image: vllm/vllm-openai:v0.26.0
${worker}
                  resources:
                    limits:
                      nvidia.com/gpu: 1
`;

  it.each([
    ['no command (KubeRay starts it as `ray start`)', ''],
    ['a plain `ray start` worker', '                  command: ["ray", "start", "--address=$(RAY_HEAD_IP):6379", "--block"]'],
  ])('is a kind explain names, like a RayCluster; %s is a Ray node, never said to start vLLM', async (_n, worker) => {
    const run = await runCli(['explain'], fleet(worker));
    expect(run.code).toBe(0);
    expect(run.stdout).not.toMatch(/not one vram-preflight knows|file an issue/);
    const line = run.stdout.split('\n').find((l) => l.includes('ray-worker'))!;
    expect(line).toMatch(/skip/);
    expect(line).toMatch(/Ray node|KubeRay starts this Ray container as `ray start`/);
    expect(run.stdout + run.stderr).not.toMatch(/ray-worker[^\n]*starts vLLM on an NVIDIA GPU/);
    expect(run.stdout.split('\n').find((l) => l.includes('ray-head'))).toMatch(/wrap/);
  });

  it('an unknown kind holding an image-only vLLM container says it may start vLLM, not that it does', async () => {
    const run = await runCli(['explain'], fleet('').replace('orchestration.aibrix.ai/v1alpha1', 'example.com/v1').replace('RayClusterFleet', 'SomeFleet'));
    expect(run.stdout + run.stderr).toMatch(/ray-worker[^\n]*has a vLLM image and no command of its own[^\n]*it may start vLLM/);
    expect(run.stdout + run.stderr).toMatch(/ray-head[^\n]*this one starts vLLM on an NVIDIA GPU/);
  });
});
