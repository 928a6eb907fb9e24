/**
 * What `explain` tells users about the detection rules (docs/detection.md):
 * the reason and the signal named for each decision, on the fixture inputs.
 * The fixtures themselves check the rendered bytes and stderr.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { isCudaDeviceList } from '../../src/core/tables/gpu.js';
import { huggingfaceServerMayRunVllm, huggingfaceServerRuns, otherEngine, runsHuggingfaceServer, startsRayNode, vllmEvidence } from '../../src/core/decide/detect.js';
import { scriptCommands, shellCommands, shellScriptOf } from '../../src/core/decide/shell-script.js';
import { kuberayStart } from '../../src/core/decide/kuberay.js';
import { runCli } from './run-cli.js';

const casesDir = join(import.meta.dirname, '../../fixtures/cases');

async function explain(name: string): Promise<{ text: string; rows: Map<string, string> }> {
  const input = readFileSync(join(casesDir, name, 'input.yaml'), 'utf8');
  const text = await runCli(['explain'], input);
  const json = await runCli(['explain', '--output', 'json'], input);
  expect(json.code).toBe(0);
  const report = JSON.parse(json.stdout) as { containers: { workload: string; container: string; action: string; reason: string }[] };
  // workload/container → "action: reason"
  const rows = new Map(report.containers.map((c) => [`${c.workload}/${c.container}`, `${c.action}: ${c.reason}`]));
  return { text: text.stdout, rows };
}

describe('the rules', () => {
  it('a CUDA device list is indices or GPU-/MIG- UUIDs; nothing else names a device', () => {
    for (const yes of ['0', '0,1', ' 3 ', 'GPU-8f3c2a1e-0b7d-4e55-9a61-2c4d5e6f7a8b', 'MIG-GPU-8f3c2a1e-0b7d-4e55-9a61-2c4d5e6f7a8b/1/0', 'MIG-5c4d2a1e-0b7d-4e55-9a61-2c4d5e6f7a8b', '0,GPU-ab12']) {
      expect(isCudaDeviceList(yes), yes).toBe(true);
    }
    for (const no of ['', ' ', '-1', 'none', 'void', 'NoDevFiles', 'all', '0,-1', '0,,1', '$(GPUS)']) {
      expect(isCudaDeviceList(no), no).toBe(false);
    }
  });

  it('huggingfaceserver counts only as the program run, never as a word elsewhere', () => {
    expect(runsHuggingfaceServer(['python3', '-m', 'huggingfaceserver', '--backend=vllm'])).toBe(true);
    expect(runsHuggingfaceServer(['vllm', 'serve', 'm', '--served-model-name', 'huggingfaceserver'])).toBe(false);
    expect(vllmEvidence(['vllm', 'serve', 'm', '--served-model-name', 'huggingfaceserver'])).toBe('its start runs vLLM');
    expect(vllmEvidence(['python', '-m', 'huggingfaceserver', '--backend', 'vllm'])).toBe('KServe huggingfaceserver with --backend=vllm');
    expect(vllmEvidence(['python', '-m', 'huggingfaceserver'])).toBeUndefined();
  });

  it('a shell script is read as its simple commands: quotes, comments, here-documents and substitutions are not commands', () => {
    const read = (script: string) => shellCommands(script).map((c) => `${c.words.join(' ')}${c.background ? ' &' : ''}`);
    expect(read('a 1; b "2 3" && c \'4;5\'\nd || e | f')).toEqual(['a 1', 'b 2 3', 'c 4;5', 'd', 'e', 'f']);
    expect(read('server --x & wait')).toEqual(['server --x &', 'wait']);
    expect(read('cmd >/dev/null 2>&1 &>log; next')).toEqual(['cmd >/dev/null 2>&1 &>log', 'next']);
    expect(read('# python -m huggingfaceserver\nx=$(echo "a; b") y # tail')).toEqual(['x=$(echo "a; b") y']);
    expect(read('cat <<EOF\npython -m huggingfaceserver\nEOF\ndone')).toEqual(['cat', 'done']);
    expect(read('cat <<-\'END\' >f\n\tpython -m huggingfaceserver\n\tEND\nlast')).toEqual(['cat >f', 'last']);
    expect(read('long \\\n  line "${A:-x;y}" `b;c`')).toEqual(['long line ${A:-x;y} `b;c`']);
    expect(read('if [ -n "$X" ]; then\n  exec run\nfi')).toEqual(['if [ -n $X ]', 'then', 'exec run', 'fi']);
  });

  it("a shell's -c script is found after its options, and its positional parameters are the items after it", () => {
    expect(shellScriptOf(['bash', '-c', 's', 'a0', 'a1'])).toEqual({ script: 's', positional: ['a0', 'a1'] });
    expect(shellScriptOf(['/bin/bash', '-euo', 'pipefail', '-c', '--', 's'])).toEqual({ script: 's', positional: [] });
    expect(shellScriptOf(['sh', '-ec', 's'])?.script).toBe('s');
    expect(shellScriptOf(['bash', '--norc', 'script.sh'])).toBeUndefined();
    expect(shellScriptOf(['sh', 'run.sh', '-c'])).toBeUndefined();
    // `exec`, assignments and reserved words go; `$0 $@` and "$@" become the container's items.
    expect(scriptCommands(['bash', '-c', 'then FOO=1 exec python -m m $0 $@', '--a', '--b']).map((c) => c.words)).toEqual([['python', '-m', 'm', '--a', '--b']]);
    expect(scriptCommands(['sh', '-c', 'python -m m "$@"', 'sh', '--b']).map((c) => c.words)).toEqual([['python', '-m', 'm', '--b']]);
    expect(scriptCommands(['sh', '-c', 'exec env HF_HOME=/tmp nohup /opt/py/bin/python3 -m m']).map((c) => c.words)).toEqual([['/opt/py/bin/python3', '-m', 'm']]);
  });

  it("huggingfaceserver in a shell script is recognised as in a plain argv: with --backend=vllm it is vLLM, without one KServe picks", () => {
    const hfs = (script: string, ...args: string[]) => ['bash', '-c', script, ...args];
    // Written in the script, passed on by `$0 $@` or "$@", after `&&`, `;`, a line break, `exec`, a path to python.
    for (const argv of [
      hfs('python -m huggingfaceserver --backend=vllm --model_dir=/mnt/models'),
      hfs('exec python3 -m huggingfaceserver $0 $@', '--model_name=m', '--backend=vllm'),
      hfs('python3 -m huggingfaceserver "$@"', 'bash', '--backend', 'vllm'),
      hfs('cd /work && /usr/local/bin/python3.11 -m huggingfaceserver --backend vllm'),
      hfs('echo starting; python -m huggingfaceserver --backend=vllm'),
      hfs('set -e\nexport A=1\nexec /opt/venv/bin/python -m huggingfaceserver --backend=vllm\n'),
      ['tini', '--', 'sh', '-ec', 'exec python -m huggingfaceserver "$@"', 'sh', '--backend=vllm'],
    ]) {
      expect(runsHuggingfaceServer(argv), argv.join(' ')).toBe(true);
      expect(vllmEvidence(argv), argv.join(' ')).toBe('KServe huggingfaceserver with --backend=vllm, run by its shell script');
      expect(huggingfaceServerMayRunVllm(argv), argv.join(' ')).toBe(false);
    }
    // No backend: KServe picks at run time; not vLLM, and said (the caller warns).
    for (const argv of [hfs('exec python -m huggingfaceserver $0 $@', '--model_name=m'), hfs('python -m huggingfaceserver --backend=auto'), hfs('python -m huggingfaceserver --backend=${BACKEND}')]) {
      expect(vllmEvidence(argv), argv.join(' ')).toBeUndefined();
      expect(huggingfaceServerMayRunVllm(argv), argv.join(' ')).toBe(true);
    }
    // The plain argv keeps its rule (the last --backend wins, as argparse reads it).
    expect(vllmEvidence(['python', '-m', 'huggingfaceserver', '--backend=vllm', '--backend=huggingface'])).toBeUndefined();
    expect(huggingfaceServerMayRunVllm(['python3', '-m', 'huggingfaceserver', '--model_name=m'])).toBe(true);
    expect(huggingfaceServerMayRunVllm(['python3', '-m', 'huggingfaceserver', '--backend=vllm'])).toBe(false);
  });

  it("KServe's multi-node runtime: `ray start --head`, then huggingfaceserver in the foreground, runs vLLM; its workers stay Ray nodes", () => {
    const head = 'export RAY_ADDRESS=${POD_IP}:${RAY_PORT}\nray start --head --disable-usage-stats --include-dashboard false \npython ./huggingfaceserver/health_check.py registered_nodes --retries 200  --probe_name runtime_start\n\npython -m huggingfaceserver ${MODEL_DIR_ARG} --tensor-parallel-size=${TENSOR_PARALLEL_SIZE} $0 $@\n';
    const argv = ['bash', '-c', head, '--model_name=m', '--gpu-memory-utilization=0.92'];
    expect(vllmEvidence(argv)).toMatch(/^KServe's multi-node huggingfaceserver .*runs only on vLLM's backend$/);
    expect(huggingfaceServerRuns(argv)).toEqual([{ argv: ['python', '-m', 'huggingfaceserver', '${MODEL_DIR_ARG}', '--tensor-parallel-size=${TENSOR_PARALLEL_SIZE}', '--model_name=m', '--gpu-memory-utilization=0.92'], inScript: true, afterRayHead: true }]);
    expect(vllmEvidence(['bash', '-c', 'ray start --head && exec python3 -m huggingfaceserver "$@"', 'bash'])).toMatch(/multi-node/);
    expect(vllmEvidence(['bash', '-c', 'ray start --head --block &\npython -m huggingfaceserver'])).toMatch(/multi-node/);
    // An explicit backend still decides; the Ray head must come first; a worker's blocking `ray start` is a Ray node.
    expect(vllmEvidence(['bash', '-c', head, '--backend=huggingface'])).toBeUndefined();
    expect(huggingfaceServerMayRunVllm(['bash', '-c', head, '--backend=huggingface'])).toBe(false);
    expect(vllmEvidence(['bash', '-c', 'python -m huggingfaceserver\nray start --head'])).toBeUndefined();
    expect(vllmEvidence(['bash', '-c', 'ray start --address=head:6379 --block\npython -m huggingfaceserver'])).toBeUndefined();
    const worker = ['bash', '-c', 'while true; do ray health-check --address "${RAY_HEAD_ADDRESS}" && break; sleep 5; done\nray start --address="${RAY_HEAD_ADDRESS}" --block\n'];
    expect(vllmEvidence(worker)).toBeUndefined();
    expect(runsHuggingfaceServer(worker)).toBe(false);
    expect(startsRayNode(worker)).toBe(true);
  });

  it('huggingfaceserver in the background, with another backend, or only mentioned in a script is not vLLM', () => {
    for (const argv of [
      // In the background: not the container's start.
      ['bash', '-c', 'python -m huggingfaceserver --backend=vllm &\nwait'],
      ['bash', '-c', 'ray start --head; python -m huggingfaceserver "$@" & sleep infinity', 'bash'],
      // Only mentioned: an echo, a comment, a quoted string, a here-document, a served model name, another module.
      ['sh', '-c', 'echo python -m huggingfaceserver --backend=vllm; exec sleep 1'],
      ['sh', '-c', '# python -m huggingfaceserver --backend=vllm\nexec server'],
      ['sh', '-c', 'printf "%s" "python -m huggingfaceserver --backend=vllm"'],
      ['sh', '-c', 'cat <<EOF\npython -m huggingfaceserver --backend=vllm\nEOF'],
      ['sh', '-c', 'exec python -m other.server --served-model-name huggingfaceserver --backend=vllm'],
      ['sh', '-c', 'python -m pip install huggingfaceserver --backend=vllm'],
    ]) {
      expect(runsHuggingfaceServer(argv), argv.join(' ')).toBe(false);
      expect(vllmEvidence(argv), argv.join(' ')).toBeUndefined();
      expect(huggingfaceServerMayRunVllm(argv), argv.join(' ')).toBe(false);
    }
    // An explicit backend that is not vLLM: huggingfaceserver, not vLLM, and nothing to warn about.
    for (const backend of ['--backend=huggingface', '--backend=transformers']) {
      const argv = ['bash', '-c', 'exec python -m huggingfaceserver $0 $@', '--model_name=m', backend];
      expect(runsHuggingfaceServer(argv)).toBe(true);
      expect(vllmEvidence(argv)).toBeUndefined();
      expect(huggingfaceServerMayRunVllm(argv)).toBe(false);
    }
    // Two runs that disagree (one without a backend): no evidence.
    expect(vllmEvidence(['bash', '-c', 'if [ -n "$V" ]; then exec python -m huggingfaceserver --backend=vllm; else exec python -m huggingfaceserver; fi'])).toBeUndefined();
    // A vLLM start in the same script still decides (the served name is only a word).
    expect(vllmEvidence(['sh', '-c', 'exec vllm serve m --served-model-name huggingfaceserver'])).toBe('its start runs vLLM');
  });

  it("KubeRay's rule: no command or args is ray start; `ray start` in the text or the annotation keeps it; anything else is joined", () => {
    expect(kuberayStart(null, null, false)).toBe('ray-start');
    expect(kuberayStart([], [], false)).toBe('ray-start');
    expect(kuberayStart(['vllm', 'serve'], null, false)).toBe('joined');
    expect(kuberayStart(null, ['vllm', 'serve'], false)).toBe('joined');
    expect(kuberayStart(['bash', '-c'], ['ray start --block'], false)).toBe('as-written');
    // Each item is joined as " %s ": `ray` and `start` as two items read "ray  start" (two spaces), which KubeRay does not match.
    expect(kuberayStart(['ray'], ['start'], false)).toBe('joined');
    expect(kuberayStart(['sh', '-c', 'ray start --block'], null, false)).toBe('as-written');
    expect(kuberayStart(null, null, true)).toBe('as-written');
  });

  it('engines that are not vLLM are named by the program they run', () => {
    expect(otherEngine(['python3', '-m', 'sglang.launch_server', '--model-path', 'm'])).toBe('SGLang');
    expect(otherEngine(['text-generation-launcher', '--model-id', 'm'])).toBe('TGI (text-generation-inference)');
    expect(otherEngine(['sh', '-c', 'exec llama-server -m /m.gguf'])).toBe('llama.cpp');
    expect(otherEngine(['vllm', 'serve', 'sglang'])).toBeUndefined();
  });
});

describe('explain', () => {
  it('KubeRay: the worker without command is ray start, named as such; the image is never asked', async () => {
    const { rows, text } = await explain('kuberay-worker-without-command');
    expect(rows.get('RayCluster/ps-distilgpt2-raycluster-raycluster/vllm-ray-worker')).toMatch(/^skip: KubeRay starts this Ray container as `ray start`/);
    expect(text).not.toContain('UNKNOWN_START');
    expect(text).not.toContain('command: ["vllm", "serve"]');
  });

  it('KubeRay: joined starts are wrapped and say so; Ray Serve running vLLM is named', async () => {
    const { rows } = await explain('kuberay-start-rule');
    expect(rows.get('RayCluster/serve/ray-head')).toMatch(/^skip: KubeRay starts this Ray container as `ray start`/);
    expect(rows.get('RayCluster/serve/standalone')).toMatch(/^wrap: its start runs vLLM \(KubeRay keeps it, joined into bash -lc/);
    expect(rows.get('RayService/serve-app/-')).toMatch(/^cannot-wrap: mentions vLLM, cannot be wrapped here: vLLM runs inside Ray Serve actors/);
  });

  it('a vLLM Ray image that KubeRay starts is never refused, whatever its tag', async () => {
    const input = readFileSync(join(casesDir, 'kuberay-worker-without-command', 'input.yaml'), 'utf8').replaceAll('lmcache/vllm-openai:latest', 'vllm/vllm-openai:nightly');
    const run = await runCli(['--registry-lookup=never'], input);
    expect(run.stderr).toBe('');
    expect(run.code).toBe(0);
  });

  it('the CUDA_VISIBLE_DEVICES signal is named (real-world: production-stack prefill)', async () => {
    const { rows, text } = await explain('duplicate-label-key');
    expect(rows.get('Deployment/ps-llama-prefill-deployment-vllm/vllm')).toBe('wrap: its start runs vLLM; NVIDIA GPU: CUDA_VISIBLE_DEVICES=0');
    expect(text).toContain('GPU signal: CUDA_VISIBLE_DEVICES=0');
    const cuda = await explain('cuda-visible-devices-signal');
    expect(cuda.rows.get('Deployment/default-runtime-nvidia/amd')).toBe('skip: no NVIDIA GPU: it asks for AMD GPU (amd.com/gpu=1), where there is no nvidia-smi to wait on');
  });

  it('skip reasons name the accelerator asked for, and the opt-in hint only where vLLM may hide', async () => {
    const { rows, text } = await explain('other-accelerators-and-engines');
    expect(rows.get('Deployment/tpu/vllm-tpu')).toBe('skip: no NVIDIA GPU: it asks for Google TPU (google.com/tpu=4), where there is no nvidia-smi to wait on');
    expect(rows.get('Deployment/neuron/vllm-neuron')).toBe('skip: no NVIDIA GPU: it asks for AWS Neuron (aws.amazon.com/neuroncore=2), where there is no nvidia-smi to wait on');
    expect(rows.get('Deployment/sglang-next-to-vllm/sglang')).toBe('skip: its start runs SGLang, not vLLM');
    expect(rows.get('Deployment/sglang-next-to-vllm/tgi')).toBe('skip: its start runs TGI (text-generation-inference), not vLLM');
    expect(text).not.toContain('CPU, AMD or Intel');
    expect(text).not.toContain('vram-preflight.io/containers');
  });

  it('operator resources without a containers key are named with why', async () => {
    const { rows } = await explain('operator-kinds-unnamed');
    expect(rows.get('BackendRuntime/vllm/-')).toMatch(/^cannot-wrap: .*llmaz builds each model's pod from this runtime/);
    expect(rows.get('Template/vllm-cuda-runtime-template/-')).toMatch(/^cannot-wrap: .*OpenShift Template.*oc process.*KServe merges this runtime/);
    expect(rows.get('InferenceService/demo-llm/-')).toMatch(/^cannot-wrap: .*KServe builds the model server container from a ServingRuntime/);
  });

  it('an unknown kind with vLLM on a GPU is a warning, in explain and on stderr', async () => {
    const { text, rows } = await explain('unknown-kind-vllm-warns');
    expect(rows.get('InferencePool/pool/server')).toMatch(/^skip: kind InferencePool \(serving\.example\.ai\/v1\) is not one vram-preflight knows/);
    expect(rows.has('InferencePool/pool/cpu-helper')).toBe(false);
    expect(rows.has('InferencePool/no-gpu/server')).toBe(false);
    expect(text).toMatch(/Warnings:\n {2}- InferencePool\/pool .*fix: file an issue/);
  });

  it('a multi-node set wrapped in part says so, with the annotation that completes it', async () => {
    const { text } = await explain('lws-worker-unwrapped-warns');
    expect(text).toContain('GPU container "worker" of the same set');
    expect(text).toContain('fix: add the annotation vram-preflight.io/containers: "worker" to spec.leaderWorkerTemplate.workerTemplate.metadata.annotations');
    // Named, the worker is wrapped and the warning is gone.
    const input = readFileSync(join(casesDir, 'lws-worker-unwrapped-warns', 'input.yaml'), 'utf8').replace('    workerTemplate:\n      spec:', '    workerTemplate:\n      metadata:\n        annotations:\n          vram-preflight.io/containers: "worker"\n      spec:');
    const fixed = await runCli([], input);
    expect(fixed.code).toBe(0);
    expect(fixed.stderr).not.toContain('same set');
  });
});
