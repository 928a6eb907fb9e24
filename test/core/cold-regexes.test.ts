/**
 * A render is a short-lived process, and V8 compiles every regex on its first
 * runs; the render's path replaces them by small scans (docs/benchmarks.md,
 * "Since 2026-12-03"). Each scan is held here to the regex it replaces, kept
 * as the oracle, on seeded text from an alphabet rich in the characters at
 * their edges, and on hand-picked cases.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { explicitKeyMark, nothingToEscape, onlyCommentToLineEnd, startsWithSpaceOrTab } from '../../src/core/yaml/edit.js';
import { commentsOnly, hasContainersKey, kindLineNames, sourceComment } from '../../src/core/transform.js';
import { KINDS_WITHOUT_CONTAINERS } from '../../src/core/tables/workloads.js';
import { mentionsUtilizationFlag, isPythonFloatText } from '../../src/core/decide/utilization.js';
import { hasNonZeroDigit, isPlainAbsolutePath, isPlainDecimal, isVersionText, leadingZeros, withoutTrailingZeros } from '../../src/core/preflight/settings.js';
import { readPythonFloat, trimPythonSpace } from '../../src/core/python-float.js';
import { withoutScriptExtension } from '../../src/cli/process-io.js';
import { isPythonProgram } from '../../src/core/decide/detect.js';
import { isNvidiaRuntimeClass } from '../../src/core/tables/gpu.js';
import { firstSpaceOrControl, parseVersion, type Version } from '../../src/core/tables/image-ref.js';
import { isLlmdRepository, withoutCudaSuffix } from '../../src/core/tables/images.js';
import { dropLineIndent, isYamlExponentFloat, isYamlHex, isYamlInteger, isYamlOctal, isYamlPointFloat, YAML_INF_NAN } from '../../src/core/yaml/fast-parse.js';

const SEED = 20261204;
const RUNS = 20000;

/** Pieces at the edges of the regexes below: digits, signs, points, `_`, exponent and radix letters, spaces of every kind, line terminators, controls, quotes. */
const EDGE_PIECES = [
  '0', '1', '7', '8', '9', '00', '0.', '.5', '+', '-', '.', '_', 'e', 'E', 'x', 'X', 'o', 'O', 'a', 'f', 'F', 'g', 'G', 'z', 'Z',
  'inf', 'Inf', 'INF', 'nan', 'NaN', 'NAN', 'post', 'rc', 'v', 'cu', 'python', 'nvidia', 'kind:', 'containers', '# Source: ', '---',
  ' ', '  ', '\t', '\r', '\n', '\r\n', '\v', '\f', '\u0000', '\u001f', '\u007f', '\u0085', '\u009f', '\u00a0', '\u1680', '\u2000', '\u200a', '\u2028', '\u2029', '\u202f', '\u3000', '\ufeff', '\ufffe', '\uffff', '\ud800', '\udfff', '\u212a', 'é',
  '#', '"', "'", '\\', '/', ':', ';', '?', '$', '(', ')', '=', '&', '|', '@',
];

/** Seeded text from the edge pieces and any others given. */
function edgeText(extra: readonly string[] = [], maxLength = 10): fc.Arbitrary<string> {
  return fc.array(fc.constantFrom(...EDGE_PIECES, ...extra), { maxLength }).map((a) => a.join(''));
}

/** Holds `scan` to `oracle` on generated text and on the hand-picked cases. */
function sameAnswers<T>(scan: (text: string) => T, oracle: (text: string) => T, cases: readonly string[], extra: readonly string[] = []): void {
  for (const text of cases) expect(scan(text), JSON.stringify(text)).toEqual(oracle(text));
  fc.assert(
    fc.property(edgeText(extra), (text) => {
      expect(scan(text)).toEqual(oracle(text));
    }),
    { numRuns: RUNS, seed: SEED },
  );
}

