#!/usr/bin/env node
// Writes the webhook chart's values.schema.json and the values table of its
// README.md from one description of every value (VALUES below), so that the
// two cannot drift:
//
//   deploy/webhook/values.schema.json  closed (additionalProperties: false at
//       every level), a type, range or format for every value that reaches an
//       object, `config` checked by the CLI's configuration schema
//       (src/config.schema.json, embedded: Helm resolves no $ref outside the
//       chart) less the options only a render uses
//   deploy/webhook/README.md           the part between the BEGIN/END values
//       markers: key, type, default (read from values.yaml), description;
//       and, from Chart.yaml, the links to the project at the chart's own tag
//       (blob/v<appVersion>/, not a branch that moves on), and the install
//       lines at its version and at the registry it is published to (the
//       annotation vram-preflight.io/chart, which scripts/release.mjs sets
//       for --registry; it regenerates the README of the chart it packages
//       with chartReadme())
//
// `--check` fails when either file is out of date (CI runs it through
// test/webhook-chart).
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse as parseYaml } from 'yaml';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const chart = join(root, 'deploy/webhook');
const schemaFile = join(chart, 'values.schema.json');
const readmeFile = join(chart, 'README.md');

// Options of the CLI's config that only a render uses (src/config/flags.ts, RENDER_ONLY_KEYS).
const RENDER_ONLY_KEYS = ['diagnosticsFile', 'reportFile', 'fastParse'];

// ---- formats of Kubernetes fields (the API server's own validation, as patterns)
const DNS_LABEL = '^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$';
const DNS_SUBDOMAIN = '^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$';
const QUALIFIED_NAME = '^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$';
const LABEL_VALUE = '^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$';
// resource.Quantity: a decimal number with an optional binary (Ki..Ei), decimal (m, k..E) or exponent suffix.
const QUANTITY = '^[+]?([0-9]+(\\.[0-9]*)?|\\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?$';
// Go's time.ParseDuration, as cert-manager and Prometheus read durations (no days, no years).
const GO_DURATION = '^([0-9]+(\\.[0-9]+)?(h|m|s|ms|us|µs|ns))+$';
const PROMETHEUS_DURATION = '^(([0-9]+)(y|w|d|h|m|s|ms))+$';

const str = (description, extra = {}) => ({ type: 'string', description, ...extra });
const int = (description, extra = {}) => ({ type: 'integer', description, ...extra });
const bool = (description) => ({ type: 'boolean', description });
const object = (description, properties, extra = {}) => ({ type: 'object', description, additionalProperties: false, properties, ...extra });
const map = (description, values, keys) => ({ type: 'object', description, ...(keys ? { propertyNames: { pattern: keys } } : {}), additionalProperties: values });
const labels = (description) => map(description, { type: 'string', pattern: LABEL_VALUE }, QUALIFIED_NAME);
const annotations = (description) => map(description, { type: 'string' }, QUALIFIED_NAME);
const quantity = { type: ['string', 'number'], pattern: QUANTITY, minimum: 0 };

