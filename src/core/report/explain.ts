/**
 * `vram-preflight explain`: what the transform would do to each container and
 * why, as a table a person reads before trusting a post-renderer. Text from
 * the input (names, images, reasons that quote it) is escaped as in error
 * messages (escapeControl): one line per row, nothing a terminal obeys.
 */
import type { Options } from '../options.js';
import { CONTEXT_MIB_AUTO } from '../preflight/settings.js';
import { describeDocument, escapeControl } from '../errors.js';
import type { TransformResult } from '../transform.js';
import { ACTION_EFFECTS } from '../decide/container.js';

function table(rows: string[][]): string {
  const widths = rows[0]!.map((_, col) => Math.max(...rows.map((row) => row[col]!.length)));
  return rows.map((row) => row.map((cell, col) => (col === row.length - 1 ? cell : cell.padEnd(widths[col]!))).join('  ')).join('\n');
}

export function renderExplanation(result: TransformResult, options: Options): string {
  const header = ['WORKLOAD', 'CONTAINER', 'IMAGE', 'ACTION', 'UTILIZATION', 'GPUS', 'WHY'];
  const rows = result.containers.map((c) => [
    c.workload,
    c.initContainer ? `${c.container} (init)` : c.container,
    c.image ?? '-',
    c.action,
    c.utilization ? `${c.utilization.value ?? 'at run time'} (${c.utilization.source})` : '-',
    c.gpus.length ? c.gpus.join(',') : '-',
    c.reason,
  ].map(escapeControl));
  const lines: string[] = [];
  lines.push(rows.length ? table([header, ...rows]) : 'No workload containers found in documents that mention vLLM (the others are passed through unread).');
  const wrapped = result.containers.filter((c) => ACTION_EFFECTS[c.action].waits);
  lines.push('');
  lines.push(
    `Preflight settings: timeout ${options.timeoutSeconds}s, poll every ${options.pollIntervalSeconds}s, progress every ${options.logIntervalSeconds}s, headroom ${options.headroomMiB} MiB, vLLM's context ${options.contextMiB === 'auto' ? `auto (${CONTEXT_MIB_AUTO.oneGpu} MiB on one GPU, ${CONTEXT_MIB_AUTO.severalGpus} on several)` : `${options.contextMiB} MiB`}, each nvidia-smi query at most ${options.nvidiaSmiTimeoutSeconds}s, nvidia-smi unavailable: ${options.onNvidiaSmiUnavailable}.`,
  );
  for (const c of wrapped) {
    const budget = c.probeBudgetSeconds === undefined ? 'no startup or liveness probe' : `probe budget ${c.probeBudgetSeconds}s`;
    lines.push(escapeControl(`  ${c.workload} ${c.container}: start from ${c.startOrigin}; utilization from ${c.utilization?.origin}; GPU signal: ${c.gpus.join(', ') || 'none'}; ${budget}.`));
    if (c.startEvidence && c.startEvidence.source !== 'command' && c.startEvidence.source !== 'wrapped') lines.push(escapeControl(`    evidence: ${c.startEvidence.detail}`));
  }
  const notes = result.containers.filter((c) => c.notes.length);
  if (notes.length) {
    lines.push('', 'Notes:', ...notes.flatMap((c) => c.notes.map((n) => escapeControl(`  - ${c.workload} ${c.container}: ${n}`))));
  }
  if (result.warnings.length) {
    lines.push('', 'Warnings:', ...result.warnings.map((w) => escapeControl(`  - ${w}`)));
  }
  if (result.errors.length) {
    lines.push('', 'Errors (the post-renderer would fail):', ...result.errors.map((e) => `  - ${e.format().replace(/\n/g, '\n    ')}`));
  }
  const docs = new Map(result.containers.map((c) => [c.document.index, c.document]));
  if (docs.size) {
    lines.push('', 'Documents:', ...[...docs.values()].map((d) => escapeControl(`  ${describeDocument(d)}`)));
  }
  return `${lines.join('\n')}\n`;
}
