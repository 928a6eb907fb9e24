/**
 * The webhook's chart, deploy/webhook/, rendered by the real helm v3 and v4 in
 * both certificate modes and both namespace modes: lint, the settings an
 * admission webhook must have, and the Kubernetes API schema of every object
 * (offline, over many value combinations). Installs and upgrades against the
 * real API server are in test/apiserver/chart.test.ts and rotation.test.ts.
 */
import { spawnSync } from 'node:child_process';
import { X509Certificate, createPrivateKey } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Ajv } from 'ajv';
import { ClusterRole, ClusterRoleBinding } from 'kubernetes-models/rbac.authorization.k8s.io/v1';
import { MutatingWebhookConfiguration } from 'kubernetes-models/admissionregistration.k8s.io/v1';
import { Deployment } from 'kubernetes-models/apps/v1';
import { NetworkPolicy } from 'kubernetes-models/networking.k8s.io/v1';
import { CronJob } from 'kubernetes-models/batch/v1';
import { PodDisruptionBudget } from 'kubernetes-models/policy/v1';
import { ConfigMap, Secret, Service, ServiceAccount } from 'kubernetes-models/v1';
import { describe, expect, it } from 'vitest';
import { parse as parseYaml, parseAllDocuments, stringify as stringifyYaml } from 'yaml';
import { processSettings } from '../../src/webhook/main.js';

const ROOT = path.join(import.meta.dirname, '../..');
const CHART = path.join(ROOT, 'deploy/webhook');
const HELMS = { v3: path.join(ROOT, '.cache/helm/v3/helm'), v4: path.join(ROOT, '.cache/helm/v4/helm') } as const;
type Helm = keyof typeof HELMS;
type K8s = { apiVersion: string; kind: string; metadata: { name: string; namespace?: string; labels?: Record<string, string>; annotations?: Record<string, string> }; [k: string]: any };

const RELEASE = 'gate';
const NAMESPACE = 'vram-preflight';
const FULLNAME = `${RELEASE}-vram-preflight-webhook`;

function helm(which: Helm, args: string[]) {
  // Helm's own dirs in a throw-away home: nothing of the machine's helm setup leaks in.
  const home = mkdtempSync(path.join(tmpdir(), 'chart-helm-'));
  try {
    return spawnSync(HELMS[which], args, {
      encoding: 'utf8',
      env: { PATH: process.env.PATH, HOME: home, HELM_CACHE_HOME: `${home}/c`, HELM_CONFIG_HOME: `${home}/f`, HELM_DATA_HOME: `${home}/d` },
    });
  } finally {
    rmSync(home, { recursive: true, force: true });
  }
}
function template(which: Helm, values: string[] = [], extra: string[] = []): K8s[] {
  const r = helm(which, ['template', RELEASE, CHART, '--namespace', NAMESPACE, ...values.flatMap((v) => ['--set', v]), ...extra]);
  expect(r.stderr).toBe('');
  expect(r.status).toBe(0);
  return objects(r.stdout);
}
const objects = (stream: string): K8s[] => parseAllDocuments(stream).map((d) => d.toJS() as K8s).filter((o) => o && typeof o === 'object');
const only = (all: K8s[], kind: string, name?: string): K8s => {
  const found = all.filter((o) => o.kind === kind && (name === undefined || o.metadata.name === name));
  expect(found.map((o) => o.metadata.name), kind).toHaveLength(1);
  return found[0]!;
};

// The Kubernetes API's schemas (kubernetes-models, as in test/core/kubernetes-schema.test.ts): a quick
// check of many value combinations offline. The proof that the chart is valid is the real API server
// (test/apiserver/chart.test.ts: helm install of each mode; rotation.test.ts: upgrades with lookup).
type Model = new (data: never) => { validate(): void };
const MODELS: Record<string, Model> = {
  'v1/ServiceAccount': ServiceAccount as unknown as Model,
  'v1/ConfigMap': ConfigMap as unknown as Model,
  'v1/Secret': Secret as unknown as Model,
  'v1/Service': Service as unknown as Model,
  'apps/v1/Deployment': Deployment as unknown as Model,
  'batch/v1/CronJob': CronJob as unknown as Model,
  'policy/v1/PodDisruptionBudget': PodDisruptionBudget as unknown as Model,
  'rbac.authorization.k8s.io/v1/ClusterRole': ClusterRole as unknown as Model,
  'rbac.authorization.k8s.io/v1/ClusterRoleBinding': ClusterRoleBinding as unknown as Model,
  'admissionregistration.k8s.io/v1/MutatingWebhookConfiguration': MutatingWebhookConfiguration as unknown as Model,
  'networking.k8s.io/v1/NetworkPolicy': NetworkPolicy as unknown as Model,
};
// cert-manager's CRDs are not in kubernetes-models: the fields the chart sets,
// with the types and required fields of cert-manager.io/v1, nothing else.
const ajv = new Ajv({ strict: false });
const meta = { type: 'object', required: ['name', 'namespace'], properties: { name: { type: 'string' }, namespace: { type: 'string' } } };
const issuerRef = { type: 'object', required: ['name'], additionalProperties: false, properties: { name: { type: 'string' }, kind: { enum: ['Issuer', 'ClusterIssuer'] }, group: { const: 'cert-manager.io' } } };
const CERT_MANAGER: Record<string, ReturnType<typeof ajv.compile>> = {
  'cert-manager.io/v1/Certificate': ajv.compile({
    type: 'object',
    required: ['metadata', 'spec'],
    properties: {
      metadata: meta,
      spec: {
        type: 'object',
        required: ['secretName', 'issuerRef'],
        additionalProperties: false,
        properties: {
          secretName: { type: 'string' },
          isCA: { type: 'boolean' },
          commonName: { type: 'string', maxLength: 64 },
          dnsNames: { type: 'array', items: { type: 'string' } },
          duration: { type: 'string', pattern: '^[0-9]+h$' },
          renewBefore: { type: 'string', pattern: '^[0-9]+h$' },
          usages: { type: 'array', items: { enum: ['server auth', 'digital signature', 'key encipherment'] } },
          privateKey: { type: 'object', additionalProperties: false, properties: { algorithm: { enum: ['RSA', 'ECDSA', 'Ed25519'] }, size: { type: 'integer' }, rotationPolicy: { enum: ['Never', 'Always'] } } },
          issuerRef,
        },
      },
    },
  }),
  'cert-manager.io/v1/Issuer': ajv.compile({
    type: 'object',
    required: ['metadata', 'spec'],
    properties: {
      metadata: meta,
      spec: {
        type: 'object',
        additionalProperties: false,
        minProperties: 1,
        maxProperties: 1,
        properties: { selfSigned: { type: 'object' }, ca: { type: 'object', required: ['secretName'], properties: { secretName: { type: 'string' } } } },
      },
    },
  }),
};
// Prometheus Operator's CRDs (monitoring.coreos.com/v1): the fields the chart sets, with their types, nothing else.
const MONITORING: Record<string, ReturnType<typeof ajv.compile>> = {
  'monitoring.coreos.com/v1/ServiceMonitor': ajv.compile({
    type: 'object',
    required: ['metadata', 'spec'],
    properties: {
      metadata: meta,
      spec: {
        type: 'object',
        required: ['selector', 'endpoints'],
        additionalProperties: false,
        properties: {
          selector: { type: 'object', required: ['matchLabels'], properties: { matchLabels: { type: 'object', additionalProperties: { type: 'string' } } } },
          namespaceSelector: { type: 'object', additionalProperties: false, properties: { matchNames: { type: 'array', items: { type: 'string' } } } },
          endpoints: {
            type: 'array',
            items: {
              type: 'object',
              additionalProperties: false,
              required: ['port'],
              properties: {
                port: { type: 'string' },
                path: { type: 'string' },
                scheme: { enum: ['http', 'https'] },
                interval: { type: 'string', pattern: '^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$' },
                scrapeTimeout: { type: 'string', pattern: '^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$' },
                tlsConfig: {
                  type: 'object',
                  additionalProperties: false,
                  properties: {
                    serverName: { type: 'string' },
                    ca: { type: 'object', additionalProperties: false, properties: { secret: { type: 'object', required: ['key'], additionalProperties: false, properties: { name: { type: 'string' }, key: { type: 'string' } } } } },
                  },
                },
              },
            },
          },
        },
      },
    },
  }),
  'monitoring.coreos.com/v1/PrometheusRule': ajv.compile({
    type: 'object',
    required: ['metadata', 'spec'],
    properties: {
      metadata: meta,
      spec: {
        type: 'object',
        additionalProperties: false,
        properties: {
          groups: {
            type: 'array',
            items: {
              type: 'object',
              required: ['name', 'rules'],
              additionalProperties: false,
              properties: {
                name: { type: 'string' },
                rules: {
                  type: 'array',
                  items: {
                    type: 'object',
                    required: ['alert', 'expr'],
                    additionalProperties: false,
                    properties: { alert: { type: 'string' }, expr: { type: 'string' }, for: { type: 'string' }, labels: { type: 'object', additionalProperties: { type: 'string' } }, annotations: { type: 'object', additionalProperties: { type: 'string' } } },
                  },
                },
              },
            },
          },
        },
      },
    },
  }),
};

