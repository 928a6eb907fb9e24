import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { transform } from '../../src/core/transform.js';
import { DEFAULT_OPTIONS } from '../../src/config/sources.js';
import { findKnownImage, KNOWN_IMAGES, parseTag, tagMatches } from '../../src/core/tables/images.js';
import { compareVersions, parseImage, parseVersion } from '../../src/core/tables/image-ref.js';
import { nvidiaGpuSignals, emptyDeviceClaims, recordDeviceClaim } from '../../src/core/tables/gpu.js';
import { globMatches } from '../../src/core/decide/glob.js';
import { escapeForKubelet } from '../../src/core/decide/start.js';
import { firstDifference, verifyEditedChunk } from '../../src/core/yaml/verify.js';
import { LineIndex, splitStream } from '../../src/core/yaml/stream.js';
import { mayHoldTarget, mayHoldTargetInPieces, TARGET_WORDS } from '../../src/core/decide/target-words.js';
import { readUtilization } from '../../src/core/decide/utilization.js';
import { argvStartsVllm, startsVllmInBackground } from '../../src/core/decide/detect.js';
import { quoteYamlString } from '../../src/core/yaml/edit.js';
import { parse } from 'yaml';
import { findWorkloadKind, WORKLOAD_KINDS } from '../../src/core/tables/workloads.js';

