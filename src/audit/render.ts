/**
 * The audit's two forms: text for a person (what is not protected, why, the
 * fix; opted-out containers apart) and JSON for CI and cron
 * (src/audit.schema.json). Both are functions of the result alone: the same
 * cluster gives the same bytes.
 */
import { escapeControl, VERSION } from '../core/index.js';
import type { AuditResult } from './audit.js';
import type { AuditedContainer, Status } from './classify.js';

export interface AuditTarget {
  /** The API server. */
  server: string;
  /** Where its address and credentials came from. */
  credentials: string;
  context?: string;
}

/** A container that is not protected, or cannot be told to be, fails the audit. */
export function failing(result: AuditResult): AuditedContainer[] {
  return result.containers.filter((c) => c.status === 'unprotected' || c.status === 'undetermined');
}

function counts(result: AuditResult): Record<Status, number> {
  const n: Record<Status, number> = { protected: 0, unprotected: 0, undetermined: 0, 'opted-out': 0 };
  for (const c of result.containers) n[c.status]++;
  return n;
}

export function renderJson(result: AuditResult, target: AuditTarget): string {
  const n = counts(result);
  const report = {
    apiVersion: 'vram-preflight.io/v1',
    kind: 'AuditReport',
    toolVersion: VERSION,
    result: failing(result).length > 0 ? 'unprotected' : 'protected',
    cluster: { server: target.server, credentials: target.credentials, context: target.context ?? null, namespace: result.namespace ?? null },
    webhooks: result.webhooks.map((w) => ({ configuration: w.configuration, webhook: w.webhook, createdAt: w.createdAt ?? null, target: w.target, failurePolicy: w.failurePolicy ?? null })),
    summary: { pods: result.pods, finishedPods: result.finishedPods, containers: { protected: n.protected, unprotected: n.unprotected, undetermined: n.undetermined, optedOut: n['opted-out'] } },
    containers: result.containers.map((c) => ({
      namespace: c.namespace,
      pod: c.pod,
      container: c.container,
      image: c.image ?? null,
      owner: c.owner ?? null,
      createdAt: c.createdAt ?? null,
      status: c.status,
      why: c.why,
      fix: c.fix ?? null,
      decision: c.decision,
    })),
  };
  return `${JSON.stringify(report, null, 2)}\n`;
}

const line = (text: string): string => escapeControl(text);

function describe(c: AuditedContainer): string {
  return line(`${c.namespace}/${c.pod}, container "${c.container}"${c.image !== undefined ? ` (image ${c.image})` : ''}`);
}

export function renderText(result: AuditResult, target: AuditTarget): string {
  const n = counts(result);
  const out: string[] = [];
  const scope = result.namespace === undefined ? 'all namespaces' : `namespace ${result.namespace}`;
  out.push(line(`vram-preflight ${VERSION} audit of ${target.server}, ${scope} (${target.credentials})`));
  if (result.webhooks.length === 0) {
    out.push(result.webhookConfiguration === undefined ? 'webhook: none installed (no MutatingWebhookConfiguration with the webhook pods.vram-preflight.io)' : line(`webhook: MutatingWebhookConfiguration ${result.webhookConfiguration} not found`));
  }
  for (const w of result.webhooks) {
    out.push(line(`webhook: MutatingWebhookConfiguration ${w.configuration}, webhook ${w.webhook}, created ${w.createdAt ?? '(unknown)'}, calls ${w.target}, failurePolicy ${w.failurePolicy ?? 'Fail'}`));
  }
  const finished = result.finishedPods > 0 ? ` (and ${result.finishedPods} finished, not audited)` : '';
  const total = n.protected + n.unprotected + n.undetermined + n['opted-out'];
  out.push(`${result.pods} pods${finished}; ${total} containers run vLLM on an NVIDIA GPU: ${n.protected} protected, ${n.unprotected} not protected, ${n.undetermined} undetermined, ${n['opted-out']} opted out`);
  const section = (title: string, status: Status, withFix: boolean): void => {
    const list = result.containers.filter((c) => c.status === status);
    if (list.length === 0) return;
    out.push('', `${title} (${list.length}):`);
    for (const c of list) {
      out.push(`  ${describe(c)}`, `    why: ${line(c.why.detail)}`);
      // A fix's own line breaks (a config entry to paste) are its layout; anything else from the cluster is escaped.
      if (withFix && c.fix !== undefined) out.push(`    fix: ${c.fix.split('\n').map(line).join('\n         ')}`);
    }
  };
  section('NOT PROTECTED: vLLM starts without waiting for GPU memory', 'unprotected', true);
  section('UNDETERMINED: whether these run on an NVIDIA GPU cannot be told', 'undetermined', true);
  section('Opted out (listed, not counted as failures)', 'opted-out', false);
  const bad = failing(result).length;
  out.push('', bad > 0 ? `result: ${bad} container${bad === 1 ? '' : 's'} not protected (exit code 3)` : 'result: every vLLM container on an NVIDIA GPU is protected');
  return `${out.join('\n')}\n`;
}
