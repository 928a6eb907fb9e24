/**
 * renderPreflightScript: the text itself (marker, Kubernetes-safe, shellcheck-clean,
 * compact), input validation, and integer-exact need in every awk the script may meet.
 */
import { describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import fc from 'fast-check';
import {
  PREFLIGHT_LIMITS,
  checkPreflightOptions,
  roundUtilizationUp,
  type PreflightSettings,
} from '../../src/core/preflight/settings.js';
import { PREFLIGHT_MARKER_PREFIX, renderPreflightScript } from '../../src/core/preflight/script.js';
import { PreflightError } from '../../src/core/errors.js';
import { BUSYBOX, DEFAULTS, SHELLCHECK, judgeProgram } from './harness.js';

const base: PreflightSettings = { ...DEFAULTS, terminationMessagePath: '/dev/termination-log' };

const variants: PreflightSettings[] = [
  base,
  { ...base, utilization: '1', headroomMiB: 0, onNvidiaSmiUnavailable: 'fail' },
  { ...base, utilization: '0.05', headroomMiB: 1024, pollIntervalSeconds: 0.25, timeoutSeconds: 900 },
  { ...base, utilization: '0.123456', pollIntervalSeconds: 2, logIntervalSeconds: 60, version: '1.2.3-rc.1+build.5' },
  { ...base, terminationMessagePath: '/tmp/x/termination_log-1.txt' },
  { ...base, utilization: 'from-args', nvidiaSmiTimeoutSeconds: 30 },
  { ...base, utilization: { words: [{ variable: 'VLLM_ADDITIONAL_ARGS' }], fallback: '0.9' }, contextMiB: 1024 },
];

/**
 * The shell text outside quotes and comments, as the shell tokenises it: a single-quoted string
 * (an awk program) becomes '', a double-quoted one "" (but "$msg_file", kept), so what is left
 * is the shell's own syntax, redirections included.
 */
function unquotedShell(script: string): string {
  let out = '';
  for (let i = 0; i < script.length; i++) {
    const c = script[i]!;
    if (c === '\\') {
      out += script.slice(i, i + 2);
      i++;
    } else if (c === "'") {
      i = script.indexOf("'", i + 1);
      out += "''";
    } else if (c === '"') {
      let j = i + 1;
      while (script[j] !== '"') j += script[j] === '\\' ? 2 : 1;
      out += script.slice(i, j + 1) === '"$msg_file"' ? '"$msg_file"' : '""';
      i = j;
    } else if (c === '#' && (i === 0 || /\s/.test(script[i - 1]!))) {
      i = script.indexOf('\n', i) - 1;
    } else out += c;
  }
  return out;
}

/** Kubernetes' expansion of command/args: $$ -> $, $(NAME) -> the variable's value. */
function kubeExpand(s: string, env: Record<string, string>): string {
  return s.replace(/\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)/g, (m, name: string | undefined) =>
    m === '$$' ? '$' : (env[name!] ?? m),
  );
}

const settingsArb: fc.Arbitrary<PreflightSettings> = fc.record({
  version: fc.stringMatching(/^[0-9A-Za-z][0-9A-Za-z.+-]{0,20}$/),
  utilization: fc.integer({ min: 1, max: 1_000_000 }).map((n) => (n / 1_000_000).toFixed(6)),
  headroomMiB: fc.integer({ min: 0, max: PREFLIGHT_LIMITS.headroomMiBMax }),
  timeoutSeconds: fc.integer({ min: 1, max: PREFLIGHT_LIMITS.timeoutSecondsMax }),
  pollIntervalSeconds: fc.integer({ min: 10, max: 3_600_000 }).map((n) => n / 1000),
  logIntervalSeconds: fc.integer({ min: 1, max: PREFLIGHT_LIMITS.logIntervalSecondsMax }),
  onNvidiaSmiUnavailable: fc.constantFrom('warn' as const, 'fail' as const),
  terminationMessagePath: fc.stringMatching(/^\/[A-Za-z0-9_-][A-Za-z0-9._/-]{0,40}$/).filter((p) => !p.split('/').includes('..')),
});

