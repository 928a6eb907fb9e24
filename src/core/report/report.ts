/**
 * The machine-readable report (`explain --output json`, `--report-file`):
 * per container the action, reason and evidence, in a versioned shape that
 * src/report.schema.json describes. CI pipelines and policy checks gate on it.
 */
import type { Options } from '../options.js';
import type { ContainerReport } from '../decide/container.js';
import type { DocumentRef, PreflightError } from '../errors.js';
import type { TransformResult } from '../transform.js';
import { VERSION } from '../version.js';

const REPORT_API_VERSION = 'vram-preflight.io/v1';

function documentOf(ref: DocumentRef): Record<string, unknown> {
  return { index: ref.index, line: ref.line, kind: ref.kind, name: ref.name, source: ref.source, helmFilename: ref.helmFilename };
}

function errorOf(error: PreflightError): Record<string, unknown> {
  const { document, container, image, position, fix } = error.details;
  return { code: error.code, message: error.message, fix, document: document ? documentOf(document) : undefined, container, image, position };
}

function containerOf(c: ContainerReport): Record<string, unknown> {
  return {
    document: documentOf(c.document),
    workload: c.workload,
    template: c.template,
    container: c.container,
    initContainer: c.initContainer,
    image: c.image,
    action: c.action,
    reason: c.reason,
    gpu: { signals: c.gpuSignals.map((s) => ({ signal: s.signal, detail: s.detail })) },
    start: c.startEvidence ? { source: c.startEvidence.source, detail: c.startEvidence.detail, digest: c.startEvidence.digest, origin: c.startOrigin } : undefined,
    utilization: c.utilization ? { value: c.utilization.value ?? null, source: c.utilization.source, origin: c.utilization.origin } : undefined,
    probeBudgetSeconds: c.probeBudgetSeconds,
    warnings: c.warnings,
    notes: c.notes,
    error: c.error ? errorOf(c.error) : undefined,
  };
}

function buildReport(result: TransformResult, options: Options): Record<string, unknown> {
  return {
    apiVersion: REPORT_API_VERSION,
    kind: 'Report',
    toolVersion: VERSION,
    result: result.errors.length ? 'error' : 'ok',
    settings: {
      timeoutSeconds: options.timeoutSeconds,
      pollIntervalSeconds: options.pollIntervalSeconds,
      logIntervalSeconds: options.logIntervalSeconds,
      headroomMiB: options.headroomMiB,
      contextMiB: options.contextMiB,
      defaultUtilization: options.defaultUtilization,
      onNvidiaSmiUnavailable: options.onNvidiaSmiUnavailable,
      nvidiaSmiTimeoutSeconds: options.nvidiaSmiTimeoutSeconds,
      registryLookup: options.registryLookup,
    },
    containers: result.containers.map(containerOf),
    warnings: [...new Set(result.warnings)],
    errors: result.errors.map(errorOf),
  };
}

/** JSON with a stable key order and no undefined members. */
export function renderReport(result: TransformResult, options: Options): string {
  return `${JSON.stringify(buildReport(result, options), null, 2)}\n`;
}