describe('image references', () => {
  it.each([
    ['vllm/vllm-openai:v0.26.0', 'docker.io', 'vllm/vllm-openai', 'v0.26.0', undefined],
    ['docker.io/library/busybox', 'docker.io', 'library/busybox', undefined, undefined],
    ['busybox:1.36', 'docker.io', 'library/busybox', '1.36', undefined],
    ['localhost:5000/vllm:dev', 'localhost:5000', 'vllm', 'dev', undefined],
    ['nvcr.io/nvidia/vllm:25.09-py3@sha256:abc', 'nvcr.io', 'nvidia/vllm', '25.09-py3', 'sha256:abc'],
  ])('%s', (raw, registry, repository, tag, digest) => {
    expect(parseImage(raw)).toEqual({ raw, registry, repository, tag, digest });
  });

  const start = (image: string) => findKnownImage(parseImage(image))?.entrypoint.join(' ');
  const API = 'python3 -m vllm.entrypoints.openai.api_server';

  it.each([
    // vllm/vllm-openai: api_server up to v0.11.0 (proven), vllm serve from v0.14.1 (proven), the gap refused
    ['vllm/vllm-openai:v0.11.0', API],
    ['vllm/vllm-openai:v0.10.1.1', API],
    ['vllm/vllm-openai:v0.8.5rc1', API],
    ['vllm/vllm-openai:v0.9.2-x86_64', API],
    ['vllm/vllm-openai:v0.11.0.1', undefined],
    ['vllm/vllm-openai:v0.11.2', undefined],
    ['vllm/vllm-openai:v0.13.0', undefined],
    ['vllm/vllm-openai:v0.14.0', undefined],
    ['vllm/vllm-openai:v0.14.1rc1', undefined],
    ['vllm/vllm-openai:v0.14.1', 'vllm serve'],
    ['vllm/vllm-openai:v0.14.1-cu130', 'vllm serve'],
    ['vllm/vllm-openai:v0.17.0-aarch64-cu130', 'vllm serve'],
    ['vllm/vllm-openai:v0.21.0-cu129', 'vllm serve'],
    ['vllm/vllm-openai:v0.22.1-x86_64-cu129', 'vllm serve'],
    ['vllm/vllm-openai:v0.25.0-cu129-ubuntu2404', 'vllm serve'],
    ['vllm/vllm-openai:v0.26.0-ubuntu2404', 'vllm serve'],
    ['vllm/vllm-openai:latest', 'vllm serve'],
    ['vllm/vllm-openai:latest-x86_64', 'vllm serve'],
    ['vllm/vllm-openai:latest-cu129', 'vllm serve'],
    ['vllm/vllm-openai', 'vllm serve'],
    ['vllm/vllm-openai:nightly', undefined],
    ['vllm/vllm-openai:nightly-8bff831f0aa239006f34b721e63e1340e3472067', undefined],
    ['vllm/vllm-openai:glm5', undefined],
    ['vllm/vllm-openai:gemma4-cu130', undefined],
    ['vllm/vllm-openai@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef', undefined],
    ['harbor.example.com/proxy/vllm/vllm-openai:v0.26.0', 'vllm serve'],
    ['someone/vllm-openai-fork:v0.26.0', undefined],
    // lmcache/vllm-openai: /opt/venv/bin/vllm serve after the mid-2025 switch
    ['lmcache/vllm-openai:nightly-2026-08-18-cu129', '/opt/venv/bin/vllm serve'],
    ['lmcache/vllm-openai:nightly-2025-06-24', '/opt/venv/bin/vllm serve'],
    ['lmcache/vllm-openai:nightly-2025-06-01', undefined],
    ['lmcache/vllm-openai:latest-nightly-cu129', '/opt/venv/bin/vllm serve'],
    ['lmcache/vllm-openai:latest-cu129', '/opt/venv/bin/vllm serve'],
    ['lmcache/vllm-openai:v0.3.9post2', '/opt/venv/bin/vllm serve'],
    ['lmcache/vllm-openai:v0.4.7-cu129', '/opt/venv/bin/vllm serve'],
    ['lmcache/vllm-openai:2025-05-27-v1', undefined],
    // KServe: -gpu tags python3, CPU tags python since v0.15
    ['kserve/huggingfaceserver:v0.15.2-gpu', 'python3 -m huggingfaceserver'],
    ['kserve/huggingfaceserver:latest-gpu', 'python3 -m huggingfaceserver'],
    ['kserve/huggingfaceserver:v0.15.2', 'python -m huggingfaceserver'],
    ['kserve/huggingfaceserver:v0.14.1', 'python3 -m huggingfaceserver'],
    // llm-d, as far as the evidence reaches
    ['ghcr.io/llm-d/llm-d-cuda:v0.4.0', 'python -m vllm.entrypoints.openai.api_server'],
    ['ghcr.io/llm-d/llm-d-cuda:v0.9.0', undefined],
    ['ghcr.io/llm-d/llm-d:v0.2.0', API],
    ['nvcr.io/nvidia/ai-dynamo/vllm-runtime:0.6.1', '/opt/nvidia/nvidia_entrypoint.sh'],
  ])('%s starts with %s', (image, expected) => {
    expect(start(image)).toBe(expected);
  });

  it('orders rc before its release before a post-release', () => {
    const v = (t: string) => parseVersion(t)!;
    expect(compareVersions(v('0.14.1rc1'), v('0.14.1'))).toBeLessThan(0);
    expect(compareVersions(v('0.14.1'), v('0.14.1.1'))).toBeLessThan(0);
    expect(compareVersions(v('0.3.9post2'), v('0.3.9.1'))).toBeGreaterThan(0);
    expect(parseVersion('v1.2')).toBeUndefined();
  });

  it('strips variant suffixes per grammar', () => {
    expect(parseTag('v0.20.1-x86_64-cu129-ubuntu2404', 'vllm').version?.parts).toEqual([0, 20, 1]);
    expect(parseTag('latest-aarch64', 'vllm').name).toBe('latest');
    expect(parseTag('nightly-2026-08-18-cu129', 'lmcache').date).toBe('2026-08-18');
    expect(parseTag('v0.15.0-gpu', 'kserve')).toMatchObject({ variant: 'gpu' });
    expect(tagMatches(parseTag('v0.15.0-gpu', 'kserve'), { from: '0.15.0', variant: '' })).toBe(false);
  });

  it('every row states its evidence and confidence', () => {
    for (const row of KNOWN_IMAGES) {
      expect(row.evidence.length, row.repository).toBeGreaterThan(10);
      expect(['proven', 'inferred']).toContain(row.confidence);
    }
  });

  it('escapes every $ of an image start for the kubelet', () => {
    expect(escapeForKubelet('--cache=$(HF_HOME)')).toBe('--cache=$$(HF_HOME)');
    expect(escapeForKubelet('$$5')).toBe('$$$$5');
  });
});

