import { describe, expect, it } from 'vitest';
import { findKnownImage, parseImage, tagInRange } from '../../src/images.js';
import { splitStream } from '../../src/stream.js';
import { readUtilization } from '../../src/utilization.js';
import { argvStartsVllm, nvidiaGpus } from '../../src/detect.js';
import { quoteYamlString } from '../../src/rewrite.js';
import { parse } from 'yaml';
import { findWorkloadKind, WORKLOAD_KINDS } from '../../src/workloads.js';

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

  it('places vllm/vllm-openai tags on the side of the ENTRYPOINT change they belong to, and refuses the gap', () => {
    const start = (image: string) => findKnownImage(parseImage(image))?.entrypoint.join(' ');
    expect(start('vllm/vllm-openai:v0.12.9')).toBe('python3 -m vllm.entrypoints.openai.api_server');
    expect(start('vllm/vllm-openai:v0.8.5.post1')).toBe('python3 -m vllm.entrypoints.openai.api_server');
    expect(start('vllm/vllm-openai:v0.13.0')).toBeUndefined();
    expect(start('vllm/vllm-openai:v0.25.9')).toBeUndefined();
    expect(start('vllm/vllm-openai:v0.26.0')).toBe('vllm serve');
    expect(start('vllm/vllm-openai:v0.26.0rc1')).toBeUndefined();
    expect(start('vllm/vllm-openai:latest')).toBe('vllm serve');
    expect(start('vllm/vllm-openai')).toBe('vllm serve');
    expect(start('vllm/vllm-openai:nightly')).toBeUndefined();
    expect(start('lmcache/vllm-openai:v0.5.2')).toBe('/opt/venv/bin/vllm serve');
    expect(start('someone/vllm-openai-fork:v0.26.0')).toBeUndefined();
  });

  it('range edges are inclusive below and exclusive above', () => {
    expect(tagInRange('v1.0.0', { from: '1.0.0', below: '2.0.0' })).toBe(true);
    expect(tagInRange('v2.0.0', { from: '1.0.0', below: '2.0.0' })).toBe(false);
    expect(tagInRange('v0.9.9', { from: '1.0.0' })).toBe(false);
  });
});

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
});

describe('utilization', () => {
  const read = (start: string[], extra: Partial<Parameters<typeof readUtilization>[0]> = {}) =>
    readUtilization({ start, env: [], hasEnvFrom: false, defaultValue: 0.9, context: {}, ...extra });
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
  it.each([['0'], ['1.01'], ['-0.5'], ['0x1'], ['1e-1'], [''], ['NaN']])('refuses %j', (raw) => {
    expect(() => read(['--gpu-memory-utilization', raw])).toThrow(/BAD_UTILIZATION|not a number/);
  });
  it('resolves $(VAR) from a literal env value, the last definition winning', () => {
    expect(read(['--gpu-memory-utilization', '$(U)'], { env: [{ name: 'U', value: '0.1' }, { name: 'U', value: '0.4' }] }).value).toBe(0.4);
    expect(() => read(['--gpu-memory-utilization', '$(U)'], { hasEnvFrom: true })).toThrow(/envFrom/);
    expect(() => read(['--gpu-memory-utilization', 'x$(U)'])).toThrow(/mixes/);
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
  it('counts nvidia.com/gpu and MIG slices above zero, nothing else', () => {
    expect(nvidiaGpus({ limits: { 'nvidia.com/gpu': 2 } })).toEqual(['nvidia.com/gpu=2']);
    expect(nvidiaGpus({ requests: { 'nvidia.com/mig-3g.40gb': '1' } })).toEqual(['nvidia.com/mig-3g.40gb=1']);
    expect(nvidiaGpus({ limits: { 'nvidia.com/gpu': 0, 'amd.com/gpu': 1 } })).toEqual([]);
    expect(nvidiaGpus(undefined)).toEqual([]);
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