function expectValid(all: K8s[]): void {
  for (const o of all) {
    const key = `${o.apiVersion}/${o.kind}`;
    if (MODELS[key]) new MODELS[key](o as never).validate();
    else if (CERT_MANAGER[key]) expect(CERT_MANAGER[key](o), `${key}: ${ajv.errorsText(CERT_MANAGER[key].errors)}`).toBe(true);
    else if (MONITORING[key]) expect(MONITORING[key](o), `${key}: ${ajv.errorsText(MONITORING[key].errors)}`).toBe(true);
    else throw new Error(`no schema for ${key}`);
  }
}

const MODES = [
  { certs: 'generated', ns: 'optIn', values: [] },
  { certs: 'generated', ns: 'optOut', values: ['webhook.namespaceMode=optOut'] },
  { certs: 'cert-manager', ns: 'optIn', values: ['certificates.certManager.enabled=true'] },
  { certs: 'cert-manager', ns: 'optOut', values: ['certificates.certManager.enabled=true', 'webhook.namespaceMode=optOut'] },
] as const;

describe.each(Object.keys(HELMS) as Helm[])('helm %s', (which) => {
  it('lints clean in every mode', () => {
    for (const mode of MODES) {
      const r = helm(which, ['lint', CHART, '--strict', '--namespace', NAMESPACE, ...mode.values.flatMap((v) => ['--set', v])]);
      expect(r.stdout + r.stderr, mode.values.join(',')).toContain('0 chart(s) failed');
      expect(r.status).toBe(0);
    }
  });

  describe.each(MODES)('$certs certificates, $ns namespaces', ({ certs, ns, values }) => {
    const all = template(which, [...values]);
    const hook = only(all, 'MutatingWebhookConfiguration');
    const webhook = hook.webhooks[0];

    it('renders objects valid against the Kubernetes API schema', () => {
      expectValid(all);
      expect(all.map((o) => o.kind).sort()).toEqual(
        [
          'ClusterRole',
          'ClusterRole',
          'ClusterRoleBinding',
          'ConfigMap',
          'Deployment',
          'MutatingWebhookConfiguration',
          'PodDisruptionBudget',
          'Service',
          'ServiceAccount',
          ...(certs === 'generated' ? ['Secret', 'Secret'] : ['Certificate', 'Certificate', 'Issuer', 'Issuer']),
        ].sort(),
      );
    });

    it('never blocks a pod and is called once more when later webhooks changed it', () => {
      expect(hook.apiVersion).toBe('admissionregistration.k8s.io/v1');
      expect(hook.webhooks).toHaveLength(1);
      expect(webhook).toMatchObject({
        admissionReviewVersions: ['v1'],
        failurePolicy: 'Ignore',
        sideEffects: 'None',
        timeoutSeconds: 5,
        reinvocationPolicy: 'IfNeeded',
        matchPolicy: 'Equivalent',
        rules: [{ apiGroups: [''], apiVersions: ['v1'], resources: ['pods'], operations: ['CREATE'], scope: 'Namespaced' }],
        clientConfig: { service: { name: FULLNAME, namespace: NAMESPACE, path: '/mutate', port: 443 } },
      });
    });

    it(`selects namespaces ${ns === 'optIn' ? 'labelled in' : 'not labelled out'}, never the control plane's or its own, and no pod labelled skip`, () => {
      const expressions = webhook.namespaceSelector.matchExpressions;
      expect(webhook.namespaceSelector.matchLabels).toBeUndefined();
      expect(expressions).toContainEqual(
        ns === 'optIn'
          ? { key: 'vram-preflight.io/inject', operator: 'In', values: ['enabled'] }
          : { key: 'vram-preflight.io/inject', operator: 'NotIn', values: ['disabled'] },
      );
      expect(expressions).toContainEqual({ key: 'kubernetes.io/metadata.name', operator: 'NotIn', values: ['kube-system', 'kube-node-lease', NAMESPACE] });
      expect(expressions).toHaveLength(2);
      expect(webhook.objectSelector).toEqual({ matchExpressions: [{ key: 'vram-preflight.io/skip', operator: 'NotIn', values: ['true'] }] });
    });

    it('runs 2 replicas, restricted, with HTTPS probes, resources, spread and a disruption budget', () => {
      const deployment = only(all, 'Deployment');
      const pod = deployment.spec.template.spec;
      expect(deployment.spec.replicas).toBe(2);
      expect(pod.terminationGracePeriodSeconds).toBeGreaterThan(15); // the webhook drains for up to 15 s on SIGTERM
      expect(pod.volumes.find((v: { name: string }) => v.name === 'tmp')).toMatchObject({ emptyDir: {} });
      expect(pod.securityContext).toMatchObject({ runAsNonRoot: true, runAsUser: 65532, seccompProfile: { type: 'RuntimeDefault' } });
      expect(pod.containers).toHaveLength(1);
      const container = pod.containers[0];
      expect(container.securityContext).toEqual({
        runAsNonRoot: true,
        readOnlyRootFilesystem: true,
        allowPrivilegeEscalation: false,
        capabilities: { drop: ['ALL'] },
        seccompProfile: { type: 'RuntimeDefault' },
      });
      expect(container.image).toBe(`ghcr.io/vram-preflight/vram-preflight-webhook:${packageVersion()}`);
      expect(container.ports).toEqual([{ name: 'https', containerPort: 8443, protocol: 'TCP' }]);
      expect(container.livenessProbe.httpGet).toEqual({ path: '/healthz', port: 'https', scheme: 'HTTPS' });
      expect(container.readinessProbe.httpGet).toEqual({ path: '/readyz', port: 'https', scheme: 'HTTPS' });
      expect(container.resources.requests).toMatchObject({ cpu: expect.any(String), memory: expect.any(String) });
      expect(container.resources.limits.memory).toEqual(expect.any(String));
      expect(container.args).toEqual([
        'webhook',
        '--tls-cert-file=/etc/vram-preflight/tls/tls.crt',
        '--tls-key-file=/etc/vram-preflight/tls/tls.key',
        '--config=/etc/vram-preflight/config/config.yaml',
        '--port=8443',
        '--shutdown-delay-ms=10000',
        '--drain-timeout-ms=15000',
      ]);
      // Whole-directory mounts of the Secret and the ConfigMap: the kubelet updates them in place.
      expect(container.volumeMounts.every((m: { subPath?: string }) => m.subPath === undefined)).toBe(true);
      const volumes = Object.fromEntries(pod.volumes.map((v: { name: string }) => [v.name, v]));
      expect(volumes.tls.secret.secretName).toBe(`${FULLNAME}-tls`);
      // The private key: readable by its owner (root) and the pod's group, the webhook's (fsGroup), nobody else.
      expect(volumes.tls.secret.defaultMode).toBe(0o440);
      expect(pod.securityContext).toMatchObject({ runAsGroup: 65532, fsGroup: 65532 });
      expect(volumes.config.configMap.name).toBe(`${FULLNAME}-config`);
      expect(pod.topologySpreadConstraints.map((t: { topologyKey: string }) => t.topologyKey)).toEqual(['kubernetes.io/hostname', 'topology.kubernetes.io/zone']);
      const pdb = only(all, 'PodDisruptionBudget');
      expect(pdb.spec).toEqual({ maxUnavailable: 1, selector: deployment.spec.selector });
      expect(only(all, 'Service').spec.selector).toEqual(deployment.spec.selector.matchLabels);
    });

    it('may only get DRA claims and claim templates', () => {
      expect(only(all, 'ClusterRole', FULLNAME).rules).toEqual([{ apiGroups: ['resource.k8s.io'], resources: ['resourceclaims', 'resourceclaimtemplates'], verbs: ['get'] }]);
      const binding = only(all, 'ClusterRoleBinding');
      expect(binding.subjects).toEqual([{ kind: 'ServiceAccount', name: FULLNAME, namespace: NAMESPACE }]);
      expect(binding.roleRef.name).toBe(FULLNAME);
    });

    it('offers the audit a read-only ClusterRole, bound to nobody unless the CronJob is enabled', () => {
      expect(only(all, 'ClusterRole', `${FULLNAME}-audit`).rules).toEqual([
        { apiGroups: [''], resources: ['pods'], verbs: ['list'] },
        { apiGroups: [''], resources: ['namespaces'], verbs: ['get', 'list'] },
        { apiGroups: ['admissionregistration.k8s.io'], resources: ['mutatingwebhookconfigurations'], verbs: ['get', 'list'] },
        { apiGroups: ['resource.k8s.io'], resources: ['resourceclaims', 'resourceclaimtemplates'], verbs: ['get'] },
        { apiGroups: ['apps'], resources: ['deployments'], verbs: ['get'], resourceNames: [FULLNAME] },
      ]);
      expect(all.filter((o) => o.kind === 'CronJob')).toEqual([]);
    });

    if (certs === 'generated') {
      it('generates a CA and a serving certificate for the Service, and trusts that CA', () => {
        const secret = only(all, 'Secret', `${FULLNAME}-tls`);
        expect(secret.type).toBe('kubernetes.io/tls');
        const decode = (key: string) => Buffer.from(secret.data[key], 'base64');
        const ca = new X509Certificate(Buffer.from(only(all, 'Secret', `${FULLNAME}-ca`).data['ca.crt'], 'base64'));
        const serving = new X509Certificate(decode('tls.crt'));
        expect(serving.checkIssued(ca)).toBe(true);
        expect(serving.verify(ca.publicKey)).toBe(true);
        expect(serving.checkPrivateKey(createPrivateKey(decode('tls.key')))).toBe(true);
        for (const name of [FULLNAME, `${FULLNAME}.${NAMESPACE}`, `${FULLNAME}.${NAMESPACE}.svc`, `${FULLNAME}.${NAMESPACE}.svc.cluster.local`]) {
          expect(serving.checkHost(name), name).toBe(name);
        }
        // ca.crt and caBundle: the current CA (which signed it) and the next one (rotation.test.ts).
        expect(webhook.clientConfig.caBundle).toBe(secret.data['ca.crt']);
        expect(hook.metadata.annotations?.['cert-manager.io/inject-ca-from']).toBeUndefined();
      });
    } else {
      it('has cert-manager issue the serving certificate into the mounted Secret and inject its CA', () => {
        const serving = only(all, 'Certificate', `${FULLNAME}-serving`);
        expect(serving.spec.secretName).toBe(`${FULLNAME}-tls`);
        expect(serving.spec.dnsNames).toEqual([FULLNAME, `${FULLNAME}.${NAMESPACE}`, `${FULLNAME}.${NAMESPACE}.svc`, `${FULLNAME}.${NAMESPACE}.svc.cluster.local`]);
        expect(hook.metadata.annotations).toEqual({ 'cert-manager.io/inject-ca-from': `${NAMESPACE}/${FULLNAME}-serving` });
        expect(webhook.clientConfig.caBundle).toBeUndefined();
        // Its issuer is the chart's CA Issuer, itself from a self-signed CA certificate.
        const caIssuer = only(all, 'Issuer', serving.spec.issuerRef.name);
        const ca = only(all, 'Certificate', `${FULLNAME}-ca`);
        expect(caIssuer.spec.ca.secretName).toBe(ca.spec.secretName);
        expect(ca.spec.isCA).toBe(true);
        // Renewed with the same key: what it signed before stays valid against the renewed CA.
        expect(ca.spec.privateKey.rotationPolicy).toBe('Never');
        expect(only(all, 'Issuer', ca.spec.issuerRef.name).spec).toEqual({ selfSigned: {} });
      });
    }
  });

  it('runs the audit as a CronJob when asked: its own service account bound to the audit ClusterRole, the webhook\'s config, restricted, not retried, within a deadline and the webhook\'s heap rule', () => {
    const all = template(which, ['audit.cronJob.enabled=true', 'audit.cronJob.schedule=@hourly', 'audit.cronJob.extraArgs={--output=json}']);
    expectValid(all);
    const cron = only(all, 'CronJob');
    expect(cron.spec).toMatchObject({ schedule: '@hourly', concurrencyPolicy: 'Forbid', jobTemplate: { spec: { backoffLimit: 0, activeDeadlineSeconds: 600 } } });
    const pod = cron.spec.jobTemplate.spec.template.spec;
    expect(pod.serviceAccountName).toBe(`${FULLNAME}-audit`);
    expect(pod.restartPolicy).toBe('Never');
    expect(pod.securityContext).toMatchObject({ runAsNonRoot: true, runAsUser: 65532, seccompProfile: { type: 'RuntimeDefault' } });
    const container = pod.containers[0];
    expect(container.image).toBe(only(all, 'Deployment').spec.template.spec.containers[0].image);
    expect(container.args).toEqual(['audit', '--config=/etc/vram-preflight/config/config.yaml', '--cache-dir=/tmp/vram-preflight-cache', '--timeout=300s', '--output=json']);
    const fails = (values: string[]): string => {
      const r = helm(which, ['template', RELEASE, CHART, '--namespace', NAMESPACE, ...values.flatMap((v) => ['--set', v])]);
      expect(r.status, values.join(',')).not.toBe(0);
      return r.stderr;
    };
    // The webhook's heap rule: 3/8 of the memory limit (256Mi), or the value given; a limit too small for it fails.
    expect(container.env).toEqual([{ name: 'NODE_OPTIONS', value: '--max-old-space-size=96' }]);
    const heap = (values: string[]) => only(template(which, ['audit.cronJob.enabled=true', ...values]), 'CronJob').spec.jobTemplate.spec.template.spec.containers[0].env?.[0]?.value;
    expect(heap(['audit.cronJob.resources.limits.memory=1Gi'])).toBe('--max-old-space-size=384');
    expect(heap(['audit.cronJob.heapMiB=200'])).toBe('--max-old-space-size=200');
    expect(fails(['audit.cronJob.enabled=true', 'audit.cronJob.resources.limits.memory=128Mi'])).toContain('audit.cronJob.resources.limits.memory "128Mi" leaves the audit 48 MiB of heap');
    // The audit's own deadline, inside the Job's.
    const longer = only(template(which, ['audit.cronJob.enabled=true', 'audit.cronJob.timeoutSeconds=1200', 'audit.cronJob.activeDeadlineSeconds=1500']), 'CronJob').spec.jobTemplate.spec;
    expect(longer.activeDeadlineSeconds).toBe(1500);
    expect(longer.template.spec.containers[0].args).toContain('--timeout=1200s');
    expect(fails(['audit.cronJob.enabled=true', 'audit.cronJob.timeoutSeconds=600'])).toContain('audit.cronJob.activeDeadlineSeconds 600 must be above audit.cronJob.timeoutSeconds 600');
    expect(container.securityContext).toMatchObject({ readOnlyRootFilesystem: true, allowPrivilegeEscalation: false, capabilities: { drop: ['ALL'] } });
    expect(pod.volumes.find((v: { name: string }) => v.name === 'config').configMap.name).toBe(`${FULLNAME}-config`);
    const binding = only(all, 'ClusterRoleBinding', `${FULLNAME}-audit`);
    expect(binding.roleRef).toEqual({ apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: `${FULLNAME}-audit` });
    expect(binding.subjects).toEqual([{ kind: 'ServiceAccount', name: `${FULLNAME}-audit`, namespace: NAMESPACE }]);
    expect(only(all, 'ServiceAccount', `${FULLNAME}-audit`).metadata.namespace).toBe(NAMESPACE);
    // An audit pod is never one of the webhook's: not behind its Service, not in its PodDisruptionBudget or Deployment.
    const podLabels = cron.spec.jobTemplate.spec.template.metadata.labels as Record<string, string>;
    const selects = (selector: Record<string, string>) => Object.entries(selector).every(([k, v]) => podLabels[k] === v);
    expect(selects(only(all, 'Service').spec.selector)).toBe(false);
    expect(selects(only(all, 'PodDisruptionBudget').spec.selector.matchLabels)).toBe(false);
    expect(selects(only(all, 'Deployment').spec.selector.matchLabels)).toBe(false);
    expect(podLabels['app.kubernetes.io/component']).toBe('audit');
    const r = helm(which, ['template', RELEASE, CHART, '--set', 'audit.cronJob.schedule=every hour']);
    expect(r.status).not.toBe(0);
    expect(r.stderr).toMatch(/audit[./]cronJob[./]schedule/);
  });

  it('uses an existing cert-manager issuer instead of its own CA', () => {
    const all = template(which, ['certificates.certManager.enabled=true', 'certificates.certManager.issuerRef.name=corp-ca', 'certificates.certManager.issuerRef.kind=ClusterIssuer']);
    expectValid(all);
    expect(all.filter((o) => o.kind === 'Issuer')).toEqual([]);
    expect(only(all, 'Certificate').spec.issuerRef).toEqual({ name: 'corp-ca', kind: 'ClusterIssuer', group: 'cert-manager.io' });
  });

  it('takes more excluded namespaces, a shorter timeout, an image digest and extra flags', () => {
    const all = template(which, [
      'webhook.excludeNamespaces={gpu-operator,kube-system}',
      'webhook.timeoutSeconds=3',
      'image.digest=sha256:' + 'a'.repeat(64),
      'webhook.extraArgs={--registry-budget-ms=1500}',
    ]);
    expectValid(all);
    const webhook = only(all, 'MutatingWebhookConfiguration').webhooks[0];
    expect(webhook.timeoutSeconds).toBe(3);
    expect(webhook.namespaceSelector.matchExpressions[1].values).toEqual(['kube-system', 'kube-node-lease', NAMESPACE, 'gpu-operator']);
    const container = only(all, 'Deployment').spec.template.spec.containers[0];
    expect(container.image).toBe(`ghcr.io/vram-preflight/vram-preflight-webhook@sha256:${'a'.repeat(64)}`);
    expect(container.args.at(-1)).toBe('--registry-budget-ms=1500');
  });

  it('puts values.config into the ConfigMap as YAML, and refuses what the CLI would refuse', () => {
    const all = template(which, [], ['--set-json', 'config={"timeoutSeconds":600,"images":[{"repository":"corp/vllm","entrypoint":["vllm","serve"]}]}']);
    const file = only(all, 'ConfigMap').data['config.yaml'];
    expect(parseYaml(file)).toEqual({ timeoutSeconds: 600, images: [{ repository: 'corp/vllm', entrypoint: ['vllm', 'serve'] }] });
    expect(parseYaml(only(template(which), 'ConfigMap').data['config.yaml'])).toEqual({});
    // The file as the webhook reads it: the same reader as the CLI's --config takes it.
    const dir = mkdtempSync(path.join(tmpdir(), 'chart-config-'));
    try {
      writeFileSync(path.join(dir, 'config.yaml'), file);
      const cli = spawnSync(process.execPath, [path.join(ROOT, 'dist/vram-preflight.cjs'), 'explain', '--config', path.join(dir, 'config.yaml')], { input: '', encoding: 'utf8' });
      expect(cli.stderr).toBe('');
      expect(cli.stdout).toContain('timeout 600s');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
    for (const bad of ['config.timeoutSeconds=0', 'config.timeoutSecond=5', 'webhook.timeoutSeconds=10', 'webhook.namespaceMode=everything']) {
      const r = helm(which, ['template', RELEASE, CHART, '--set', bad]);
      expect(r.status, bad).not.toBe(0);
      expect(r.stdout).toBe('');
      expect(r.stderr).toMatch(/values don't meet the specifications of the schema|schema/);
    }
  });
});

describe.each(Object.keys(HELMS) as Helm[])('helm %s: a closed values schema', (which) => {
  // 0.3.0 rendered each of these with exit 0: typos silently ignored, values the API server refuses.
  const REFUSED = [
    'webhook.portt=8443',
    'imagee.repository=x',
    'podAnotations.a=b',
    'webhook.excludeNamespce={batch}',
    'terminationGracePeriodSeconds=abc',
    'probes.liveness.periodSeconds=abc',
    'tolerations=foo',
    'resources.limits.memory=lots',
    'podDisruptionBudget.maxUnavailable=-1',
    'podDisruptionBudget.maxUnavailable=lots',
    'certificates.certManager.duration=1y',
    'certificates.certManager.issuerRef.kind=Foo',
    'config.reportFile=/tmp/report.json',
    'replicaCount=0',
    'nodeSelector.zone=a b',
    'podLabels.team=a b',
    'imagePullSecrets={regcred}',
    'metrics.port=70000',
    'metrics.serviceMonitor.interval=soon',
  ];
  it.each(REFUSED)('refuses --set %s, naming the value', (value) => {
    const r = helm(which, ['template', RELEASE, CHART, '--set', value]);
    expect(r.status).not.toBe(0);
    expect(r.stdout).toBe('');
    expect(r.stderr).toMatch(/values don't meet the specifications of the schema/);
    // The message names the key that is wrong (the last known one on its path).
    const known = value.split('=')[0]!.split('.').slice(0, 2).join('.');
    expect(r.stderr.replace(/'/g, '').replace(/\//g, '.').replace(/\(root\)/, ''), value).toMatch(new RegExp(known.split('.').map((part) => part.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')).join('|')));
  });

  it('takes the values the API server takes: a percentage, quantities, tolerations, an issuer with its kind', () => {
    const all = template(which, [
      'podDisruptionBudget.maxUnavailable=50%',
      'resources.limits.memory=1Gi',
      'resources.requests.cpu=1',
      'tolerations[0].key=gpu',
      'tolerations[0].operator=Exists',
      'certificates.certManager.enabled=true',
      'certificates.certManager.issuerRef.name=corp',
      'certificates.certManager.issuerRef.kind=ClusterIssuer',
      'certificates.certManager.duration=2160h',
    ]);
    expectValid(all);
    expect(only(all, 'PodDisruptionBudget').spec.maxUnavailable).toBe('50%');
  });

  it('issuerRef with a kind but no name fails even without the schema (--skip-schema-validation), instead of falling back to the chart CA', () => {
    const r = helm(which, ['template', RELEASE, CHART, '--skip-schema-validation', '--set', 'certificates.certManager.enabled=true', '--set', 'certificates.certManager.issuerRef.kind=ClusterIssuer']);
    expect(r.status).not.toBe(0);
    expect(r.stderr).toContain('certificates.certManager.issuerRef has a kind or group but no name');
  });

  it.each([
    ['vram-preflight', 'vram-preflight-webhook'],
    ['vram-preflight-webhook', 'vram-preflight-webhook'],
    ['gpu-vram-preflight', 'gpu-vram-preflight-webhook'],
    ['gate', 'gate-vram-preflight-webhook'],
  ])('helm install %s names its objects %s (no doubled name)', (release, name) => {
    const r = helm(which, ['template', release, CHART, '--namespace', NAMESPACE]);
    expect(r.status, r.stderr).toBe(0);
    const all = objects(r.stdout);
    // The audit's objects are the same name with -audit (templates/audit.yaml).
    const names = new Set(all.filter((o) => o.kind !== 'ConfigMap' && o.kind !== 'Secret').map((o) => (o.metadata.labels?.['app.kubernetes.io/component'] === 'audit' ? o.metadata.name.replace(/-audit$/, '') : o.metadata.name)));
    expect([...names]).toEqual([name]);
    expect(only(all, 'ClusterRole', `${name}-audit`).metadata.labels?.['app.kubernetes.io/component']).toBe('audit');
    expect(only(all, 'MutatingWebhookConfiguration').webhooks[0].clientConfig.service.name).toBe(name);
  });
});

describe.each(Object.keys(HELMS) as Helm[])('helm %s: values that pass the schema but are wrong together are refused, naming them', (which) => {
  const render = (values: string[]) => helm(which, ['template', RELEASE, CHART, '--namespace', NAMESPACE, ...values.flatMap((v) => ['--set', v])]);
  it.each([
    [['webhook.port=443'], 'webhook.port 443: the webhook runs as user 65532 with every capability dropped, and cannot listen on a port below 1024'],
    [['webhook.port=1023'], 'webhook.port 1023:'],
    [['metrics.port=80'], 'metrics.port 80: the webhook runs as user 65532'],
    [['metrics.serviceMonitor.enabled=true', 'metrics.serviceMonitor.scrapeTimeout=31s'], 'metrics.serviceMonitor.scrapeTimeout 31s is longer than metrics.serviceMonitor.interval 30s'],
    [['metrics.serviceMonitor.enabled=true', 'metrics.serviceMonitor.interval=1m', 'metrics.serviceMonitor.scrapeTimeout=1m500ms'], 'scrapeTimeout 1m500ms is longer than metrics.serviceMonitor.interval 1m'],
    [['certificates.generated.renewBeforeDays=3650'], 'certificates.generated.renewBeforeDays 3650 is not below certificates.generated.validityDays 3650'],
    [['certificates.generated.validityDays=20'], 'renewBeforeDays 30 is not below certificates.generated.validityDays 20'],
    [['certificates.certManager.enabled=true', 'certificates.certManager.renewBefore=8760h'], 'certificates.certManager.renewBefore 8760h is not shorter than certificates.certManager.duration 8760h'],
    [['certificates.certManager.enabled=true', 'certificates.certManager.duration=24h', 'certificates.certManager.renewBefore=1440m'], 'renewBefore 1440m is not shorter than certificates.certManager.duration 24h'],
  ])('refuses %j', (values, says) => {
    const r = render(values);
    expect(r.status).not.toBe(0);
    expect(r.stdout).toBe('');
    expect(r.stderr).toContain(says);
  });

  it.each([
    [['webhook.port=1024']],
    [['metrics.port=1024']],
    [['metrics.serviceMonitor.enabled=true', 'metrics.serviceMonitor.scrapeTimeout=30s']],
    [['metrics.serviceMonitor.enabled=true', 'metrics.serviceMonitor.interval=1h', 'metrics.serviceMonitor.scrapeTimeout=59m59s']],
    // Only what is used is checked: a ServiceMonitor's timings without one, the generated certificate's with cert-manager.
    [['metrics.serviceMonitor.scrapeTimeout=1h']],
    [['certificates.certManager.enabled=true', 'certificates.generated.renewBeforeDays=3650']],
    [['certificates.generated.renewBeforeDays=3649']],
    [['certificates.certManager.enabled=true', 'certificates.certManager.duration=24h', 'certificates.certManager.renewBefore=23.5h']],
  ])('takes %j', (values) => {
    const r = render(values);
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
  });

  it('takes the documented CA rotation, `--set certificates.generated.rotation=$(date +%Y%m%d)` (a number to --set), as --set-string does', () => {
    for (const how of ['--set', '--set-string']) {
      const r = helm(which, ['template', RELEASE, CHART, '--namespace', NAMESPACE, how, 'certificates.generated.rotation=20261205']);
      expect(r.stderr, how).toBe('');
      expect(r.status, how).toBe(0);
      expect(only(objects(r.stdout), 'Secret', `${FULLNAME}-ca`).metadata.annotations?.['vram-preflight.io/rotation'], how).toBe('20261205');
    }
  });
});

describe('NOTES.txt (helm v4 install --dry-run=client, which needs no cluster)', () => {
  const notes = (values: string[]) => {
    const r = helm('v4', ['install', 'vram-preflight', CHART, '--namespace', 'vram-preflight', '--dry-run=client', ...values.flatMap((v) => ['--set', v])]);
    expect(r.status, r.stderr).toBe(0);
    return r.stdout.slice(r.stdout.indexOf('\nNOTES:\n') + 8);
  };

  it('says what to label, how to check it works, how to audit, and the certificates, with the release\'s own names', () => {
    const text = notes([]);
    expect(text).toContain('installed as vram-preflight-webhook in the namespace vram-preflight');
    expect(text).toContain('kubectl label namespace NAMESPACE vram-preflight.io/inject=enabled');
    expect(text).toContain('Never sent: kube-system, kube-node-lease, vram-preflight;');
    expect(text).toContain('kubectl -n vram-preflight rollout status deployment/vram-preflight-webhook');
    expect(text).toContain('--dry-run=server');
    expect(text).toContain('It prints {"vram-preflight.io/wrapped":"vllm"}');
    expect(text).toContain('-l app.kubernetes.io/instance=vram-preflight,app.kubernetes.io/name=vram-preflight-webhook');
    expect(text).toMatch(/^ {5}vram-preflight audit$/m);
    expect(text).toContain('audit.cronJob.enabled=true runs it in the cluster');
    expect(text).toContain('Secrets vram-preflight-webhook-tls and vram-preflight-webhook-ca');
    expect(text).toContain('--set certificates.generated.rotation=');
    // The chart by the registry it is published to (Chart.yaml's annotation, which a release sets) and its version; the docs at its tag.
    const { annotations, version, appVersion } = parseYaml(readFileSync(path.join(CHART, 'Chart.yaml'), 'utf8')) as { annotations: Record<string, string>; version: string; appVersion: string };
    expect(text).toContain(`(chart ${annotations['vram-preflight.io/chart']} --version ${version})`);
    expect(text).toContain(`helm upgrade vram-preflight ${annotations['vram-preflight.io/chart']} --version ${version} -n vram-preflight --reuse-values`);
    expect(text).toContain(`https://github.com/vram-preflight/vram-preflight/blob/v${appVersion}/docs/install.md`);
    expect(text).not.toMatch(/blob\/main/);
    // The pod of the check is one the webhook wraps: admit it as the dry run would.
    const overrides = JSON.parse(/--overrides='([^']+)'/.exec(text)![1]!) as { spec: unknown };
    const pod = JSON.stringify({ apiVersion: 'v1', kind: 'Pod', metadata: { name: 'vram-preflight-check', namespace: 'ml' }, ...overrides });
    const admitted = spawnSync(process.execPath, [path.join(ROOT, 'dist/vram-preflight.cjs'), 'admit'], { input: pod, encoding: 'utf8' });
    expect(admitted.stderr).toBe('vram-preflight: Pod/vram-preflight-check: wrapped: vllm\n');
    expect(JSON.parse(admitted.stdout).metadata.annotations).toEqual({ 'vram-preflight.io/wrapped': 'vllm' });
  });

  it('follows the values: optOut and excluded namespaces, cert-manager, metrics', () => {
    const text = notes(['webhook.namespaceMode=optOut', 'webhook.excludeNamespaces={batch}', 'certificates.certManager.enabled=true', 'metrics.port=9090', 'metrics.serviceMonitor.enabled=true', 'metrics.prometheusRule.enabled=true']);
    expect(text).toContain('kubectl label namespace NAMESPACE vram-preflight.io/inject=disabled');
    expect(text).toContain('Never sent: kube-system, kube-node-lease, vram-preflight, batch;');
    expect(text).toContain('cert-manager issues and renews the serving certificate (Certificate vram-preflight-webhook-serving)');
    expect(text).not.toContain('certificates.generated.rotation');
    expect(text).toContain('the ServiceMonitor vram-preflight-webhook scrapes /metrics over HTTP on port 9090');
    expect(text).toContain('Alerts: the PrometheusRule vram-preflight-webhook');
    // The audit's CronJob, when enabled: how to run it now and read it.
    const audited = notes(['audit.cronJob.enabled=true']);
    expect(audited).toContain('the CronJob vram-preflight-webhook-audit runs it on "17 * * * *"');
    expect(audited).toContain('kubectl -n vram-preflight create job --from=cronjob/vram-preflight-webhook-audit audit-now');
  });
});