describe('glob matching', () => {
  it.each([
    ['model*', 'model-a', true],
    ['*a*a*a*a*a*a*b', 'a'.repeat(63), false],
    ['*-*-*-*-*-*-*-*-x', 'a-'.repeat(60), false],
    ['*', '', true],
    ['a*b*c', 'aXbYc', true],
    ['a*b*c', 'aXbY', false],
    ['v0.?', 'v0.1', false],
    ['exact', 'exact', true],
  ])('%s against %s: %s', (pattern, text, expected) => {
    expect(globMatches(pattern, text)).toBe(expected);
  });
  it('costs at most pattern x text steps on the adversarial cases', () => {
    // Counted, not timed: a backtracking matcher would take billions of steps here.
    const started = process.hrtime.bigint();
    for (let i = 0; i < 100; i++) globMatches('*a'.repeat(200) + 'b', 'a'.repeat(5000));
    expect(Number(process.hrtime.bigint() - started) / 1e9).toBeLessThan(30);
  });
});

describe('GPU signals', () => {
  const signals = (container: object, podSpec: object = {}, claims = emptyDeviceClaims()) =>
    nvidiaGpuSignals({ container: container as Record<string, unknown>, podSpec: podSpec as Record<string, unknown>, claims }).signals.map((s) => `${s.signal}:${s.detail}`);
  it('counts NVIDIA GPU resources above zero, time-sliced and MIG included', () => {
    expect(signals({ resources: { limits: { 'nvidia.com/gpu': 2 } } })).toEqual(['resource:nvidia.com/gpu=2']);
    expect(signals({ resources: { limits: { 'nvidia.com/gpu.shared': 1 } } })).toEqual(['resource:nvidia.com/gpu.shared=1']);
    expect(signals({ resources: { requests: { 'nvidia.com/mig-3g.40gb': '1' } } })).toEqual(['resource:nvidia.com/mig-3g.40gb=1']);
    expect(signals({ resources: { limits: { 'nvidia.com/gpu': 0, 'amd.com/gpu': 1 } } })).toEqual([]);
  });
  it('reads the NVIDIA runtimeClass and NVIDIA_VISIBLE_DEVICES', () => {
    expect(signals({}, { runtimeClassName: 'nvidia' })).toEqual(['runtimeClass:runtimeClassName nvidia']);
    expect(signals({}, { runtimeClassName: 'nvidia-cdi' })).toHaveLength(1);
    expect(signals({}, { runtimeClassName: 'kata' })).toEqual([]);
    expect(signals({ env: [{ name: 'NVIDIA_VISIBLE_DEVICES', value: 'all' }] })).toEqual(['visibleDevices:NVIDIA_VISIBLE_DEVICES=all']);
    for (const none of ['void', 'none', '']) expect(signals({ env: [{ name: 'NVIDIA_VISIBLE_DEVICES', value: none }] })).toEqual([]);
  });
  // Every way the toolkit names a MIG instance (docs/restart-race.md, MIG), not only its UUID.
  it('NVIDIA_VISIBLE_DEVICES naming a MIG instance, by UUID or by <gpu>:<mig> index, marks the signal MIG', () => {
    const mig = (value: string) => nvidiaGpuSignals({ container: { env: [{ name: 'NVIDIA_VISIBLE_DEVICES', value }] }, podSpec: {}, claims: emptyDeviceClaims() }).signals.map((s) => s.mig === true);
    for (const yes of ['MIG-5c4d2a1e-0b7d-4e55-9a61-2c4d5e6f7a8b', 'MIG-GPU-8f3c2a1e-0b7d-4e55-9a61-2c4d5e6f7a8b/1/0', '0:0', '1:3', '0, 2:1']) expect(mig(yes)).toEqual([true]);
    for (const no of ['all', '0', '0,1', 'GPU-8f3c2a1e-0b7d-4e55-9a61-2c4d5e6f7a8b', ':1', '1:', 'a:1']) expect(mig(no)).toEqual([false]);
  });
  it('follows DRA claims to NVIDIA device classes in the stream, and reports unknown ones', () => {
    const claims = emptyDeviceClaims();
    recordDeviceClaim(claims, { kind: 'ResourceClaimTemplate', metadata: { name: 'one-gpu' }, spec: { spec: { devices: { requests: [{ name: 'g', exactly: { deviceClassName: 'gpu.nvidia.com' } }] } } } });
    recordDeviceClaim(claims, { kind: 'ResourceClaim', metadata: { name: 'nic' }, spec: { devices: { requests: [{ name: 'n', deviceClassName: 'nic.example.com' }] } } });
    const podSpec = { resourceClaims: [{ name: 'gpu', resourceClaimTemplateName: 'one-gpu' }, { name: 'net', resourceClaimName: 'nic' }, { name: 'ext', resourceClaimName: 'elsewhere' }] };
    expect(signals({ resources: { claims: [{ name: 'gpu' }] } }, podSpec, claims)).toEqual(['dra:DRA ResourceClaimTemplate one-gpu → gpu.nvidia.com']);
    expect(signals({ resources: { claims: [{ name: 'net' }] } }, podSpec, claims)).toEqual([]);
    const unknown = nvidiaGpuSignals({ container: { resources: { claims: [{ name: 'ext' }] } }, podSpec, claims });
    expect(unknown.unknownClaims).toEqual(['ResourceClaim elsewhere (claim "ext")']);
  });
});