describe('YAML core-schema number shapes (fast-parse)', () => {
  const numbers = ['', '0', '-0', '+', '-', '.', '0o', '0o7', '0o8', '0o17', '00o7', '0x', '0x0', '0xfF', '0xg', '0X1', '1', '+1', '-12', '1_0', '1.', '.1', '-.1', '+1.', '1.5', '1.5.', '1e5', '1E+5', '1e-5', '1e', '.e1', '.5e1', '1.e1', '-1.5E-10', '1e1.', '1e5\n', ' 1', '1 ', '\u0661', '0x\u0010'];
  const digitsAndLetters = ['0o', '0x', '1', '2', '5', '7', '8', 'b', 'c', 'd', 'A', 'B', '\u0010', '\u0019', '\u0041'];
  it('/^0o[0-7]+$/', () => sameAnswers(isYamlOctal, (t) => /^0o[0-7]+$/.test(t), numbers, digitsAndLetters));
  it('/^[-+]?[0-9]+$/', () => sameAnswers(isYamlInteger, (t) => /^[-+]?[0-9]+$/.test(t), numbers, digitsAndLetters));
  it('/^0x[0-9a-fA-F]+$/', () => sameAnswers(isYamlHex, (t) => /^0x[0-9a-fA-F]+$/.test(t), numbers, digitsAndLetters));
  it('FLOAT_EXP', () => sameAnswers(isYamlExponentFloat, (t) => /^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)[eE][-+]?[0-9]+$/.test(t), numbers, digitsAndLetters));
  it('inf and nan', () => sameAnswers((t) => YAML_INF_NAN.has(t), (t) => /^(?:[-+]?\.(?:inf|Inf|INF)|\.nan|\.NaN|\.NAN)$/.test(t), ['.inf', '-.Inf', '+.INF', '+.nan', '.nan', '.NaN', '.NAN', '.nAn', 'inf', '.inf\n'], ['.']));
  it('FLOAT', () => sameAnswers(isYamlPointFloat, (t) => /^[-+]?(?:\.[0-9]+|[0-9]+\.[0-9]*)$/.test(t), numbers, digitsAndLetters));
});

describe('a block scalar loses its indentation (fast-parse)', () => {
  const blocks = ['', ' ', '   a\n  b\n', '\n\n', '    x\n \n', 'a\r   b\u2028   c\u2029   d\r\n   e', '   ', '\n   '];
  for (const max of [1, 2, 3, 4, 8, 14]) {
    it(`/^ {0,${max}}/gm`, () => sameAnswers((t) => dropLineIndent(t, max), (t) => t.replace(new RegExp(`^ {0,${max}}`, 'gm'), ''), blocks, ['   ', '    ', ' a', '\n ', '\n  ', '\n     ']));
  }
});

