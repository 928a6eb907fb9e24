#!/usr/bin/env node
// Writes deploy/webhook/values.schema.json: the chart's own values, with
// `config` checked by the CLI's configuration schema (src/config.schema.json),
// embedded because Helm resolves no $ref outside the chart. `--check` fails
// when the file is out of date (CI runs it through test/webhook-chart).
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const target = join(root, 'deploy/webhook/values.schema.json');

export function valuesSchema() {
  const { $schema: _draft, $id: _id, ...config } = JSON.parse(readFileSync(join(root, 'src/config.schema.json'), 'utf8'));
  const object = (properties, extra = {}) => ({ type: 'object', properties, ...extra });
  const str = { type: 'string' };
  return {
    $schema: 'http://json-schema.org/draft-07/schema#',
    title: 'vram-preflight-webhook chart values',
    type: 'object',
    properties: {
      image: object(
        {
          repository: { type: 'string', minLength: 1 },
          tag: str,
          digest: { type: 'string', pattern: '^(|sha256:[0-9a-f]{64})$' },
          pullPolicy: { enum: ['Always', 'IfNotPresent', 'Never'] },
        },
        { required: ['repository'] },
      ),
      replicaCount: { type: 'integer', minimum: 1 },
      config,
      webhook: object({
        port: { type: 'integer', minimum: 1, maximum: 65535 },
        timeoutSeconds: { type: 'integer', minimum: 1, maximum: 5 },
        namespaceMode: { enum: ['optIn', 'optOut'] },
        excludeNamespaces: { type: 'array', items: str },
        extraArgs: { type: 'array', items: str },
      }),
      certificates: object({
        certManager: object({
          enabled: { type: 'boolean' },
          issuerRef: object({ name: str, kind: str, group: str }, { additionalProperties: false }),
          duration: str,
          renewBefore: str,
        }),
        generated: object({ validityDays: { type: 'integer', minimum: 1 } }),
      }),
      service: object({ port: { type: 'integer', minimum: 1, maximum: 65535 } }),
      podDisruptionBudget: object({ enabled: { type: 'boolean' } }),
      // `vram-preflight audit` (templates/audit.yaml): the CronJob that runs it; its ClusterRole is always there.
      audit: object(
        {
          cronJob: object(
            {
              enabled: { type: 'boolean' },
              // Cron syntax (five fields) or a @macro, as the CronJob controller reads spec.schedule.
              schedule: { type: 'string', pattern: '^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|(\\S+\\s+){4}\\S+)$' },
              extraArgs: { type: 'array', items: { type: 'string', pattern: '^--[a-z]' } },
              resources: object({ requests: { type: 'object' }, limits: { type: 'object' } }, { additionalProperties: false }),
            },
            { additionalProperties: false },
          ),
        },
        { additionalProperties: false },
      ),
    },
  };
}

const text = `${JSON.stringify(valuesSchema(), null, 2)}\n`;
if (process.argv.includes('--check')) {
  let current = '';
  try {
    current = readFileSync(target, 'utf8');
  } catch {}
  if (current !== text) {
    console.error('chart-schema: deploy/webhook/values.schema.json is out of date; run node scripts/chart-schema.mjs');
    process.exit(1);
  }
} else if (import.meta.url === `file://${process.argv[1]}`) {
  writeFileSync(target, text);
}
