/**
 * The clock program (CLOCK_AWK) on simulated time: the true time of each reading is known, the
 * program sees only what `date +%s` (whole seconds) or /proc/uptime would print. The bound that
 * docs/restart-race.md promises: the count is never more than the time that passed (so the timeout
 * never fires early), and with whole seconds at most 2 s less. Runs under the host's awk and
 * busybox awk; no timing involved.
 */
import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { CLOCK_AWK } from '../../src/core/preflight/script.js';
import { BUSYBOX } from './harness.js';

const AWKS: [string, string[]][] = [
  ['awk', ['awk']],
  ['busybox awk', [BUSYBOX, 'awk']],
];

interface State {
  el: number;
  zero: string;
  prev: string;
  psrc: string;
}

/** One round of the script's loop: what the program prints for this reading. */
function tick(awk: string[], st: State, raw: string, src: string, poll: number, lim: number): State {
  const vars = { raw, src, prev: st.prev, psrc: st.psrc, zero: st.zero, el: String(st.el), lg: '0', poll: String(poll), lim: String(lim), q: '10', ts: '1000', ls: '5' };
  const args = [...awk.slice(1), ...Object.entries(vars).flatMap(([k, v]) => ['-v', `${k}=${v}`]), CLOCK_AWK];
  const r = spawnSync(awk[0]!, args, { encoding: 'utf8' });
  expect(r.status, r.stderr).toBe(0);
  const [el, , , zero] = r.stdout.trim().split(' ');
  return { el: Number(el), zero: zero!, prev: raw, psrc: src };
}

/** A small deterministic generator, so a failure can be replayed. */
function lcg(seed: number): () => number {
  let x = seed;
  return () => {
    x = (x * 1103515245 + 12345) % 2147483648;
    return x / 2147483648;
  };
}

describe.each(AWKS)('the clock program under %s', (_name, awk) => {
  it.each([0.05, 0.5, 1.5])('whole seconds from date, pause %s s: never more than the time passed, at most 2 s less', (poll) => {
    const rand = lcg(Math.round(poll * 1000));
    for (let trial = 0; trial < 6; trial++) {
      // the first reading anywhere in a second, including just before it ends
      let t = 1000 + (trial === 0 ? 0.999 : trial === 1 ? 0 : rand());
      const t0 = t;
      let st: State = { el: 0, zero: String(Math.floor(t)), prev: String(Math.floor(t)), psrc: 'd' };
      for (let round = 0; round < 8; round++) {
        t += poll + rand() * 1.2; // a pause and a query
        st = tick(awk, st, String(Math.floor(t)), 'd', poll, 10);
        const passed = t - t0;
        expect(st.el, `round ${round}, first reading at ${t0}`).toBeLessThanOrEqual(passed + 1e-9);
        expect(st.el).toBeGreaterThan(passed - 2);
      }
    }
  });

  it('/proc/uptime (hundredths): its steps as they are', () => {
    let st: State = { el: 0, zero: '5000.25', prev: '5000.25', psrc: 'u' };
    st = tick(awk, st, '5001.75', 'u', 0.05, 10);
    expect(st.el).toBeCloseTo(1.5, 3);
    st = tick(awk, st, '5004.00', 'u', 0.05, 10);
    expect(st.el).toBeCloseTo(3.75, 3);
  });

  it('a wall clock set forward or back counts one pause, and the count goes on from there', () => {
    let st: State = { el: 0, zero: '1000', prev: '1000', psrc: 'd' };
    st = tick(awk, st, '87400', 'd', 0.5, 10); // set a day forward
    expect(st.el).toBeCloseTo(0.5, 3);
    st = tick(awk, st, '50', 'd', 0.5, 10); // set back
    expect(st.el).toBeCloseTo(1, 3);
    st = tick(awk, st, '53', 'd', 0.5, 10); // 3 s on: at least 2 of them passed
    expect(st.el).toBeCloseTo(3, 3);
  });

  it('a logged round holds two queries (the reading, and what holds the memory), each up to its limit: counted, not taken for a clock set', () => {
    let st: State = { el: 0, zero: '1000', prev: '1000', psrc: 'd' };
    st = tick(awk, st, '1022', 'd', 0.5, 10); // a 0.5 s pause and two queries cut at 10 s each
    expect(st.el).toBeCloseTo(21, 3);
    st = tick(awk, st, '1045', 'd', 0.5, 10); // more than a round can take: one pause
    expect(st.el).toBeCloseTo(21.5, 3);
  });

  it('no clock at all: one pause a round', () => {
    let st: State = { el: 0, zero: '0', prev: '', psrc: 'n' };
    st = tick(awk, st, '', 'n', 0.25, 10);
    st = tick(awk, st, '', 'n', 0.25, 10);
    expect(st.el).toBeCloseTo(0.5, 3);
  });
});