describe.each(Object.keys(HELMS) as Helm[])('helm %s: hardening', (which) => {
  const deployment = (values: string[] = []) => only(template(which, values), 'Deployment').spec.template.spec;
  const fails = (values: string[]): string => {
    const r = helm(which, ['template', RELEASE, CHART, '--namespace', NAMESPACE, ...values.flatMap((v) => ['--set', v])]);
    expect(r.status, values.join(',')).not.toBe(0);
    return r.stderr;
  };
  const settingsOf = (args: string[]) => processSettings(args.slice(1), { stdout: { write: () => true }, stderr: { write: () => true }, env: {} })!.server;

  it('the shutdown delay and the drain are flags the webhook takes, and the grace period is made of them (or refused when shorter)', () => {
    const pod = deployment();
    expect(pod.terminationGracePeriodSeconds).toBe(30);
    expect(settingsOf(pod.containers[0].args)).toMatchObject({ shutdownDelayMs: 10_000, drainTimeoutMs: 15_000 });
    const longer = deployment(['webhook.shutdownDelaySeconds=20', 'webhook.drainTimeoutSeconds=30']);
    expect(longer.terminationGracePeriodSeconds).toBe(55);
    expect(settingsOf(longer.containers[0].args)).toMatchObject({ shutdownDelayMs: 20_000, drainTimeoutMs: 30_000 });
    expect(deployment(['terminationGracePeriodSeconds=90']).terminationGracePeriodSeconds).toBe(90);
    expect(fails(['terminationGracePeriodSeconds=20'])).toContain('terminationGracePeriodSeconds 20 must be above webhook.shutdownDelaySeconds + webhook.drainTimeoutSeconds (25)');
  });

  it("Node's heap cap is 3/8 of the memory limit (any quantity's suffix), or webhook.heapMiB; a limit too small for it fails", () => {
    const heap = (values: string[]) => deployment(values).containers[0].env?.find((e: { name: string }) => e.name === 'NODE_OPTIONS')?.value;
    expect(heap([])).toBe('--max-old-space-size=144');
    expect(deployment().containers[0].resources.limits.memory).toBe('384Mi');
    expect(heap(['resources.limits.memory=1Gi'])).toBe('--max-old-space-size=384');
    expect(heap(['resources.limits.memory=512M'])).toBe('--max-old-space-size=183');
    expect(heap(['resources.limits.memory=402653184'])).toBe('--max-old-space-size=144');
    expect(heap(['webhook.heapMiB=200'])).toBe('--max-old-space-size=200');
    expect(fails(['resources.limits.memory=128Mi'])).toContain('leaves the webhook 48 MiB of heap');
  });

  it('runs at system-cluster-critical priority, as Gatekeeper, unless told otherwise', () => {
    expect(deployment().priorityClassName).toBe('system-cluster-critical');
    expect(deployment(['priorityClassName=']).priorityClassName).toBeUndefined();
  });

  it('networkPolicy: only the API server reaches the HTTPS port, only the scrapers the metrics port; without the API server named it fails instead of shutting it out', () => {
    expect(template(which).some((o) => o.kind === 'NetworkPolicy')).toBe(false);
    expect(fails(['networkPolicy.enabled=true'])).toContain('networkPolicy.apiServer must name where the API server');
    const all = template(which, ['networkPolicy.enabled=true', 'networkPolicy.apiServer[0].ipBlock.cidr=10.0.0.0/24', 'metrics.port=9090', 'networkPolicy.metricsScrapers[0].namespaceSelector.matchLabels.team=monitoring']);
    expectValid(all);
    const policy = only(all, 'NetworkPolicy');
    expect(policy.spec.podSelector.matchLabels).toEqual(only(all, 'Deployment').spec.selector.matchLabels);
    expect(policy.spec.policyTypes).toEqual(['Ingress']);
    // The audit's pods serve nothing: none may be reached.
    const audited = template(which, ['networkPolicy.enabled=true', 'networkPolicy.apiServer[0].ipBlock.cidr=10.0.0.0/24', 'audit.cronJob.enabled=true']);
    const auditPolicy = only(audited, 'NetworkPolicy', `${FULLNAME}-audit`);
    const auditPod = only(audited, 'CronJob').spec.jobTemplate.spec.template.metadata.labels as Record<string, string>;
    expect(Object.entries(auditPolicy.spec.podSelector.matchLabels).every(([k, v]) => auditPod[k] === v)).toBe(true);
    expect(auditPolicy.spec).toMatchObject({ policyTypes: ['Ingress'], ingress: [] });
    expect(all.filter((o) => o.kind === 'NetworkPolicy')).toHaveLength(1);
    expect(policy.spec.ingress).toEqual([
      { from: [{ ipBlock: { cidr: '10.0.0.0/24' } }], ports: [{ protocol: 'TCP', port: 8443 }] },
      { from: [{ namespaceSelector: { matchLabels: { team: 'monitoring' } } }], ports: [{ protocol: 'TCP', port: 9090 }] },
    ]);
    // Scrapers of the HTTPS port when there is no metrics port.
    const https = only(template(which, ['networkPolicy.enabled=true', 'networkPolicy.apiServer[0].ipBlock.cidr=10.0.0.0/24', 'networkPolicy.metricsScrapers[0].podSelector.matchLabels.app=prometheus']), 'NetworkPolicy');
    expect(https.spec.ingress[1].ports).toEqual([{ protocol: 'TCP', port: 8443 }]);
  });
});