const VALUES = {
  nameOverride: str('Replaces the chart name in object names and the app.kubernetes.io/name label.', { pattern: `^$|${DNS_LABEL}` }),
  fullnameOverride: str('The name of every object. Default: the release name when it contains "vram-preflight" (+ "-webhook" unless it has it), else <release>-vram-preflight-webhook.', { pattern: `^$|${DNS_LABEL}` }),
  image: object('The webhook image.', {
    repository: str('Image repository.', { minLength: 1, pattern: '^[a-z0-9]([-a-z0-9._/:]*[a-z0-9])?$' }),
    tag: str("Image tag. Empty: the chart's appVersion. Ignored when a digest is set.", { pattern: '^$|^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$' }),
    digest: str('Image digest (sha256:...); wins over the tag. A released chart sets the digest of the image released with it.', { pattern: '^(|sha256:[0-9a-f]{64})$' }),
    pullPolicy: { enum: ['Always', 'IfNotPresent', 'Never'], description: 'imagePullPolicy of the container.' },
  }, { required: ['repository'] }),
  imagePullSecrets: {
    type: 'array',
    description: 'Secrets for pulling the image, as in a pod spec: [{name: regcred}].',
    items: { type: 'object', additionalProperties: false, required: ['name'], properties: { name: { type: 'string', pattern: DNS_SUBDOMAIN } } },
  },
  replicaCount: int('Webhook replicas. Two or more: a pod created while the only replica restarts goes in unwrapped (failurePolicy Ignore).', { minimum: 1 }),
  config: 'CONFIG',
  webhook: object('How the API server calls the webhook.', {
    port: int('HTTPS port of the container (admission, /healthz, /readyz, /metrics).', { minimum: 1, maximum: 65535 }),
    timeoutSeconds: int("The API server's wait for an answer. The webhook never blocks a pod: on a timeout the pod is admitted unchanged.", { minimum: 1, maximum: 5 }),
    namespaceMode: { enum: ['optIn', 'optOut'], description: 'optIn: only namespaces labelled vram-preflight.io/inject=enabled. optOut: every namespace except those labelled vram-preflight.io/inject=disabled. kube-system, kube-node-lease and the release namespace are never sent.' },
    excludeNamespaces: { type: 'array', description: 'More namespaces never sent, by name.', items: { type: 'string', pattern: DNS_LABEL } },
    extraArgs: { type: 'array', description: 'Extra flags of `vram-preflight webhook` (e.g. --registry-budget-ms=1500); the webhook refuses an unknown one at start.', items: { type: 'string', pattern: '^--[a-z]' } },
    shutdownDelaySeconds: int('On SIGTERM, how long the webhook goes on accepting and answering, not ready, while the Service stops sending it connections (Gatekeeper: 10 s); then it drains.', { minimum: 0, maximum: 300 }),
    drainTimeoutSeconds: int('After the shutdown delay, how long admissions in flight may take to finish.', { minimum: 1, maximum: 300 }),
    heapMiB: int("Node's heap cap (--max-old-space-size), MiB. 0: 3/8 of resources.limits.memory; the webhook sizes its other limits from it.", { minimum: 0, maximum: 65536 }),
  }),
  metrics: object('Prometheus metrics (docs/webhook.md, "Metrics").', {
    port: int('A plain-HTTP port that serves /metrics only, neither webhook.port nor service.port (0: none; /metrics is then on the HTTPS port alone, behind the chart CA).', { minimum: 0, maximum: 65535 }),
    serviceMonitor: object('A Prometheus Operator ServiceMonitor (monitoring.coreos.com/v1) for the webhook pods.', {
      enabled: bool('Create it (needs the Prometheus Operator CRDs).'),
      interval: str('Scrape interval.', { pattern: PROMETHEUS_DURATION }),
      scrapeTimeout: str('Scrape timeout (below the interval).', { pattern: PROMETHEUS_DURATION }),
      labels: labels('Labels of the ServiceMonitor (what your Prometheus selects, e.g. release: kube-prometheus-stack).'),
    }),
    prometheusRule: object('A Prometheus Operator PrometheusRule with the alerts of docs/webhook.md.', {
      enabled: bool('Create it (needs the Prometheus Operator CRDs).'),
      labels: labels('Labels of the PrometheusRule (what your Prometheus selects).'),
      certificateExpiryDays: int('Alert when the served certificate expires within this many days.', { minimum: 1, maximum: 3650 }),
    }),
  }),
  certificates: object('The serving certificate and the CA the API server trusts.', {
    certManager: object('cert-manager issues and renews the certificate and injects its CA (needs cert-manager in the cluster).', {
      enabled: bool('Use cert-manager instead of the chart-generated certificate.'),
      issuerRef: object('An existing Issuer or ClusterIssuer. Empty: the chart creates a self-signed CA and its Issuer. Given: name is required.', {
        name: str('Issuer name.', { pattern: DNS_SUBDOMAIN }),
        kind: str('Issuer or ClusterIssuer (or the kind of an external issuer, with its group).', { pattern: '^[A-Z][A-Za-z0-9]*$' }),
        group: str('API group of the issuer (default cert-manager.io).', { pattern: DNS_SUBDOMAIN }),
      }, { dependencies: { kind: ['name'], group: ['name'] } }),
      duration: str('Certificate lifetime, as a Go duration (8760h: one year; no "d" or "y").', { pattern: GO_DURATION }),
      renewBefore: str('Renew this long before expiry, as a Go duration.', { pattern: GO_DURATION }),
    }),
    generated: object('Without cert-manager: the chart generates a CA and a serving certificate, keeps them across upgrades, and renews them with overlap (docs/webhook.md, "Certificates").', {
      validityDays: int('Lifetime of the generated CA and serving certificate, in days.', { minimum: 2, maximum: 36500 }),
      renewBeforeDays: int('An upgrade renews the serving certificate (same CA) when it expires within this many days, and the CA (with overlap) when it does.', { minimum: 1, maximum: 36500 }),
      // A string or a number: `--set certificates.generated.rotation=$(date +%Y%m%d)` gives both helms an integer.
      rotation: { type: ['string', 'integer'], maxLength: 63, minimum: 0, description: 'Change this to any new value (a string or a number, e.g. --set certificates.generated.rotation=$(date +%Y%m%d)) to rotate the CA at the next upgrade: the new CA, already trusted, signs the serving certificate; the old one stays trusted until the next rotation.' },
    }),
  }),
  serviceAccount: object('The service account of the webhook pods (it reads DRA claims).', {
    create: bool('Create it.'),
    name: str('Its name. Empty: the full name.', { pattern: `^$|${DNS_SUBDOMAIN}` }),
    annotations: annotations('Annotations of the service account.'),
  }),
  terminationGracePeriodSeconds: { type: ['integer', 'null'], minimum: 1, maximum: 3600, description: "The pod's grace period after SIGTERM. Empty: webhook.shutdownDelaySeconds + webhook.drainTimeoutSeconds + 5; a value must be above those two together." },
  podAnnotations: annotations('Annotations of the webhook pods.'),
  podLabels: labels('Labels of the webhook pods, besides the chart\'s.'),
  resources: object('Resources of the webhook container.', {
    requests: map('Requests, e.g. cpu: 50m, memory: 96Mi.', quantity, '^(cpu|memory|ephemeral-storage|hugepages-[0-9A-Za-z]+|[a-z0-9.-]+/[a-z0-9._-]+)$'),
    limits: map('Limits, e.g. memory: 384Mi (its memory sizes the heap cap: webhook.heapMiB).', quantity, '^(cpu|memory|ephemeral-storage|hugepages-[0-9A-Za-z]+|[a-z0-9.-]+/[a-z0-9._-]+)$'),
  }),
  podDisruptionBudget: object('A PodDisruptionBudget for the webhook pods.', {
    enabled: bool('Create it.'),
    maxUnavailable: { type: ['integer', 'string'], description: 'Replicas that may be down at once: a number or a percentage ("50%").', minimum: 0, pattern: '^[0-9]{1,3}%$' },
  }),
  topologySpreadConstraints: {
    type: 'array',
    description: "Spread constraints of the webhook pods. Empty: spread over nodes and zones, best effort, by the chart's selector labels.",
    items: {
      type: 'object',
      additionalProperties: false,
      required: ['maxSkew', 'topologyKey', 'whenUnsatisfiable'],
      properties: {
        maxSkew: { type: 'integer', minimum: 1 },
        topologyKey: { type: 'string', pattern: QUALIFIED_NAME },
        whenUnsatisfiable: { enum: ['DoNotSchedule', 'ScheduleAnyway'] },
        labelSelector: { type: 'object' },
        minDomains: { type: 'integer', minimum: 1 },
        matchLabelKeys: { type: 'array', items: { type: 'string' } },
        nodeAffinityPolicy: { enum: ['Honor', 'Ignore'] },
        nodeTaintsPolicy: { enum: ['Honor', 'Ignore'] },
      },
    },
  },
  priorityClassName: str('PriorityClass of the webhook pods (as Gatekeeper: system-cluster-critical; "" where the cluster keeps that class to kube-system).', { pattern: `^$|${DNS_SUBDOMAIN}` }),
  nodeSelector: map('Node labels the webhook pods must run on.', { type: 'string', pattern: LABEL_VALUE }, QUALIFIED_NAME),
  tolerations: {
    type: 'array',
    description: 'Tolerations of the webhook pods, as in a pod spec.',
    items: {
      type: 'object',
      additionalProperties: false,
      properties: {
        key: { type: 'string' },
        operator: { enum: ['Exists', 'Equal'] },
        value: { type: 'string' },
        effect: { enum: ['', 'NoSchedule', 'PreferNoSchedule', 'NoExecute'] },
        tolerationSeconds: { type: 'integer' },
      },
    },
  },
  affinity: object('Affinity of the webhook pods, as in a pod spec.', {
    nodeAffinity: { type: 'object' },
    podAffinity: { type: 'object' },
    podAntiAffinity: { type: 'object' },
  }),
  probes: object('Liveness (/healthz) and readiness (/readyz) probes, over HTTPS.', {
    liveness: object('The liveness probe.', probeTiming()),
    readiness: object('The readiness probe.', probeTiming()),
  }),
  service: object('The Service the API server calls.', {
    port: int('Service port (the MutatingWebhookConfiguration calls it).', { minimum: 1, maximum: 65535 }),
  }),
  networkPolicy: object('A NetworkPolicy: only the API server reaches the webhook, only the listed scrapers its metrics.', {
    enabled: bool('Create it (apiServer is then required).'),
    apiServer: { type: 'array', description: "NetworkPolicyPeers the API server's calls come from, e.g. [{ipBlock: {cidr: 10.0.0.0/24}}] (the control plane; konnectivity's agents where it is used).", items: networkPolicyPeer() },
    metricsScrapers: { type: 'array', description: 'NetworkPolicyPeers allowed to scrape metrics.port (or the HTTPS port when it is 0).', items: networkPolicyPeer() },
  }),
  audit: object('`vram-preflight audit` (docs/webhook.md, "Audit"): the read-only ClusterRole <fullname>-audit it needs is always created; bind it to a person or CI, or enable the CronJob.', {
    cronJob: object("A CronJob that runs `vram-preflight audit` in the webhook's image with the chart's config and a ServiceAccount of its own bound to the audit ClusterRole; a run that finds an unprotected container fails its Job (exit 3), once.", {
      enabled: bool('Create it.'),
      // Five cron fields or a @macro, as the CronJob controller reads spec.schedule (robfig/cron).
      schedule: str('When it runs: spec.schedule of the CronJob (cron syntax, or @hourly, @daily, ...).', { pattern: '^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|(\\S+\\s+){4}\\S+)$' }),
      extraArgs: { type: 'array', description: 'Extra flags of `vram-preflight audit` (e.g. --output=json, --namespace=ml); the audit refuses an unknown one.', items: { type: 'string', pattern: '^--[a-z]' } },
      timeoutSeconds: int('The whole audit at most this long, seconds (its --timeout): a run past it stops, saying how far it got (exit 1).', { minimum: 1, maximum: 86400 }),
      activeDeadlineSeconds: int("The Job's activeDeadlineSeconds, above timeoutSeconds: the pod is ended after this, its image pull included.", { minimum: 1, maximum: 86400 }),
      heapMiB: int("Node's heap cap (--max-old-space-size) of the audit, MiB. 0: 3/8 of resources.limits.memory, as for the webhook.", { minimum: 0, maximum: 65536 }),
      resources: object('Resources of the audit container.', {
        requests: map('Requests, e.g. cpu: 50m, memory: 96Mi.', quantity, '^(cpu|memory|ephemeral-storage|hugepages-[0-9A-Za-z]+|[a-z0-9.-]+/[a-z0-9._-]+)$'),
        limits: map('Limits, e.g. memory: 256Mi.', quantity, '^(cpu|memory|ephemeral-storage|hugepages-[0-9A-Za-z]+|[a-z0-9.-]+/[a-z0-9._-]+)$'),
      }),
    }),
  }),
};