describe('renderPreflightScript text', () => {
  it('starts with the marker line and ends by exec-ing the start', () => {
    const s = renderPreflightScript(base);
    const lines = s.split('\n');
    expect(lines[0]).toBe(`${PREFLIGHT_MARKER_PREFIX}0.1.0: wait for GPU memory, then exec vLLM`);
    expect(s.startsWith(PREFLIGHT_MARKER_PREFIX)).toBe(true);
    expect(s.endsWith('exec "$@"\n')).toBe(true);
  });

  it('run-time words: variables by name, the flag as the one literal; anything else refused', () => {
    const script = renderPreflightScript({ ...base, utilization: { words: [{ literal: '--gpu-memory-utilization' }, { variable: 'U' }, { variable: 'VLLM_ADDITIONAL_ARGS' }], fallback: '0.85' } });
    expect(script).toContain("for a in '--gpu-memory-utilization' $U $VLLM_ADDITIONAL_ARGS; do\n");
    expect(script).toContain('u_raw=0.85 u_seen=1');
    for (const words of [[{ variable: 'A B' }], [{ variable: '1X' }], [{ variable: 'X;rm' }], [{ literal: "'; rm -rf /; '" }], [{ literal: '$(id)' }], []]) {
      expect(() => renderPreflightScript({ ...base, utilization: { words, fallback: '0.9' } as never })).toThrow(PreflightError);
    }
    expect(() => renderPreflightScript({ ...base, utilization: { words: [{ variable: 'U' }], fallback: '1.5' } })).toThrow(PreflightError);
  });

  it('writes the settings into one readable line', () => {
    const s = renderPreflightScript(variants[2]!);
    expect(s).toContain('util=0.05 headroom_mib=1024 context_mib=768 context_several_mib=1536 timeout_s=900 poll_s=0.25 log_s=5 on_unavailable=warn smi_limit_s=10\n');
    expect(renderPreflightScript({ ...variants[2]!, contextMiB: 2000 })).toContain(' context_mib=2000 context_several_mib=2000 ');
    expect(renderPreflightScript({ ...variants[2]!, contextMiB: 0 })).toContain(' context_mib=0 context_several_mib=0 ');
    expect(s).toContain('msg_file=/dev/termination-log\n');
  });

  it('never contains $( or $$, so the kubelet leaves it unchanged (any valid settings)', () => {
    fc.assert(
      fc.property(settingsArb, (settings) => {
        const s = renderPreflightScript(settings);
        expect(s).not.toContain('$(');
        expect(s).not.toContain('$$');
        expect(kubeExpand(s, { HOME: '/x', PATH: '/y', CUDA_VISIBLE_DEVICES: '0' })).toBe(s);
      }),
      { numRuns: 300 },
    );
  });

  it('the kubeExpand emulation does rewrite what it should (control)', () => {
    expect(kubeExpand('a $(HOME) $$ $(NOPE) $x', { HOME: '/x' })).toBe('a /x $ $(NOPE) $x');
  });

  // 14 KiB since 0.2.x: killing what a hung query started, and reading past it, cost 1.6 KiB
  // 0.4.0 grew it by 3 KiB (vLLM's own rule, MIG, the sweep of what a query leaves behind)
  it('stays small: under 16 KiB (an arg of every wrapped container), comments under a third of the shell lines', () => {
    for (const v of variants) {
      const s = renderPreflightScript(v);
      expect(s.length).toBeLessThan(16 * 1024);
      const lines = s.split('\n');
      expect(lines.filter((l) => l.startsWith('#')).length).toBeLessThanOrEqual(45);
    }
  });

  it('writes nothing but the termination message: every file redirection goes to $msg_file or /dev/null', () => {
    for (const v of variants) {
      // the shell text only: drop the awk programs (their > are comparisons or prints to stdout)
      const shell = unquotedShell(renderPreflightScript(v).split('\n').filter((l) => !l.startsWith('msg_file=')).join('\n'));
      const targets = [...shell.matchAll(/\d?>>?\s*(&\d|"[^"]*"|[^\s;|&)`]+)/g)].map((m) => m[1]);
      expect(targets.length).toBeGreaterThan(3);
      for (const t of targets) expect(['&1', '&2', '/dev/null', '"$msg_file"']).toContain(t);
      expect(shell).not.toMatch(/<</); // no here-documents: some shells put them in temp files
      expect(shell).not.toMatch(/mktemp|mkfifo|TMPDIR|\/tmp/);
    }
  });

  it('cuts the first query\'s limit to the whole timeout, at least 2 s', () => {
    expect(renderPreflightScript({ ...base, timeoutSeconds: 30 })).toMatch(/ lim=10 /);
    expect(renderPreflightScript({ ...base, timeoutSeconds: 5 })).toMatch(/ lim=5 /);
    expect(renderPreflightScript({ ...base, timeoutSeconds: 1 })).toMatch(/ lim=2 /);
    expect(renderPreflightScript({ ...base, timeoutSeconds: 1, nvidiaSmiTimeoutSeconds: 1 })).toMatch(/ lim=1 /);
    expect(renderPreflightScript({ ...base, nvidiaSmiTimeoutSeconds: 20 })).toMatch(/smi_limit_s=20\n/);
  });

  it.each(['sh', 'dash', 'bash'])('passes shellcheck -s %s for several settings', (dialect) => {
    for (const v of variants) {
      const r = spawnSync(SHELLCHECK, ['-s', dialect, '-'], { input: renderPreflightScript(v), encoding: 'utf8' });
      expect(r.error).toBeUndefined();
      expect(r.stdout + r.stderr).toBe('');
      expect(r.status).toBe(0);
    }
  });

  it('every shellcheck directive carries a reason', () => {
    const s = renderPreflightScript(base);
    const directives = s.split('\n').filter((l) => /shellcheck\s+disable/.test(l));
    expect(directives.length).toBeGreaterThan(0);
    for (const d of directives) expect(d).toMatch(/# shellcheck disable=SC\d+ # \S.{10,}/);
  });

  it('is the same text for the same settings', () => {
    expect(renderPreflightScript(base)).toBe(renderPreflightScript({ ...base }));
  });
});

describe('renderPreflightScript validation', () => {
  const bad: Array<[keyof PreflightSettings, unknown]> = [
    ['utilization', 'nan'],
    ['utilization', '0'],
    ['utilization', '-0.5'],
    ['utilization', '1.0000001'],
    ['utilization', '1.00000000000000001'],
    ['utilization', '1.5'],
    ['utilization', 'inf'],
    ['utilization', '1e-324'],
    ['utilization', '0.9 x'],
    ['utilization', ''],
    ['utilization', 0.9],
    ['utilization', 'from-arg'],
    ['nvidiaSmiTimeoutSeconds', 0],
    ['nvidiaSmiTimeoutSeconds', 1.5],
    ['nvidiaSmiTimeoutSeconds', PREFLIGHT_LIMITS.nvidiaSmiTimeoutSecondsMax + 1],
    ['headroomMiB', -1],
    ['headroomMiB', 1.5],
    ['headroomMiB', NaN],
    ['headroomMiB', PREFLIGHT_LIMITS.headroomMiBMax + 1],
    ['timeoutSeconds', 0],
    ['timeoutSeconds', 2.5],
    ['timeoutSeconds', NaN],
    ['timeoutSeconds', PREFLIGHT_LIMITS.timeoutSecondsMax + 1],
    ['pollIntervalSeconds', 0],
    ['pollIntervalSeconds', 0.001],
    ['pollIntervalSeconds', -1],
    ['pollIntervalSeconds', NaN],
    ['pollIntervalSeconds', 0.0505],
    ['pollIntervalSeconds', 3601],
    ['logIntervalSeconds', 0],
    ['logIntervalSeconds', 0.5],
    ['logIntervalSeconds', NaN],
    ['onNvidiaSmiUnavailable', 'ignore'],
    ['onNvidiaSmiUnavailable', undefined],
    ['terminationMessagePath', 'relative/path'],
    ['terminationMessagePath', ''],
    ['terminationMessagePath', '/dev/termination log'],
    ['terminationMessagePath', '/tmp/$(reboot)'],
    ['terminationMessagePath', "/tmp/a'b"],
    ['terminationMessagePath', '/tmp/a\nb'],
    ['terminationMessagePath', '/tmp/../etc/passwd'],
    ['terminationMessagePath', `/${'a'.repeat(5000)}`],
    ['version', ''],
    ['version', '0.1.0\nrm -rf /'],
    ['version', '0.1.0 $(x)'],
    ['version', 7],
  ];
  it.each(bad)('throws on %s = %j', (key, value) => {
    expect(() => renderPreflightScript({ ...base, [key]: value } as PreflightSettings)).toThrow(
      new RegExp(`invalid ${key}`),
    );
  });

  it.each([
    ['utilization', '2', 'BAD_UTILIZATION'],
    ['terminationMessagePath', 'x', 'BAD_CONTAINER'],
    ['pollIntervalSeconds', 0.0001, 'BAD_OPTION'],
  ] as const)('throws a PreflightError (%s -> %s) that callers report per container', (key, value, code) => {
    let err: unknown;
    try {
      renderPreflightScript({ ...base, [key]: value } as PreflightSettings);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(PreflightError);
    expect((err as PreflightError).code).toBe(code);
    expect((err as PreflightError).details.fix).toContain(key);
  });

  it('rounds the utilization UP to 6 decimals, so any number of decimals works', () => {
    expect(renderPreflightScript({ ...base, utilization: '0.1234567' })).toMatch(/^util=0\.123457 /m);
    expect(renderPreflightScript({ ...base, utilization: '0.1234561' })).toMatch(/^util=0\.123457 /m);
    expect(renderPreflightScript({ ...base, utilization: '0.123456' })).toMatch(/^util=0\.123456 /m);
    expect(renderPreflightScript({ ...base, utilization: '1e-7' })).toMatch(/^util=0\.000001 /m);
    expect(renderPreflightScript({ ...base, utilization: '0.9999999' })).toMatch(/^util=1 /m);
    expect(renderPreflightScript({ ...base, utilization: '0.9' })).toMatch(/^util=0\.9 /m);
    expect(renderPreflightScript({ ...base, utilization: 'from-args' })).toMatch(/^util=from-args /m);
  });

  it('rounds the text as written, on its digits, never a binary float of it (as the script does with a value read at run time)', () => {
    // 0.95000000000000001 is the double 0.95 (0.9499999999999999556...): rounded from that, 0.95.
    expect(renderPreflightScript({ ...base, utilization: '0.95000000000000001' })).toMatch(/^util=0\.950001 /m);
    expect(renderPreflightScript({ ...base, utilization: '0.1000000000000000055511151231257827' })).toMatch(/^util=0\.100001 /m);
    expect(renderPreflightScript({ ...base, utilization: '9.5e-1' })).toMatch(/^util=0\.95 /m);
    expect(renderPreflightScript({ ...base, utilization: ' 0.9_5\n' })).toMatch(/^util=0\.95 /m);
    expect(renderPreflightScript({ ...base, utilization: { words: [{ variable: 'U' }], fallback: '0.90000000000000002' } })).toMatch(/^u_raw=0\.900001 /m);
  });

  it('checkPreflightOptions throws what renderPreflightScript would, for the options alone', () => {
    const ok = { timeoutSeconds: 300, pollIntervalSeconds: 1, logIntervalSeconds: 10, headroomMiB: 0, onNvidiaSmiUnavailable: 'warn' };
    expect(() => checkPreflightOptions(ok)).not.toThrow();
    expect(() => checkPreflightOptions({ ...ok, nvidiaSmiTimeoutSeconds: 10 })).not.toThrow();
    for (const [key, value] of [
      ['pollIntervalSeconds', 0.0155],
      ['timeoutSeconds', 0],
      ['logIntervalSeconds', 1.5],
      ['headroomMiB', -1],
      ['onNvidiaSmiUnavailable', 'ignore'],
      ['nvidiaSmiTimeoutSeconds', 0],
    ] as const) {
      let fromCheck: unknown;
      let fromRender: unknown;
      try {
        checkPreflightOptions({ ...ok, [key]: value });
      } catch (e) {
        fromCheck = e;
      }
      try {
        renderPreflightScript({ ...base, [key]: value } as PreflightSettings);
      } catch (e) {
        fromRender = e;
      }
      expect(fromCheck).toBeInstanceOf(PreflightError);
      expect((fromCheck as PreflightError).code).toBe('BAD_OPTION');
      expect((fromCheck as PreflightError).message).toBe((fromRender as PreflightError).message);
    }
  });

  it('accepts the edges', () => {
    expect(() => renderPreflightScript({ ...base, utilization: '1' })).not.toThrow();
    expect(() => renderPreflightScript({ ...base, utilization: '0.000001' })).not.toThrow();
    expect(() => renderPreflightScript({ ...base, headroomMiB: 0 })).not.toThrow();
    expect(() => renderPreflightScript({ ...base, pollIntervalSeconds: 0.01 })).not.toThrow();
    expect(() => renderPreflightScript({ ...base, timeoutSeconds: 1 })).not.toThrow();
  });
});

const PY_FLOAT_TABLE: Array<[string, string | undefined]> = [
  ['0.9', '0.9'],
  ['.9', '0.9'],
  ['9e-1', '0.9'],
  ['0.1234567', '0.123457'],
  ['0.0000001', '0.000001'],
  ['1', '1'],
  ['1.', '1'],
  ['001.000', '1'],
  ['+0.5', '0.5'],
  ['1e0', '1'],
  ['10E-1', '1'],
  ['0.00000000000000000000001', '0.000001'],
  ['1e-300', '0.000001'],
  ['1e-323', '0.000001'],
  ['1e-400', undefined], // float() reads 0.0
  ['9e-324', undefined], // float() reads a denormal; refused below 1e-323
  ['1.0000001', undefined],
  ['0', undefined],
  ['0.0e5', undefined],
  ['-0.5', undefined],
  ['1e400', undefined],
  ['', undefined],
  ['.', undefined],
  ['e1', undefined],
  ['0.5e', undefined],
  ['0,5', undefined],
  ['inf', undefined],
  ['0x1', undefined],
  // ASCII whitespace around it, as float() strips it (a Secret made with --from-file ends in "\n")
  [' 0.5', '0.5'],
  ['0.9\n', '0.9'],
  ['0.9\r', '0.9'],
  ['0.9\r\n', '0.9'],
  ['\t\v\f 0.9 \n', '0.9'],
  ['0. 9', undefined],
  ['+ 0.9', undefined],
  ['0.9\x1c', undefined],
  ['0.9\\n', undefined], // a backslash and an n, not a newline
  ['\\t0.9', undefined],
  // `_` between two digits, as float() reads it since Python 3.6
  ['0.9_5', '0.95'],
  ['0_0.5', '0.5'],
  ['9_0e-2', '0.9'],
  ['9e-0_1', '0.9'],
  ['.5_0', '0.5'],
  ['_0.9', undefined],
  ['0_.9', undefined],
  ['0._9', undefined],
  ['0.9_', undefined],
  ['0__9', undefined],
  ['9e_1', undefined],
  // what float() reads but this does not: non-ASCII spaces and digits (refused: vLLM does not start)
  ['\u00a00.9', undefined],
  ['\u0660.\u0669', undefined],
  ['nan', undefined],
];

describe('utilization read at run time: the script\'s awk agrees with roundUtilizationUp', () => {
  const program = /^util=`u=\$u_raw awk '([^']*)'`/m.exec(renderPreflightScript({ ...base, utilization: 'from-args' }))![1]!;
  const awks: Array<[string, string[]]> = [
    ['awk (system)', ['awk']],
    ['busybox awk', [BUSYBOX, 'awk']],
  ];
  function awkRound(awk: string[], v: string): string | undefined {
    const r = spawnSync(awk[0]!, [...awk.slice(1), program], { encoding: 'utf8', env: { ...process.env, u: v } });
    return r.status === 0 ? r.stdout.trim() : undefined;
  }

  it.each(PY_FLOAT_TABLE)('%j -> %s', (v, want) => {
    expect(roundUtilizationUp(v)).toBe(want);
    for (const [, awk] of awks) expect(awkRound(awk, v)).toBe(want);
  });

  it('the ASCII spellings of that table are read as Python 3 reads them', () => {
    const script = `import json, sys
out = []
for v in json.load(sys.stdin):
    try: f = float(v)
    except ValueError: f = None
    out.append(f if f is not None and f == f and 1e-323 <= f <= 1 else None)
print(json.dumps(out))`;
    const ascii = PY_FLOAT_TABLE.filter(([v]) => /^[\x00-\x7f]*$/.test(v) && !/^(9e-324|nan)$/.test(v));
    const r = spawnSync('python3', ['-c', script], { input: JSON.stringify(ascii.map(([v]) => v)), encoding: 'utf8' });
    expect(r.status, r.stderr).toBe(0);
    const floats = JSON.parse(r.stdout) as Array<number | null>;
    ascii.forEach(([v, want], i) => {
      const f = floats[i] ?? null;
      expect(want === undefined, JSON.stringify(v)).toBe(f === null);
      if (f !== null) expect(Number(want) - f).toBeGreaterThanOrEqual(0);
    });
  });

  it.each(awks)('%s: agrees on random spellings', (_name, awk) => {
    const spelled = fc.tuple(
      fc.constantFrom('', '+', '-'),
      fc.stringMatching(/^[0-9]{0,4}$/),
      fc.constantFrom('', '.'),
      fc.stringMatching(/^[0-9]{0,12}$/),
      fc.option(fc.tuple(fc.constantFrom('e', 'E'), fc.constantFrom('', '+', '-'), fc.integer({ min: 0, max: 12 })), { nil: undefined }),
    ).map(([sign, i, dot, f, e]) => `${sign}${i}${dot}${f}${e ? `${e[0]}${e[1]}${e[2]}` : ''}`);
    fc.assert(
      fc.property(spelled, (v) => {
        expect(awkRound(awk, v)).toBe(roundUtilizationUp(v));
      }),
      { numRuns: 150 },
    );
  });

  it('rounds up exactly: never below the value, less than 1e-6 above it', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 10 ** 9 }), (n) => {
        const v = n / 10 ** 9;
        const got = Number(roundUtilizationUp(String(v)));
        expect(got).toBeGreaterThanOrEqual(v);
        expect(got - v).toBeLessThan(1e-6 + 1e-15);
      }),
      { numRuns: 300 },
    );
  });
});