describe('verification after an edit', () => {
  it('finds the first differing path', () => {
    expect(firstDifference({ a: [1, { b: 2 }] }, { a: [1, { b: 3 }] })).toEqual(['a', 1, 'b']);
    expect(firstDifference({ a: 1 }, { a: 1 })).toBeUndefined();
  });
  it('refuses an edit that changes what another node means', () => {
    const original = 'c: &x [a]\nd: *x\n';
    const edited = 'c: &x [b]\nd: *x\n';
    const problem = verifyEditedChunk(edited, [{ c: ['a'], d: ['a'] }], [[]]);
    expect(problem?.message).toContain('c');
    expect(verifyEditedChunk(original, [{ c: ['a'], d: ['a'] }], [[]])).toBeUndefined();
    expect(verifyEditedChunk('c: *nope\n', [{}], [[]])?.message).toMatch(/not be (valid YAML|readable)/);
  });
});

describe('the target words (src/core/decide/target-words.ts)', () => {
  it('every repository of the built-in image table holds one: they alone may decide a stream has nothing to rewrite', () => {
    for (const row of KNOWN_IMAGES) expect(TARGET_WORDS.some((w) => row.repository.toLowerCase().includes(w)), row.repository).toBe(true);
  });
  it('a backslash or a word in any case may hold a target; nothing else', () => {
    expect(mayHoldTarget('image: VLLM/vllm-openai')).toBe(true);
    expect(mayHoldTarget('name: "\\x76llm"')).toBe(true);
    expect(mayHoldTarget('image: ghcr.io/LLM-D/x')).toBe(true);
    expect(mayHoldTarget('image: llama.cpp/server')).toBe(false);
  });
  it('in pieces: the same answer as for the pieces joined, wherever the boundaries cut a word, and through pieces shorter than a word', () => {
    const texts = [...TARGET_WORDS.map((w) => `image: ${w.toUpperCase()}/x`), 'image: llama.cpp/server', 'a: "\\x76"', 'command: [vl, lm]'];
    for (const text of texts) {
      for (let a = 0; a <= text.length; a++) {
        for (let b = a; b <= text.length; b += 3) {
          const pieces = [text.slice(0, a), text.slice(a, b), text.slice(b, b + 1), text.slice(b + 1)];
          expect(mayHoldTargetInPieces(pieces), JSON.stringify(pieces)).toBe(mayHoldTarget(text));
        }
      }
    }
  });
});