/** A NetworkPolicyPeer (networking.k8s.io/v1): an ipBlock, or pod and namespace selectors. */
function networkPolicyPeer() {
  const selector = { type: 'object', additionalProperties: false, properties: { matchLabels: { type: 'object', additionalProperties: { type: 'string' } }, matchExpressions: { type: 'array', items: { type: 'object' } } } };
  return {
    type: 'object',
    additionalProperties: false,
    minProperties: 1,
    properties: {
      ipBlock: { type: 'object', additionalProperties: false, required: ['cidr'], properties: { cidr: { type: 'string', pattern: '^[0-9a-fA-F:.]+/[0-9]{1,3}$' }, except: { type: 'array', items: { type: 'string', pattern: '^[0-9a-fA-F:.]+/[0-9]{1,3}$' } } } },
      namespaceSelector: selector,
      podSelector: selector,
    },
  };
}

function probeTiming() {
  return {
    initialDelaySeconds: int('Seconds before the first probe.', { minimum: 0 }),
    periodSeconds: int('Seconds between probes.', { minimum: 1 }),
    timeoutSeconds: int('Seconds one probe may take.', { minimum: 1 }),
    failureThreshold: int('Failures in a row that count.', { minimum: 1 }),
  };
}

/** The CLI's configuration schema, less what only a render uses, for `config`. */
function configSchema() {
  const { $schema: _draft, $id: _id, ...config } = JSON.parse(readFileSync(join(root, 'src/config.schema.json'), 'utf8'));
  const properties = Object.fromEntries(Object.entries(config.properties).filter(([key]) => !RENDER_ONLY_KEYS.includes(key)));
  return {
    ...config,
    description: `${config.description} In the chart: the webhook's config file, re-read when the ConfigMap changes (docs/configuration.md; the render-only options ${RENDER_ONLY_KEYS.join(', ')} are not taken).`,
    properties,
  };
}