describe("need = vLLM's request, ceil((total - reserved) x utilization), + context + headroom, integer-exact", () => {
  const awks: Array<[string, string[]]> = [
    ['awk (system)', ['awk']],
    ['busybox awk', [BUSYBOX, 'awk']],
  ];
  const FIELDS = 'index,uuid,memory.total,memory.free,mig.mode.current,memory.reserved';

  /** vLLM's request (ceil(ct x u)) and the preflight's need, cut to what an idle GPU surely shows; undefined: never. */
  function exactNeed(total: number, reserved: number, util: string, context: number, headroom: number): bigint | undefined {
    const [i, f = ''] = util.split('.');
    const den = 10n ** BigInt(f.length);
    const num = BigInt(i!) * den + BigInt(f || '0');
    const ct = BigInt(total - reserved);
    const request = (ct * num + den - 1n) / den;
    if (request >= ct) return undefined;
    const need = request + BigInt(context) + BigInt(headroom);
    if (need <= ct - 1n) return need;
    // Cut to what an idle GPU surely shows: CUDA's total less 64 MiB with a reserve reported, vLLM's request without; never below the request.
    const idle = reserved > 0 ? ct - 64n : request;
    return idle < request ? request : idle;
  }

  function awkNeed(awk: string[], program: string, total: number, reserved: number, util: string, context: number, headroom: number): bigint | undefined {
    const r = spawnSync(
      awk[0]!,
      [...awk.slice(1), '-v', `fields=${FIELDS}`, '-v', 'rc=0', '-v', `u=${util}`, '-v', `h=${headroom}`, '-v', `c1=${context}`, '-v', `cm=${context + 1}`, '-v', 'ts=10', '-v', 'el=0', '-v', 'lim=10', '-v', 'q=10', '-v', 'first=', '-v', 'cvs=', '-v', 'cvd=', program],
      { input: `0, GPU-x, ${total}, 0, Disabled, ${reserved}\n`, encoding: 'utf8' },
    );
    if (r.stdout.startsWith('never ')) return undefined;
    const m = /needs (\d+) MiB/.exec(r.stdout);
    if (!m) throw new Error(`no need in ${JSON.stringify(r.stdout + r.stderr)}`);
    return BigInt(m[1]!);
  }

  const program = judgeProgram(renderPreflightScript(base));

  it.each(awks)('%s: the H200 case and the edges', (_name, awk) => {
    // vLLM asks ceil(0.9 x 143155) = ceil(128839.5) = 128840; + 768 context
    expect(awkNeed(awk, program, 143771, 616, '0.9', 768, 0)).toBe(129608n);
    expect(awkNeed(awk, program, 143770, 0, '0.9', 0, 0)).toBe(129393n); // exactly 129393: no rounding up
    expect(awkNeed(awk, program, 143771, 616, '1', 768, 0)).toBeUndefined(); // the whole GPU: never
    expect(awkNeed(awk, program, 143771, 616, '0.99999', 768, 0)).toBe(143154n); // more than it can have free: cut to that
    expect(awkNeed(awk, program, 143771, 616, '0.9', 768, 512)).toBe(130120n);
    expect(awkNeed(awk, program, 99_999_999, 1000, '0.99', 65_536, 1_048_576)).toBe(exactNeed(99_999_999, 1000, '0.99', 65_536, 1_048_576));
    expect(awkNeed(awk, program, 10, 0, '0.000001', 0, 0)).toBe(1n);
  });

  it.each(awks)('%s: matches exact rational arithmetic on random inputs', (_name, awk) => {
    fc.assert(
      fc.property(
        fc.integer({ min: 2, max: 99_999_999 }),
        fc.integer({ min: 0, max: 5000 }),
        fc.integer({ min: 1, max: 1_000_000 }),
        fc.integer({ min: 0, max: 65_536 }),
        fc.integer({ min: 0, max: 4096 }),
        (total, reservedRaw, micro, context, headroom) => {
          const reserved = Math.min(reservedRaw, total - 1);
          const util = String(micro / 1_000_000);
          expect(awkNeed(awk, program, total, reserved, util, context, headroom)).toBe(exactNeed(total, reserved, util, context, headroom));
        },
      ),
      { numRuns: 150 },
    );
  });
});