/** The rule, written plainly: a chunk starts at every `---` that begins a line (not the first) and is followed by a space, a tab, a line end or the end. */
function cutAtMarkers(stream: string): { text: string; offset: number }[] {
  const starts = [0];
  for (let at = 1; at < stream.length; at++) {
    if (stream[at - 1] === '\n' && stream.startsWith('---', at) && [undefined, ' ', '\t', '\r', '\n'].includes(stream[at + 3])) starts.push(at);
  }
  return starts.map((start, i) => ({ text: stream.slice(start, starts[i + 1] ?? stream.length), offset: start }));
}

describe('stream splitting', () => {
  it('cuts only at --- lines that start a document', () => {
    const stream = 'a: 1\n---\nb: |\n  ---\n---x\n--- # c\nd: 2\n---';
    expect(splitStream(stream).map((c) => c.text)).toEqual(['a: 1\n', '---\nb: |\n  ---\n---x\n', '--- # c\nd: 2\n', '---']);
    expect(splitStream(stream).map((c) => c.text).join('')).toBe(stream);
  });
  it('keeps CRLF and a BOM inside the chunks', () => {
    const stream = '\ufeffa: 1\r\n---\r\nb: 2\r\n';
    expect(splitStream(stream).map((c) => c.text)).toEqual(['\ufeffa: 1\r\n', '---\r\nb: 2\r\n']);
  });
  it('cuts a stream given in pieces exactly as the whole, wherever the pieces end (seeded)', () => {
    const line = fc.constantFrom('---\n', '--- # c\n', '---x\n', '---', '--', '-', 'a: 1\n', 'b: |\n', '  ---\n', '\r\n', '\n', '---\r\n', '--- \n', '---\t\n', 'k: v');
    fc.assert(
      fc.property(fc.array(line, { maxLength: 12 }), fc.array(fc.nat(), { maxLength: 6 }), (lines, cuts) => {
        const whole = lines.join('');
        const at = [...new Set(cuts.map((c) => c % (whole.length + 1)))].sort((x, y) => x - y);
        const pieces = [0, ...at].map((start, i) => whole.slice(start, [...at, whole.length][i]));
        expect(splitStream(pieces)).toEqual(splitStream(whole));
        expect(splitStream(whole)).toEqual(cutAtMarkers(whole));
        const offsets = [0, Math.floor(whole.length / 2), whole.length];
        expect(offsets.map((o) => new LineIndex(pieces).position(o))).toEqual(offsets.map((o) => new LineIndex(whole).position(o)));
      }),
      { numRuns: 3000, seed: 20261203 },
    );
  });
});