export function valuesSchema() {
  return {
    $schema: 'http://json-schema.org/draft-07/schema#',
    title: 'vram-preflight-webhook chart values',
    type: 'object',
    additionalProperties: false,
    properties: Object.fromEntries(Object.entries(VALUES).map(([key, value]) => [key, value === 'CONFIG' ? configSchema() : value])),
  };
}

// ---- README: the values table

const typeOf = (node) => {
  if (node.enum) return node.enum.map((v) => JSON.stringify(v)).join(' or ');
  const type = Array.isArray(node.type) ? node.type.join(' or ') : node.type;
  if (type === 'array') return `list of ${node.items?.type === 'object' ? 'objects' : `${node.items?.type ?? 'values'}s`}`;
  if (type === 'object' && node.additionalProperties && typeof node.additionalProperties === 'object') return node.additionalProperties === quantity ? 'map of quantities' : 'map of strings';
  return type;
};

function rows(node, prefix, defaults) {
  const out = [];
  for (const [key, child] of Object.entries(node.properties ?? {})) {
    const path = prefix ? `${prefix}.${key}` : key;
    const value = defaults?.[key];
    // An object of named values is a section: its values get rows, not the object.
    const section = child.type === 'object' && child.additionalProperties === false && child.properties && path !== 'config' && !['affinity'].includes(path);
    if (section) out.push(...rows(child, path, value));
    else out.push({ path, type: path === 'config' ? 'object' : typeOf(child), value, description: path === 'config' ? `${child.description} Keys: ${Object.keys(child.properties).filter((k) => k !== '$schema').map((k) => `\`${k}\``).join(', ')}.` : child.description });
  }
  return out;
}

const cell = (text) => String(text).replace(/\|/g, '\\|').replace(/\n/g, ' ');
const shown = (value) => (value === undefined ? '' : `\`${JSON.stringify(value).replace(/\|/g, '\\|')}\``);

export function valuesTable(chartDir = chart) {
  const defaults = parseYaml(readFileSync(join(chartDir, 'values.yaml'), 'utf8'));
  const table = rows(valuesSchema(), '', defaults).map((r) => `| \`${r.path}\` | ${cell(r.type)} | ${shown(r.value)} | ${cell(r.description ?? '')} |`);
  return ['| key | type | default | description |', '|---|---|---|---|', ...table].join('\n');
}

const BEGIN = '<!-- BEGIN values (generated by scripts/chart-schema.mjs from its descriptions and values.yaml; do not edit) -->';
const END = '<!-- END values -->';

/** Where the chart in chartDir is published (Chart.yaml's vram-preflight.io/chart: oci://<registry>/charts/<name>), and its versions. */
export function chartFacts(chartDir = chart) {
  const meta = parseYaml(readFileSync(join(chartDir, 'Chart.yaml'), 'utf8'));
  const ref = meta.annotations?.['vram-preflight.io/chart'];
  if (typeof ref !== 'string' || !/^oci:\/\/\S+\/charts\/vram-preflight-webhook$/.test(ref)) throw new Error(`${join(chartDir, 'Chart.yaml')}: annotations."vram-preflight.io/chart" must be oci://<registry>/charts/vram-preflight-webhook`);
  return { ref, version: String(meta.version), appVersion: String(meta.appVersion) };
}

/** The README of the chart in chartDir, from its current text: the values table, the project links at the chart's tag, the install lines at its version and registry. */
export function chartReadme(current, chartDir = chart) {
  const start = current.indexOf(BEGIN);
  const end = current.indexOf(END);
  if (start === -1 || end === -1) throw new Error(`deploy/webhook/README.md: the markers ${BEGIN} and ${END} are missing`);
  const { ref, version, appVersion } = chartFacts(chartDir);
  return `${current.slice(0, start)}${BEGIN}\n${valuesTable(chartDir)}\n${current.slice(end)}`
    .replace(/https:\/\/github\.com\/vram-preflight\/vram-preflight\/blob\/[^/\s)]+\//g, `https://github.com/vram-preflight/vram-preflight/blob/v${appVersion}/`)
    .replace(/oci:\/\/\S+\/charts\/vram-preflight-webhook\b/g, ref)
    .replace(/(vram-preflight-webhook[^\n]*(?:\\\n[^\n]*)*?--version )\S+/g, `$1${version}`);
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const schemaText = `${JSON.stringify(valuesSchema(), null, 2)}\n`;
  const readmeNow = readFileSync(readmeFile, 'utf8');
  const readmeText = chartReadme(readmeNow);
  if (process.argv.includes('--check')) {
    const stale = [];
    let schemaNow = '';
    try {
      schemaNow = readFileSync(schemaFile, 'utf8');
    } catch {}
    if (schemaNow !== schemaText) stale.push('deploy/webhook/values.schema.json');
    if (readmeNow !== readmeText) stale.push('deploy/webhook/README.md');
    if (stale.length) {
      console.error(`chart-schema: ${stale.join(' and ')} out of date; run node scripts/chart-schema.mjs`);
      process.exit(1);
    }
  } else {
    writeFileSync(schemaFile, schemaText);
    writeFileSync(readmeFile, readmeText);
  }
}