describe.each(Object.keys(HELMS) as Helm[])('helm %s: metrics', (which) => {
  it('metrics.port: the webhook serves /metrics on it over plain HTTP (a flag it takes), the container and the Service name the port, the ServiceMonitor scrapes it', () => {
    const all = template(which, ['metrics.port=9090', 'metrics.serviceMonitor.enabled=true', 'metrics.serviceMonitor.labels.release=kube-prometheus-stack']);
    expectValid(all);
    const container = only(all, 'Deployment').spec.template.spec.containers[0];
    expect(container.ports).toContainEqual({ name: 'metrics', containerPort: 9090, protocol: 'TCP' });
    expect(container.args).toContain('--metrics-port=9090');
    // The args the chart writes are flags the webhook takes (its own parser, the one option table).
    expect(processSettings(container.args.slice(1), { stdout: { write: () => true }, stderr: { write: () => true }, env: {} })?.process.metricsPort).toBe(9090);
    expect(only(all, 'Service').spec.ports).toContainEqual({ name: 'metrics', port: 9090, targetPort: 'metrics', protocol: 'TCP' });
    const monitor = only(all, 'ServiceMonitor');
    expect(monitor.metadata.labels!.release).toBe('kube-prometheus-stack');
    expect(monitor.spec.selector.matchLabels).toEqual(only(all, 'Service').spec.selector);
    expect(monitor.spec.endpoints).toEqual([{ path: '/metrics', interval: '30s', scrapeTimeout: '10s', port: 'metrics', scheme: 'http' }]);
  });

  it("metrics.port the same as webhook.port (the webhook would refuse it at start) or service.port (two Service ports alike, which the API server refuses) fails the install, naming it", () => {
    for (const [values, says] of [
      [['metrics.port=8443'], 'metrics.port 8443 is webhook.port'],
      [['metrics.port=9443', 'webhook.port=9443'], 'metrics.port 9443 is webhook.port'],
      [['metrics.port=443'], 'metrics.port 443 is service.port'],
    ] as const) {
      const r = helm(which, ['template', RELEASE, CHART, ...values.flatMap((v) => ['--set', v])]);
      expect(r.status, values.join(',')).not.toBe(0);
      expect(r.stderr).toContain(says);
    }
  });

  it('without metrics.port the ServiceMonitor scrapes the HTTPS port, verifying against the CAs of the TLS Secret (both certificate modes)', () => {
    for (const mode of [[], ['certificates.certManager.enabled=true']]) {
      const all = template(which, ['metrics.serviceMonitor.enabled=true', ...mode]);
      expectValid(all);
      expect(only(all, 'Deployment').spec.template.spec.containers[0].args.some((a: string) => a.startsWith('--metrics-port'))).toBe(false);
      expect(only(all, 'ServiceMonitor').spec.endpoints[0]).toMatchObject({ port: 'https', scheme: 'https', tlsConfig: { serverName: `${FULLNAME}.${NAMESPACE}.svc`, ca: { secret: { name: `${FULLNAME}-tls`, key: 'ca.crt' } } } });
    }
    expect(template(which).filter((o) => o.kind === 'ServiceMonitor' || o.kind === 'PrometheusRule')).toEqual([]);
  });

  it('the PrometheusRule passes `promtool check rules`, and `promtool test rules` fires each alert on the series that should fire it, and not otherwise', () => {
    const rule = only(template(which, ['metrics.prometheusRule.enabled=true', 'metrics.prometheusRule.certificateExpiryDays=30']), 'PrometheusRule');
    expectValid([rule]);
    const dir = mkdtempSync(path.join(tmpdir(), 'chart-rules-'));
    try {
      writeFileSync(path.join(dir, 'rules.yaml'), stringifyYaml({ groups: rule.spec.groups }));
      const check = spawnSync('promtool', ['check', 'rules', path.join(dir, 'rules.yaml')], { encoding: 'utf8' });
      expect(check.stdout + check.stderr, 'promtool (Debian prometheus) is installed by scripts/test.sh').toContain('SUCCESS: 4 rules found');
      const ns = `namespace="${NAMESPACE}"`;
      const series = (name: string, labels: string, values: string) => ({ series: `${name}{${ns}${labels ? `,${labels}` : ''}}`, values });
      const annotationsOf = (alertname: string) => (rule.spec.groups[0].rules as { alert: string; annotations: Record<string, string> }[]).find((r) => r.alert === alertname)!.annotations;
      const alert = (alertname: string, at: string, fires: boolean, labels: Record<string, string>) => ({ eval_time: at, alertname, exp_alerts: fires ? [{ exp_labels: labels, exp_annotations: annotationsOf(alertname) }] : [] });
      const tests = {
        rule_files: ['rules.yaml'],
        evaluation_interval: '1m',
        tests: [
          {
            interval: '1m',
            input_series: [
              series('vram_preflight_webhook_admissions_total', 'outcome="not-wrapped",dry_run="false"', '0 0 1 1 1 1 1 1 1 1 1'),
              series('vram_preflight_webhook_config_valid', 'pod="a"', '0x10'),
              series('vram_preflight_webhook_reloads_total', 'what="config",result="error"', '0x10'),
              // Expires 10 days after the test's epoch: within 30 days.
              series('vram_preflight_webhook_certificate_expiry_timestamp_seconds', 'pod="a"', '864000x10'),
            ],
            alert_rule_test: [
              alert('VramPreflightPodNotWrapped', '5m', true, { severity: 'warning' }),
              alert('VramPreflightWebhookConfigInvalid', '3m', false, {}),
              alert('VramPreflightWebhookConfigInvalid', '8m', true, { severity: 'critical' }),
              alert('VramPreflightWebhookReloadFailed', '5m', false, {}),
              alert('VramPreflightWebhookCertificateExpiresSoon', '5m', true, { severity: 'warning' }),
            ],
          },
          {
            interval: '1m',
            input_series: [
              series('vram_preflight_webhook_admissions_total', 'outcome="not-wrapped",dry_run="false"', '0x10'),
              series('vram_preflight_webhook_admissions_total', 'outcome="not-wrapped",dry_run="true"', '0 1 2 3 4 5 6 7 8 9 10'),
              series('vram_preflight_webhook_reloads_total', 'what="certificate",result="error"', '0 0 1 1 1 1 1'),
              // A year away; and a replica that has not read its certificate yet (0) counts for nothing.
              series('vram_preflight_webhook_certificate_expiry_timestamp_seconds', 'pod="a"', '31536000x10'),
              series('vram_preflight_webhook_certificate_expiry_timestamp_seconds', 'pod="b"', '0x10'),
            ],
            alert_rule_test: [
              alert('VramPreflightPodNotWrapped', '5m', false, {}),
              alert('VramPreflightWebhookReloadFailed', '5m', true, { severity: 'warning' }),
              alert('VramPreflightWebhookCertificateExpiresSoon', '5m', false, {}),
            ],
          },
        ],
      };
      writeFileSync(path.join(dir, 'tests.yaml'), stringifyYaml(tests));
      const test = spawnSync('promtool', ['test', 'rules', path.join(dir, 'tests.yaml')], { encoding: 'utf8', cwd: dir });
      expect(test.stdout + test.stderr).toContain('SUCCESS');
      expect(test.status).toBe(0);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

const packageVersion = () => (JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { version: string }).version;

describe('the chart follows the release', () => {
  it('version and appVersion are package.json version', () => {
    const chart = parseYaml(readFileSync(path.join(CHART, 'Chart.yaml'), 'utf8')) as { version: string; appVersion: string };
    expect(chart.version).toBe(packageVersion());
    expect(chart.appVersion).toBe(packageVersion());
  });
  it('helm show readme prints the chart README, with a row for every value of values.yaml', () => {
    const readme = helm('v3', ['show', 'readme', CHART]).stdout;
    expect(readme).toMatch(/^# vram-preflight-webhook\n/);
    const leaves = (value: unknown, prefix: string): string[] =>
      value && typeof value === 'object' && !Array.isArray(value) && Object.keys(value).length > 0 && !['config', 'affinity'].includes(prefix) && !prefix.endsWith('resources.requests') && !prefix.endsWith('resources.limits') && !prefix.endsWith('labels') && !prefix.endsWith('annotations') && !prefix.endsWith('Annotations') && !prefix.endsWith('Labels') && prefix !== 'nodeSelector'
        ? Object.entries(value).flatMap(([k, v]) => leaves(v, prefix ? `${prefix}.${k}` : k))
        : [prefix];
    const values = parseYaml(readFileSync(path.join(CHART, 'values.yaml'), 'utf8')) as Record<string, unknown>;
    // A value that is an empty mapping in values.yaml (issuerRef: {}) has rows for its keys.
    for (const key of leaves(values, '')) expect(readme, key).toMatch(new RegExp(`\\| \`${key.replace(/\./g, '\\.')}(\`|\\.)`));
  });

  it('README.md: the install line verifies the chart, at its version and registry; every link to the project is at the chart\'s tag', () => {
    const readme = readFileSync(path.join(CHART, 'README.md'), 'utf8');
    const { annotations, version, appVersion } = parseYaml(readFileSync(path.join(CHART, 'Chart.yaml'), 'utf8')) as { annotations: Record<string, string>; version: string; appVersion: string };
    const install = /```sh\n(helm install [^`]*?)\n(?!\s)/.exec(readme)![1]!.replace(/\\\n\s*/g, '');
    expect(install).toContain(`helm install vram-preflight ${annotations['vram-preflight.io/chart']} --version ${version}`);
    expect(install).toContain('--verify --keyring vram-preflight-release-key.gpg');
    const links = [...readme.matchAll(/https:\/\/github\.com\/vram-preflight\/vram-preflight\/[^\s)]+/g)].map((m) => m[0]);
    expect(links.length).toBeGreaterThan(0);
    for (const link of links) expect(link).toMatch(new RegExp(`^https://github\\.com/vram-preflight/vram-preflight/blob/v${appVersion.replace(/\./g, '\\.')}/`));
  });

  it('values.schema.json embeds the current configuration schema, and README.md its values table', () => {
    const r = spawnSync(process.execPath, [path.join(ROOT, 'scripts/chart-schema.mjs'), '--check'], { encoding: 'utf8' });
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
  });
});