describe('utilization', () => {
  const read = (start: string[], extra: Partial<Parameters<typeof readUtilization>[0]> = {}) =>
    readUtilization({ start, env: [], hasEnvFrom: false, defaultValue: { text: '0.9', value: 0.9 }, context: {}, ...extra });
  it.each([
    [['--gpu-memory-utilization', '0.8'], 0.8],
    [['--gpu-memory-utilization=0.8'], 0.8],
    [['--gpu_memory_utilization', '.5'], 0.5],
    [['--gpu_memory_utilization=1'], 1],
    [['--gpu-memory-utilization', '0.3', '--gpu-memory-utilization', '0.6'], 0.6],
    [['bash', '-c', 'vllm serve m --gpu-memory-utilization "0.7" && true'], 0.7],
  ])('%j → %s', (start, value) => {
    expect(read(start).value).toBe(value);
  });
  it.each([['1e-1', 0.1], ['+.9', 0.9], ['0.9_5', 0.95], [' 0.9 ', 0.9], ['0.1234567', 0.1234567], ['1', 1]])('accepts %j as vLLM (Python float) does', (raw, value) => {
    expect(read(['--gpu-memory-utilization', raw]).value).toBe(value);
  });
  it.each([['0'], ['1.01'], ['-0.5'], ['0x1'], ['1e1'], [''], ['NaN'], ['inf'], ['_9']])('refuses %j', (raw) => {
    expect(() => read(['--gpu-memory-utilization', raw])).toThrow(/BAD_UTILIZATION|not a number/);
  });
  it('carries the text as written to the script, and the number vLLM reads to the report', () => {
    expect(read(['--gpu-memory-utilization', ' 9.5e-1 '])).toMatchObject({ text: '9.5e-1', value: 0.95 });
    expect(read(['--gpu-memory-utilization', '0.95000000000000001'])).toMatchObject({ text: '0.95000000000000001', value: 0.95 });
    expect(read(['vllm', 'serve'])).toMatchObject({ text: '0.9', value: 0.9, source: 'default' });
    // A text over 1 is refused as the script refuses it at run time, though float() reads 1.0.
    expect(() => read(['--gpu-memory-utilization', '1.00000000000000001'])).toThrow(/not a number in \(0, 1\]/);
  });
  it('the render writes the text rounded on its digits into the script, the report shows the number', () => {
    const pod = (u: string) =>
      `apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n    - name: m\n      image: vllm/vllm-openai:v0.26.0\n      args: [m, --gpu-memory-utilization, "${u}"]\n      resources: {limits: {nvidia.com/gpu: 1}}\n`;
    const exact = transform(pod('0.95000000000000001'), DEFAULT_OPTIONS);
    expect(exact.errors).toEqual([]);
    expect(exact.output).toMatch(/\n +util=0\.950001 /);
    expect(exact.containers[0]!.utilization?.value).toBe(0.95);
    expect(transform(pod('9.5e-1'), DEFAULT_OPTIONS).output).toMatch(/\n +util=0\.95 /);
    expect(transform(pod('vllm').replace(/args: .*\n/, 'args: [m]\n'), { ...DEFAULT_OPTIONS, defaultUtilization: 1e-7 }).output).toMatch(/\n +util=0\.000001 /);
  });
  it('resolves $(VAR) from a literal env value, the last definition winning', () => {
    expect(read(['--gpu-memory-utilization', '$(U)'], { env: [{ name: 'U', value: '0.1' }, { name: 'U', value: '0.4' }] }).value).toBe(0.4);
    expect(() => read(['--gpu-memory-utilization', '$(U)'])).toThrow(/does not define/);
  });
  it('leaves values only the kubelet knows to the script, at run time', () => {
    expect(read(['--gpu-memory-utilization', '$(U)'], { hasEnvFrom: true }).value).toBeUndefined();
    expect(read(['--gpu-memory-utilization=$(U)'], { env: [{ name: 'U', valueFrom: { configMapKeyRef: {} } }] }).source).toBe('runtime');
    expect(read(['--gpu-memory-utilization', '0.$(U)'])).toMatchObject({ source: 'runtime' });
    expect(() => read(['bash', '-c', 'vllm serve m --gpu-memory-utilization $(U)'])).toThrow(/cannot be read/);
  });
  it('uses the default when absent, and says so', () => {
    expect(read(['vllm', 'serve'])).toMatchObject({ value: 0.9, source: 'default' });
  });
  it('an annotation agreeing with the args is fine; contradicting them is an error', () => {
    const annotation = { key: 'vram-preflight.io/gpu-memory-utilization', value: '0.8' };
    expect(read(['--gpu-memory-utilization', '0.8'], { annotation }).source).toBe('annotation');
    expect(() => read(['--gpu-memory-utilization', '0.7'], { annotation })).toThrow(/contradicts/);
  });
});