describe('the edit (yaml/edit)', () => {
  it('quoting: nothing to escape', () =>
    sameAnswers(nothingToEscape, (t) => /^[^"\\\x00-\x1f\x7f-\x9f\u2028\u2029\ufeff\ud800-\udfff\ufffe\uffff]*$/.test(t), ['', 'vllm', '"', '\\', '\u0080', '\u00a0', '\u2027', '\u202a', '\ud7ff', '\ue000', '\ufefe', '\ufffd', '\u{1f600}', 'a\u001fb', '~\u007f'], ['\u2027', '\u202a', '\ud7ff', '\ue000', '\ufefe', '\ufffd', '~', '\u0020', '\u00ff']));
  it('/^[ \\t]/', () => sameAnswers(startsWithSpaceOrTab, (t) => /^[ \t]/.test(t), ['', ' ', '\t', '\u00a0', 'a ']));
  it('quoting: nothing to escape, long values (the regex itself past 512)', () => {
    const regex = /^[^"\\\x00-\x1f\x7f-\x9f\u2028\u2029\ufeff\ud800-\udfff\ufffe\uffff]*$/;
    for (const length of [511, 512, 513, 5000]) for (const tail of ['', 'x', '"', '\n', '\u2028']) {
      const value = 'a'.repeat(length - tail.length) + tail;
      expect(nothingToEscape(value)).toBe(regex.test(value));
    }
  });
  it('/\\?[ \\t]*$/: the explicit key mark', () => sameAnswers(explicitKeyMark, (t) => /\?[ \t]*$/.exec(t)?.index ?? -1, ['', '?', '? ', '  ? \t', '??', '? x', '?\n', 'a?', '? ?  '], ['?', '? ', '?\t']));
  it('/^[ \\t]*(#.*)?\\r?\\n?$/: only a comment to the line end', () =>
    sameAnswers(onlyCommentToLineEnd, (t) => /^[ \t]*(#.*)?\r?\n?$/.test(t), ['', '\n', '\r\n', '\n\n', '\r', '\r\r', ' # x\r\n', '# a\u2028', '#\u2029\n', ' x', '\t#\t\r\n', '# x \r', '#\r#\n'], ['#', '# x']));
});

describe('the candidate test and document refs (transform)', () => {
  it('/containers[\'"]?\\s*:/', () =>
    sameAnswers(hasContainersKey, (t) => /containers['"]?\s*:/.test(t), ['containers:', 'containers :', '"containers":', "'containers'\u3000:", 'containers""', 'containers\u2028\n\t:', 'containers\u200b:', 'initContainers:', 'containerss:', 'containers containers:'], ['containers', ':']));

  it('the operator-kind line', () => {
    expect(KINDS_WITHOUT_CONTAINERS.every((k) => /^[A-Za-z]+$/.test(k))).toBe(true);
    const regex = new RegExp(`^kind:[ \\t]*['"]?(${KINDS_WITHOUT_CONTAINERS.join('|')})\\b`, 'm');
    const kinds = [...KINDS_WITHOUT_CONTAINERS, ...KINDS_WITHOUT_CONTAINERS.map((k) => k.slice(0, -1)), ...KINDS_WITHOUT_CONTAINERS.map((k) => `${k}s`)];
    sameAnswers((t) => kindLineNames(t, KINDS_WITHOUT_CONTAINERS), (t) => regex.test(t), [`kind: ${KINDS_WITHOUT_CONTAINERS[0]}`, `a\rkind:\t"${KINDS_WITHOUT_CONTAINERS[0]}"`, `x kind: ${KINDS_WITHOUT_CONTAINERS[0]}`, `kind: ${KINDS_WITHOUT_CONTAINERS[0]}_x`, `kind: ${KINDS_WITHOUT_CONTAINERS[0]}é`], ['kind:', 'kind: ', '\nkind:', '_', ...kinds]);
  });

  it('/^# Source: (.+?)\\r?$/m', () =>
    sameAnswers(sourceComment, (t) => /^# Source: (.+?)\r?$/m.exec(t)?.[1], ['# Source: a/b.yaml', '# Source: \n# Source: x\r\n', 'x# Source: a', '\u2028# Source: a\u2029', '# Source: a\r', '# Source: \r', '# Source: # Source: b'], ['# Source: ', '\n# Source: ', 'a.yaml']));

  it('COMMENTS_ONLY', () =>
    sameAnswers(commentsOnly, (t) => /^(---[ \t]*\r?\n?)?([ \t]*(#.*)?\r?(\n|$))*$/.test(t), ['', '---', '---\n# Source: a\n', '--- \r\r', '---\r\r\n', '---\r\n\r', '--- # x', '---\n---\n', '# a\u2028', '\r', '\r\r', '#\r#\r\n', ' \n\t\n'], ['---', '--- ', '# x', '# Source: a']));
});

describe('the utilization readers and the settings checks (preflight, decide/utilization)', () => {
  const floats = ['', '0', '.', '+', '-', '0.9', '.9', '9.', '+.9', '-0.9', '1_0', '1__0', '_1', '1_', '1_.5', '1._5', '.5_5', '9e-1', '9E+1_0', '9e', '9e_1', '1.e5', '.e5', 'e5', '1e5.', ' 0.9', '0.9\n', '\u0661', '0x1', 'inf', 'nan', '1.2.3'];
  const floatPieces = ['1', '0', '9', '_', '.', 'e', 'E', '+', '-', '_1', '.5'];
  it('the settings reader: PY_FLOAT with its captures', () => {
    const regex = /^([+-]?)((?:\d+(?:_\d+)*)?\.\d+(?:_\d+)*|\d+(?:_\d+)*\.?)(?:[eE]([+-]?\d+(?:_\d+)*))?$/;
    sameAnswers(readPythonFloat, (t) => {
      const m = regex.exec(t);
      return m ? { sign: m[1], mantissa: m[2], ...(m[3] === undefined ? {} : { exponent: m[3] }) } : undefined;
    }, floats, floatPieces);
  });
  it("the flag's reader: PY_FLOAT", () =>
    sameAnswers(isPythonFloatText, (t) => /^\+?(?:\d+(?:_\d+)*(?:\.(?:\d+(?:_\d+)*)?)?|\.\d+(?:_\d+)*)(?:[eE][+-]?\d+(?:_\d+)*)?$/.test(t), floats, floatPieces));
  it('PY_SPACE', () => sameAnswers(trimPythonSpace, (t) => t.replace(/^[ \t\n\v\f\r]+|[ \t\n\v\f\r]+$/g, ''), ['', ' ', ' \t\n\v\f\r0.9\r\n ', '\u00a00.9\u00a0', '0 .9'], floatPieces));
  it('/^0*/, /[1-9]/, /0+$/', () => {
    sameAnswers(leadingZeros, (t) => /^0*/.exec(t)![0].length, ['', '0', '000', '0010', '1'], floatPieces);
    sameAnswers(withoutTrailingZeros, (t) => t.replace(/0+$/, ''), ['', '0', '000', '0100', '100'], floatPieces);
    for (const from of [0, 1, 2, 5]) sameAnswers((t) => hasNonZeroDigit(t, from), (t) => /[1-9]/.test(t.slice(from)), ['', '0', '0001', '10', '00'], floatPieces);
  });
  it('gpu[-_]memory[-_]utilization', () =>
    sameAnswers(mentionsUtilizationFlag, (t) => /gpu[-_]memory[-_]utilization/.test(t), ['--gpu-memory-utilization=0.9', 'gpu_memory_utilization', 'gpu-memory_utilizatio', 'gpumemory-utilization', 'xgpu-memory-utilizationx', 'memory-utilization', 'gpu-memory-memory-utilization', 'gpu-gpu-memory-utilization'], ['gpu', 'gpu-', 'gpu_', 'memory', 'memory-', 'memory_', 'utilization', 'GPU']));
  it('the poll interval: ^\\d+(\\.\\d{1,N})?$', () => {
    for (const max of [1, 2, 3, 6]) {
      const regex = new RegExp(`^\\d+(\\.\\d{1,${max}})?$`);
      sameAnswers((t) => isPlainDecimal(t, max), (t) => regex.test(t), ['1', '1.', '.5', '0.5', '1.25', '1.250', '1.2345678', '1e-7', '12'], floatPieces);
    }
  });
  it('the version: /^[0-9A-Za-z][0-9A-Za-z.+-]{0,63}$/', () =>
    sameAnswers(isVersionText, (t) => /^[0-9A-Za-z][0-9A-Za-z.+-]{0,63}$/.test(t), ['', 'v', '0.3.0', '.3', '-1', 'a'.repeat(64), 'a'.repeat(65), `a${'.'.repeat(63)}`, 'a_b', 'a/b'], ['aaaaaaaaaa', '.+-', 'Z', '[', '`', '{', '@']));
  it('the termination message path: /^\\/[A-Za-z0-9._/-]*$/', () =>
    sameAnswers(isPlainAbsolutePath, (t) => /^\/[A-Za-z0-9._/-]*$/.test(t), ['', '/', '/dev/termination-log', 'dev', '/a b', '/a..b', '/é'], ['/', '/a', '..', '[', '`', '{', '@']));
});

describe('images, GPUs, programs and the launcher', () => {
  it('the image check: /[\\s\\u0000-\\u001f\\u007f-\\u009f]/', () =>
    sameAnswers(firstSpaceOrControl, (t) => /[\s\u0000-\u001f\u007f-\u009f]/.exec(t)?.index ?? -1, ['vllm/vllm-openai:v0.9.1', 'a b', 'a\u00a0', 'a\u200b', 'a\u0085', 'a\u00a1', '\u180e'], ['vllm/vllm-openai', ':', '\u180e', '\u200b', '\u00a1']));

  it('VERSION, with its captures', () => {
    const regex = /^v?(\d{1,6})\.(\d{1,6})\.(\d{1,6})(?:(?:\.|post)(\d{1,6})|-?rc(\d{1,6}))?$/;
    const oracle = (text: string): Version | undefined => {
      const m = regex.exec(text);
      if (!m) return undefined;
      const parts = [Number(m[1]), Number(m[2]), Number(m[3])] as const;
      if (m[4] !== undefined) return { parts, stage: 2, n: Number(m[4]) };
      if (m[5] !== undefined) return { parts, stage: 0, n: Number(m[5]) };
      return { parts, stage: 1, n: 0 };
    };
    sameAnswers(parseVersion, oracle, ['v0.9.1', '0.9.1', 'vv0.9.1', 'V0.9.1', '0.9', '0.9.1.2', '0.9.1post2', '0.9.1-post2', '0.9.1rc3', '0.9.1-rc3', '0.9.1-rc', '0.9.1.', '123456.1.1', '1234567.1.1', '1.1.1234567', '1.1.1.1234567', '0.9.1\n', '01.02.003'], ['1.', '2.', '123', '1234', 'post', 'rc', '-rc', '.1', 'v1.2.3']);
  });

  it('/^(.*?)(-cu\\d{3})?$/s', () =>
    sameAnswers(withoutCudaSuffix, (t) => /^(.*?)(-cu\d{3})?$/s.exec(t)![1], ['', '-cu121', 'x-cu121', 'x-cu12', 'x-cu1234', 'x-cu121\n', '\n-cu121', '-cu121-cu121', 'x-CU121'], ['-cu', '-', '12', '1', '123']));

  it('/^nvidia([-.][a-z0-9.-]*)?$/', () =>
    sameAnswers(isNvidiaRuntimeClass, (t) => /^nvidia([-.][a-z0-9.-]*)?$/.test(t), ['nvidia', 'nvidia-cdi', 'nvidia.x', 'nvidia-', 'nvidiax', 'nvidia-A', 'nvidia_x', 'Nvidia', 'nvidia-legacy\n'], ['nvidia', '-', 'cdi', 'A', '{', '`', '/']));

  it('/^python(\\d+(\\.\\d+)?)?$/', () =>
    sameAnswers(isPythonProgram, (t) => /^python(\d+(\.\d+)?)?$/.test(t), ['python', 'python3', 'python3.12', 'python3.', 'python.3', 'python3.12.1', 'python3x', 'pythonx', 'Python3', 'python3\n'], ['python', '3', '12', '.']));

  it('/\\.c?js$/', () => sameAnswers(withoutScriptExtension, (t) => t.replace(/\.c?js$/, ''), ['vram-preflight.cjs', 'a.js', 'a.mjs', '.cjs', 'cjs', 'a.js.cjs', 'a.cjs\n', 'a.CJS'], ['.cjs', '.js', 'c', 'js', 'vram-preflight']));
});

describe("llm-d's images", () => {
  it('/(^|\\/)llm-d\\/llm-d(-[a-z0-9]+)*$/', () =>
    sameAnswers(isLlmdRepository, (t) => /(^|\/)llm-d\/llm-d(-[a-z0-9]+)*$/.test(t), ['llm-d/llm-d', 'ghcr.io/llm-d/llm-d', 'ghcr.io/llm-d/llm-d-cuda-dev', 'xllm-d/llm-d', 'llm-d/llm-d-', 'llm-d/llm-d--a', 'llm-d/llm-d-A', 'llm-d/llm-dx', 'llm-d/llm-d/llm-d', 'a/llm-d/llm-d-cuda/x', '/llm-d/llm-d', 'llm-d', 'llm-d/llm-d-a-b1'], ['llm-d', 'llm-d/llm-d', '/', '-', 'cuda', 'A', '{', '`']));
});
