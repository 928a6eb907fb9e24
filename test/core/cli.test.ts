import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { VERSION } from '../../src/core/version.js';
import { runCli } from './run-cli.js';

const realVllm = readFileSync(join(import.meta.dirname, '../../fixtures/real/vllm.input.yaml'), 'utf8');
const pkg = JSON.parse(readFileSync(join(import.meta.dirname, '../../package.json'), 'utf8')) as { version: string };

describe('CLI', () => {
  it('--version prints the package version', async () => {
    const run = await runCli(['--version'], '');
    expect(run).toMatchObject({ code: 0, stdout: `${pkg.version}\n` });
    expect(VERSION).toBe(pkg.version);
  });

  it('--help lists every option with its environment variable', async () => {
    const run = await runCli(['--help'], '');
    expect(run.code).toBe(0);
    for (const text of ['--timeout-seconds', 'VRAM_PREFLIGHT_TIMEOUT_SECONDS', '--config', '--diagnostics-file', 'explain', 'vram-preflight.io/skip']) {
      expect(run.stdout).toContain(text);
    }
  });

  it('empty input gives empty output and exit 0', async () => {
    expect(await runCli([], '')).toMatchObject({ code: 0, stdout: '', stderr: '' });
  });

  it('an unknown option is a usage error (exit 2) that lists the valid ones, with nothing on stdout', async () => {
    const run = await runCli(['--timeout=5'], realVllm);
    expect(run.code).toBe(2);
    expect(run.stdout).toBe('');
    expect(run.stderr).toContain('unknown option --timeout');
    expect(run.stderr).toContain('--timeout-seconds');
  });

  it('an invalid value names the option, its env var and the constraint', async () => {
    const run = await runCli(['--timeout-seconds', 'soon'], realVllm);
    expect(run.code).toBe(2);
    expect(run.stdout).toBe('');
    expect(run.stderr).toContain('timeoutSeconds (--timeout-seconds / VRAM_PREFLIGHT_TIMEOUT_SECONDS) is "soon", must be integer');
    const enumRun = await runCli(['--on-nvidia-smi-unavailable=ignore'], realVllm);
    expect(enumRun.stderr).toContain('must be one of "warn", "fail"');
  });

  it('a flag without a value is a usage error', async () => {
    const run = await runCli(['--headroom-mib'], realVllm);
    expect(run.code).toBe(2);
    expect(run.stderr).toContain('needs a value');
  });

  it('environment variables set options; flags win over them', async () => {
    const fromEnv = await runCli([], realVllm, { env: { VRAM_PREFLIGHT_TIMEOUT_SECONDS: '777' } });
    expect(fromEnv.code).toBe(0);
    expect(fromEnv.stdout).toContain('timeout_s=777');
    const both = await runCli(['--timeout-seconds=888'], realVllm, { env: { VRAM_PREFLIGHT_TIMEOUT_SECONDS: '777' } });
    expect(both.stdout).toContain('timeout_s=888');
  });

  it('an unknown VRAM_PREFLIGHT_ variable is an error (a typo would otherwise be ignored)', async () => {
    const run = await runCli([], realVllm, { env: { VRAM_PREFLIGHT_TIMEOUT: '5' } });
    expect(run.code).toBe(2);
    expect(run.stdout).toBe('');
    expect(run.stderr).toContain('unknown environment variable VRAM_PREFLIGHT_TIMEOUT');
  });

  it('a config file is validated against the schema: unknown keys and bad values are errors', async () => {
    const dir = join(import.meta.dirname, '../../fixtures/config');
    const good = await runCli(['--config', 'good.yaml'], realVllm, { cwd: dir });
    expect(good.code).toBe(0);
    expect(good.stdout).toContain('timeout_s=420');
    const bad = await runCli(['--config', 'bad.yaml'], realVllm, { cwd: dir });
    expect(bad.code).toBe(2);
    expect(bad.stdout).toBe('');
    expect(bad.stderr).toContain('unknown key "timeout"');
    expect(bad.stderr).toContain('headroomMiB');
    const missing = await runCli(['--config', 'absent.yaml'], realVllm, { cwd: dir });
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain('cannot read config file absent.yaml: ENOENT');
    const viaEnv = await runCli([], realVllm, { cwd: dir, env: { VRAM_PREFLIGHT_CONFIG: 'good.yaml', VRAM_PREFLIGHT_TIMEOUT_SECONDS: '500' } });
    expect(viaEnv.stdout).toContain('timeout_s=500');
  });

  it('input that is not UTF-8 is refused rather than changed', async () => {
    const run = await runCli([], Uint8Array.from([0x61, 0x3a, 0x20, 0xff, 0x0a]));
    expect(run.code).toBe(1);
    expect(run.stdout).toBe('');
    expect(run.stderr).toContain('BAD_ENCODING');
  });

  it('the diagnostics file receives errors (Helm 4 discards stderr) and warnings', async () => {
    const failing = realVllm.replace('lmcache/vllm-openai:v0.5.2', 'lmcache/vllm-openai:custom');
    const run = await runCli(['--diagnostics-file', '/tmp/diag.txt'], failing);
    expect(run.code).toBe(1);
    expect(run.stdout).toBe('');
    expect(run.files.get('/tmp/diag.txt')).toContain('error UNKNOWN_START: Deployment/fixture-vllm-main (inference-server/charts/modelServing/templates/common.yaml), container "model"');
    const viaEnv = await runCli(['--timeout-seconds=9999'], realVllm, { env: { VRAM_PREFLIGHT_DIAGNOSTICS_FILE: '/tmp/d2.txt' } });
    expect(viaEnv.code).toBe(0);
    expect(viaEnv.files.get('/tmp/d2.txt')).toContain('startupProbe budget of 1800s');
    const optionError = await runCli(['--diagnostics-file=/tmp/d3.txt', '--nope=1'], realVllm);
    expect(optionError.code).toBe(2);
    expect(optionError.files.get('/tmp/d3.txt')).toContain('unknown option --nope');
  });

  it('explain prints every container, the decision, the utilization and the GPUs', async () => {
    const run = await runCli(['explain'], realVllm);
    expect(run.code).toBe(0);
    const row = run.stdout.split('\n').find((line) => line.startsWith('Deployment/fixture-vllm-main'));
    expect(row).toMatch(/model\s+lmcache\/vllm-openai:v0\.5\.2\s+wrap\s+0\.9 \(args\)\s+nvidia\.com\/gpu=1/);
    expect(run.stdout).toMatch(/Job\/fixture-vllm-seed\s+seed\s+python:3\.12-slim\s+skip/);
    expect(run.stdout).toContain('probe budget 1800s');
  });

  it('explain warns when the timeout outlasts the probe budget and when the utilization is absent', async () => {
    const noFlag = realVllm.replace('          - --gpu-memory-utilization\n          - "0.9"\n', '');
    const run = await runCli(['explain', '--timeout-seconds=1800'], noFlag);
    expect(run.code).toBe(0);
    expect(run.stdout).toContain('0.9 (default)');
    expect(run.stdout).toContain('no --gpu-memory-utilization');
    expect(run.stdout).toContain('not below the startupProbe budget of 1800s');
  });

  it('explain that ends in an error prints nothing on stdout: the table, with the would-be errors, goes to stderr, exit 1', async () => {
    const failing = realVllm.replace('lmcache/vllm-openai:v0.5.2', 'lmcache/vllm-openai@sha256:abc');
    const run = await runCli(['explain', '--registry-lookup=never'], failing);
    expect(run.code).toBe(1);
    expect(run.stdout).toBe('');
    expect(run.stderr).toMatch(/model\s+lmcache\/vllm-openai@sha256:abc\s+error/);
    expect(run.stderr).toContain('Errors (the post-renderer would fail)');
  });

  it('explain names what it cannot wrap and why, the GPU signal seen, and a vLLM started in the background', async () => {
    const fixture = (name: string) => readFileSync(join(import.meta.dirname, '../../fixtures/cases', name, 'input.yaml'), 'utf8');
    const operators = await runCli(['explain'], fixture('operator-resources'));
    expect(operators.code).toBe(0);
    for (const kind of ['LLMInferenceService/qwen3-coder-tool-calling', 'DynamoGraphDeployment/vllm-agg', 'Model/llama-3-8b']) {
      expect(operators.stdout).toMatch(new RegExp(`${kind}\\s+-\\s+-\\s+cannot-wrap\\s+.*mentions vLLM, cannot be wrapped here`));
    }
    expect(operators.stdout).toMatch(/StormService\/vllm-1p1d\s+prefill\s+\S+\s+wrap/);
    // An operator's resource of a kind no table names, without containers, naming a vLLM image (geeper-io/llm-operator's LMDeployment).
    const lmDeployment = 'apiVersion: llm.geeper.io/v1alpha1\nkind: LMDeployment\nmetadata:\n  name: vllm-gpu\nspec:\n  vllm:\n    enabled: true\n    image: vllm/vllm-openai:latest\n    resources:\n      limits:\n        nvidia.com/gpu: "1"\n';
    const unnamed = await runCli(['explain'], lmDeployment);
    expect(unnamed.code).toBe(0);
    expect(unnamed.stdout).toMatch(/LMDeployment\/vllm-gpu\s+-\s+vllm\/vllm-openai:latest\s+cannot-wrap\s+.*mentions vLLM, cannot be wrapped here: kind LMDeployment \(llm\.geeper\.io\/v1alpha1\) is not one vram-preflight knows and has no containers of its own; it names the vLLM image at spec\.vllm\.image, .*the admission webhook wraps those pods/);
    expect(unnamed.stdout).not.toContain('No workload containers found');
    const rendered = await runCli([], lmDeployment);
    expect(rendered.stdout).toBe(lmDeployment);
    expect(rendered.stderr).toBe('');
    // Not for an object that has containers, nor a values file (no kind), nor an image of another engine.
    for (const other of [lmDeployment.replace('vllm/vllm-openai:latest', 'ollama/ollama:0.6'), 'vllm:\n  image: vllm/vllm-openai:latest\n', `${lmDeployment}    containers: []\n`]) {
      expect((await runCli(['explain'], other)).stdout, other).not.toContain('cannot-wrap');
    }
    expect(operators.stdout).toMatch(/InferenceService\/vllm-custom\s+kserve-container\s+\S+\s+wrap/);
    const runtimeClass = await runCli(['explain'], fixture('gpu-runtimeclass-nvidia'));
    expect(runtimeClass.stdout).toContain('GPU signal: runtimeClassName nvidia');
    const ray = `apiVersion: ray.io/v1
kind: RayCluster
metadata:
  name: ray
spec:
  headGroupSpec:
    template:
      spec:
        containers:
          - name: head
            image: vllm/vllm-openai:v0.26.0
            command: [bash, -c, "ray start --head; vllm serve m --gpu-memory-utilization 0.9 & sleep infinity"]
            resources: {limits: {nvidia.com/gpu: 1}}
  workerGroupSpecs:
    - groupName: gpu
      template:
        spec:
          containers:
            - name: worker
              image: vllm/vllm-openai:v0.26.0
              command: [bash, -c, "ray start --address=ray-head:6379 --block"]
              resources: {limits: {nvidia.com/gpu: 1}}
`;
    const background = await runCli(['explain'], ray);
    expect(background.stdout).toMatch(/RayCluster\/ray\s+head\s+\S+\s+wrap/);
    expect(background.stdout).toMatch(/RayCluster\/ray\s+worker\s+\S+\s+skip\s+.*a Ray node \(its start runs `ray start`\)/);
    expect(background.stdout).toContain('starts vLLM in the background');
  });

  it('under Helm 4 (HELM_PLUGIN_NAME=vram-preflight) a failure is also a YAML scalar with the messages as comments, exit 0, so Helm 4 shows them; explain and other callers are untouched', async () => {
    const failing = realVllm.replace('lmcache/vllm-openai:v0.5.2', 'lmcache/vllm-openai@sha256:abc');
    const helm4 = await runCli(['--registry-lookup=never'], failing, { env: { HELM_PLUGIN_NAME: 'vram-preflight' } });
    expect(helm4.code).toBe(0);
    expect(helm4.stdout).toMatch(/^# vram-preflight refused the render, so nothing was rendered or installed: error UNKNOWN_START: /);
    expect(helm4.stdout).toMatch(/^# vram-preflight: error UNKNOWN_START: /m);
    expect(helm4.stdout.trimEnd().split('\n').pop()).toBe('vram-preflight-refused-the-render');
    expect(helm4.stderr).toContain('error UNKNOWN_START');
    const plain = await runCli(['--registry-lookup=never'], failing);
    expect(plain.code).toBe(1);
    expect(plain.stdout).toBe('');
    const ok = await runCli([], realVllm, { env: { HELM_PLUGIN_NAME: 'vram-preflight' } });
    expect(ok.code).toBe(0);
    expect(ok.stdout).toContain('# vram-preflight ');
    const explain = await runCli(['explain', '--registry-lookup=never'], failing, { env: { HELM_PLUGIN_NAME: 'vram-preflight' } });
    expect(explain.code).toBe(1);
    expect(explain.stdout).toBe('');
  });

  it('an unexpected positional argument is a usage error', async () => {
    const run = await runCli(['chart.yaml'], realVllm);
    expect(run.code).toBe(2);
    expect(run.stderr).toContain('reads the manifests on stdin');
  });
});