describe('detection helpers', () => {
  it.each([
    [['vllm', 'serve', 'm'], true],
    [['/opt/venv/bin/vllm', 'serve'], true],
    [['vllm', 'bench'], false],
    [['python3', '-m', 'vllm.entrypoints.openai.api_server'], true],
    [['python3.12', '-u', '-m', 'vllm.entrypoints.openai.api_server'], true],
    [['python', '-m', 'sglang.launch_server'], false],
    [['/bin/sh', '-c', 'pip install x && exec vllm serve m'], true],
    [['/bin/sh', '-c', 'echo vllm'], false],
  ])('%j starts vLLM: %s', (argv, expected) => {
    expect(argvStartsVllm(argv)).toBe(expected);
  });
  it('sees vLLM behind launchers and in Dynamo, and notes a background start', () => {
    expect(argvStartsVllm(['/opt/nvidia/nvidia_entrypoint.sh', 'python3', '-m', 'dynamo.vllm', '--model', 'x'])).toBe(true);
    expect(argvStartsVllm(['tini', '--', 'vllm', 'serve', 'm'])).toBe(true);
    expect(startsVllmInBackground(['bash', '-c', 'ray start --head; vllm serve m --port 8000 & sleep infinity'])).toBe(true);
    expect(startsVllmInBackground(['bash', '-c', 'ray start --head && vllm serve m'])).toBe(false);
  });
  it('the workload table has one row per kind and matches on API group', () => {
    expect(new Set(WORKLOAD_KINDS.map((k) => `${k.group}/${k.kind}`)).size).toBe(WORKLOAD_KINDS.length);
    expect(findWorkloadKind('Deployment', 'apps/v1')).toBeDefined();
    expect(findWorkloadKind('Deployment', 'example.com/v1')).toBeUndefined();
    expect(findWorkloadKind('Pod', 'v1')).toBeDefined();
  });
});

describe('quoting', () => {
  it.each(['plain', 'a "b" \\ c', 'line\nbreak', '\u2028\u0085\u007f\u0000\ufeff', '$(reboot)', 'é😀'])('%j reads back exactly under YAML 1.1 and 1.2', (value) => {
    expect(parse(quoteYamlString(value), { version: '1.2' })).toBe(value);
    expect(parse(quoteYamlString(value), { version: '1.1' })).toBe(value);
  });
});

describe('registry lookup modes, as the transform applies them', () => {
  const manifest = (tag: string) =>
    `apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n    - name: m\n      image: vllm/vllm-openai:${tag}\n      args: [m, --gpu-memory-utilization, "0.9"]\n      resources: {limits: {nvidia.com/gpu: 1}}\n`;
  const answer = { image: 'x', entrypoint: ['/registry/bin/vllm', 'serve'], cmd: [], digest: `sha256:${'a'.repeat(64)}`, platform: 'linux/amd64', source: 'registry' as const, checkedAt: '2026-12-02T00:00:00Z' };
  const run = (tag: string, registryLookup: 'missing' | 'never' | 'always', registry = new Map()) =>
    transform(manifest(tag), { ...DEFAULT_OPTIONS, registryLookup }, { registry });
  it('missing: only what the table cannot place is wanted, then the answer is used', () => {
    expect(run('v0.26.0', 'missing').wantedImages).toEqual([]);
    expect(run('v0.12.0', 'missing').wantedImages).toEqual(['vllm/vllm-openai:v0.12.0']);
    const answered = run('v0.12.0', 'missing', new Map([['vllm/vllm-openai:v0.12.0', answer]]));
    expect(answered.errors).toEqual([]);
    expect(answered.containers[0]!.startEvidence?.source).toBe('registry');
  });
  it('never: nothing is wanted and the unplaced tag is refused', () => {
    const r = run('v0.12.0', 'never');
    expect(r.wantedImages).toEqual([]);
    expect(r.errors[0]?.message).toContain('registryLookup: never');
  });
  it('always: the registry is asked first, and its answer wins over the table', () => {
    expect(run('v0.26.0', 'always').wantedImages).toEqual(['vllm/vllm-openai:v0.26.0']);
    const answered = run('v0.26.0', 'always', new Map([['vllm/vllm-openai:v0.26.0', answer]]));
    expect(answered.containers[0]!.startEvidence?.source).toBe('registry');
    expect(answered.output).toContain('"/registry/bin/vllm"');
    const failed = run('v0.26.0', 'always', new Map([['vllm/vllm-openai:v0.26.0', { image: 'x', error: 'docker.io: cannot connect' }]]));
    expect(failed.errors).toEqual([]);
    expect(failed.containers[0]!.startEvidence?.source).toBe('table');
    expect(failed.warnings.join('\n')).toContain('registryLookup is always, but the registry could not be asked');
  });
});
