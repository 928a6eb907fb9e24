/**
 * Durations as kubectl's flags take them (Go's time.ParseDuration, the units
 * an operator uses: `90s`, `10m`, `1h30m`, `1.5m`, `500ms`), and as this
 * command prints them.
 */
import { PreflightError } from '../core/index.js';
import { quoteBounded } from '../config/suggest.js';

const UNIT_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/** Milliseconds of a duration flag's value; a USAGE error naming the flag otherwise. */
export function parseDuration(text: string, flag: string, { min = 1 }: { min?: number } = {}): number {
  const parts = /^(?:\d+(?:\.\d+)?(?:ms|s|m|h))+$/.test(text) ? [...text.matchAll(/(\d+(?:\.\d+)?)(ms|s|m|h)/g)] : [];
  const ms = parts.reduce((sum, [, n, unit]) => sum + Number(n) * UNIT_MS[unit!]!, 0);
  if (parts.length === 0 || !Number.isFinite(ms)) {
    throw new PreflightError('USAGE', `${flag} is ${quoteBounded(text)}, not a duration`, { fix: `write it as kubectl does: a number and a unit (ms, s, m, h), e.g. ${flag}=90s or ${flag}=10m` });
  }
  if (ms < min) throw new PreflightError('USAGE', `${flag} is ${quoteBounded(text)}, less than ${seconds(min)}`, { fix: `give ${flag} at least ${seconds(min)}` });
  return Math.round(ms);
}

/** `12.3 s`: one decimal, as the preflight's own lines print seconds. */
export function seconds(ms: number): string {
  return `${(ms / 1000).toFixed(1)} s`;
}

/** `10m15s`, `30s`, `1h`: as the duration flags take it (whole seconds; below one, in ms). */
export function flagDuration(ms: number): string {
  if (ms < 1000) return `${Math.round(ms)}ms`;
  const s = Math.round(ms / 1000);
  const [h, m, r] = [Math.floor(s / 3600), Math.floor((s % 3600) / 60), s % 60];
  return `${h ? `${h}h` : ''}${m ? `${m}m` : ''}${r || (!h && !m) ? `${r}s` : ''}`;
}
