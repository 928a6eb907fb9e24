/**
 * The chart-generated certificate across upgrades, with the real helm v3 and
 * the real API server (scripts/cluster.sh): each case puts the objects an
 * earlier install left (the CA and TLS Secrets, the webhook configuration) in
 * the cluster, and `helm install --dry-run=server` renders the upgrade with
 * its `lookup` of them, the objects validated by the API server: kept as it is; the serving
 * certificate renewed with the same CA near its expiry; the CA rotated when
 * asked or near its expiry, without a window: the new serving certificate is
 * signed by a CA the API server trusted before the upgrade (the live
 * caBundle), and the old one stays trusted by the new caBundle; a second
 * rotation within 10 minutes refused; a 0.3.0 install (one Secret, no CA
 * key) taken over with its certificate kept.
 */
import { spawnSync } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import * as k from './harness.js';

const ROOT = path.join(import.meta.dirname, '../..');
const CHART = path.join(ROOT, 'deploy/webhook');
const HELM = path.join(ROOT, '.cache/helm/v3/helm');
const RELEASE = 'gate';
// A namespace of an earlier run may still be terminating: each run has its own.
const NAMESPACE = `vram-preflight-rotation-${Date.now().toString(36)}`;
const FULLNAME = `${RELEASE}-vram-preflight-webhook`;
type K8s = { apiVersion: string; kind: string; metadata: { name: string; namespace?: string; labels?: Record<string, string>; annotations?: Record<string, string> }; [k: string]: any };

const work = mkdtempSync(path.join(tmpdir(), 'chart-rotation-'));
beforeAll(async () => {
  k.cluster();
  await k.namespace(NAMESPACE, {});
}, 40 * 60_000);
afterAll(async () => {
  k.kubectl(['delete', 'mutatingwebhookconfiguration', FULLNAME, '--ignore-not-found', '--wait=false']);
  await k.deleteNamespace(NAMESPACE);
  k.closeApi();
  rmSync(work, { recursive: true, force: true });
});

function helm(args: string[]) {
  const home = mkdtempSync(path.join(work, 'helm-'));
  return spawnSync(HELM, args, { encoding: 'utf8', env: { PATH: process.env.PATH, HOME: home, HELM_CACHE_HOME: `${home}/c`, HELM_CONFIG_HOME: `${home}/f`, HELM_DATA_HOME: `${home}/d`, KUBECONFIG: k.cluster().kubeconfig } });
}
const objects = (stream: string): K8s[] => parseAllDocuments(stream).map((d) => d.toJS() as K8s).filter((o) => o && typeof o === 'object');

interface State {
  ca: K8s;
  tls: K8s;
  hook: K8s;
}
const stateOf = (all: K8s[]): State => ({
  ca: all.find((o) => o.kind === 'Secret' && o.metadata.name === `${FULLNAME}-ca`)!,
  tls: all.find((o) => o.kind === 'Secret' && o.metadata.name === `${FULLNAME}-tls`)!,
  hook: all.find((o) => o.kind === 'MutatingWebhookConfiguration')!,
});

/** What the cluster holds after an install of `state` (Helm's ownership metadata added). */
function owned(o: K8s): K8s {
  return {
    ...o,
    metadata: {
      ...o.metadata,
      labels: { ...o.metadata.labels, 'app.kubernetes.io/managed-by': 'Helm' },
      annotations: { ...o.metadata.annotations, 'meta.helm.sh/release-name': RELEASE, 'meta.helm.sh/release-namespace': NAMESPACE },
    },
  };
}

/** `helm install --dry-run=server` against the cluster holding these objects (and only these of the release): what the upgrade would apply. */
async function upgradeOver(held: Partial<State>, values: string[] = []): Promise<{ status: number | null; stderr: string; state: State }> {
  k.kubectl(['delete', '-n', NAMESPACE, 'secret', `${FULLNAME}-ca`, `${FULLNAME}-tls`, '--ignore-not-found']);
  k.kubectl(['delete', 'mutatingwebhookconfiguration', FULLNAME, '--ignore-not-found']);
  // Objects as the cluster returns them: no server-set fields of an earlier read.
  const bare = (o: K8s): K8s => {
    const { resourceVersion, uid, creationTimestamp, managedFields, generation, ...metadata } = o.metadata as K8s['metadata'] & Record<string, unknown>;
    void resourceVersion, uid, creationTimestamp, managedFields, generation;
    return owned({ ...o, metadata: { ...metadata, ...(o.kind === 'Secret' ? { namespace: NAMESPACE } : {}) } as K8s['metadata'] });
  };
  k.applyObjects([held.ca, held.tls, held.hook].filter((o): o is K8s => o !== undefined).map(bare));
  const r = helm(['install', RELEASE, CHART, '--namespace', NAMESPACE, '--dry-run=server', ...values.flatMap((v) => ['--set', v])]);
  // helm prints the release, then MANIFEST:, then NOTES: (the chart's NOTES.txt).
  const afterManifest = r.stdout.includes('\nMANIFEST:\n') ? r.stdout.slice(r.stdout.indexOf('\nMANIFEST:\n') + 11) : '';
  const manifest = afterManifest.includes('\nNOTES:\n') ? afterManifest.slice(0, afterManifest.indexOf('\nNOTES:\n')) : afterManifest;
  return { status: r.status, stderr: r.stderr, state: stateOf(objects(manifest)) };
}

const pem = (b64: string): string => Buffer.from(b64, 'base64').toString('utf8');
const certsIn = (bundle: string): X509Certificate[] => bundle.split(/(?<=-----END CERTIFICATE-----)\n?/).filter((p) => p.includes('BEGIN CERTIFICATE')).map((p) => new X509Certificate(p));
const leafOf = (s: State) => new X509Certificate(pem(s.tls.data['tls.crt']));
const bundleOf = (s: State) => certsIn(pem(s.hook.webhooks[0].clientConfig.caBundle));
/** The leaf is trusted by a bundle: one of its CAs issued and signed it. */
const trusts = (bundle: X509Certificate[], leaf: X509Certificate) => bundle.some((ca) => leaf.checkIssued(ca) && leaf.verify(ca.publicKey));
const fingerprints = (certs: X509Certificate[]) => certs.map((c) => c.fingerprint256).sort();
const day = 24 * 60 * 60 * 1000;
const stamp = (ms: number) => new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z');
const withAnnotations = (o: K8s, annotations: Record<string, string>): K8s => ({ ...o, metadata: { ...o.metadata, annotations: { ...o.metadata.annotations, ...annotations } } });

describe('the chart-generated certificate across upgrades (helm v3, lookup against the real API server)', () => {
  let first: State;

  it('a fresh install: the current CA signs the serving certificate; caBundle trusts the current and the next CA; the CA key is in a Secret that is not mounted', () => {
    const r = helm(['template', RELEASE, CHART, '--namespace', NAMESPACE]);
    expect(r.status, r.stderr).toBe(0);
    const all = objects(r.stdout);
    first = stateOf(all);
    const current = new X509Certificate(pem(first.ca.data['ca.crt']));
    const next = new X509Certificate(pem(first.ca.data['next.crt']));
    expect(leafOf(first).checkIssued(current) && leafOf(first).verify(current.publicKey)).toBe(true);
    expect(fingerprints(bundleOf(first))).toEqual(fingerprints([current, next]));
    expect(first.tls.data['ca.crt']).toBe(first.hook.webhooks[0].clientConfig.caBundle);
    expect(first.ca.data['previous.crt']).toBeUndefined();
    // The next CA outlives the current one: promoted years later, it still has a CA's lifetime left.
    expect(Date.parse(next.validTo) - Date.parse(current.validTo)).toBeGreaterThan(3000 * day);
    const volumes = all.find((o) => o.kind === 'Deployment')!.spec.template.spec.volumes as { secret?: { secretName: string } }[];
    expect(volumes.flatMap((v) => (v.secret ? [v.secret.secretName] : []))).toEqual([`${FULLNAME}-tls`]);
  });

  it('an upgrade keeps everything as it is', async () => {
    const r = await upgradeOver(first);
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    expect(r.state.tls.data).toEqual(first.tls.data);
    expect(r.state.ca.data).toEqual(first.ca.data);
    expect(r.state.hook.webhooks[0].clientConfig.caBundle).toBe(first.hook.webhooks[0].clientConfig.caBundle);
  });

  let rotated: State;
  it('certificates.generated.rotation given at the first install: that CA is the rotation\'s, and the next upgrade with the same value keeps it', async () => {
    const r = helm(['template', RELEASE, CHART, '--namespace', NAMESPACE, '--set', 'certificates.generated.rotation=20261201']);
    expect(r.status, r.stderr).toBe(0);
    const installed = stateOf(objects(r.stdout));
    expect(installed.ca.metadata.annotations?.['vram-preflight.io/rotation']).toBe('20261201');
    const again = await upgradeOver(installed, ['certificates.generated.rotation=20261201']);
    expect(again.status, again.stderr).toBe(0);
    expect(again.state.ca.data).toEqual(installed.ca.data);
    expect(again.state.tls.data).toEqual(installed.tls.data);
  });

  it('certificates.generated.rotation changed (as the docs write it: --set certificates.generated.rotation=$(date +%Y%m%d), a number): the CA rotates with overlap, no window either way', async () => {
    const r = await upgradeOver(first, ['certificates.generated.rotation=20261205']);
    expect(r.status, r.stderr).toBe(0);
    rotated = r.state;
    // The API server, still holding the old caBundle, trusts the new serving certificate (signed by the old next CA)...
    expect(trusts(bundleOf(first), leafOf(rotated))).toBe(true);
    // ...and the new caBundle trusts the old serving certificate, which replicas serve until the kubelet brings the new pair.
    expect(trusts(bundleOf(rotated), leafOf(first))).toBe(true);
    expect(trusts(bundleOf(rotated), leafOf(rotated))).toBe(true);
    // The old next is current, the old current is previous, a new next joins.
    expect(rotated.ca.data['ca.crt']).toBe(first.ca.data['next.crt']);
    expect(rotated.ca.data['previous.crt']).toBe(first.ca.data['ca.crt']);
    expect(rotated.ca.data['next.crt']).not.toBe(first.ca.data['next.crt']);
    expect(bundleOf(rotated)).toHaveLength(3);
    expect(rotated.ca.metadata.annotations).toMatchObject({ 'vram-preflight.io/rotation': '20261205', 'vram-preflight.io/rotated-at': expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/) });
    expect(rotated.tls.data['tls.crt']).not.toBe(first.tls.data['tls.crt']);
  });

  it('the same rotation value again changes nothing; a new one within 10 minutes of the last rotation is refused', async () => {
    const same = await upgradeOver(rotated, ['certificates.generated.rotation=20261205']);
    expect(same.status, same.stderr).toBe(0);
    expect(same.state.ca.data).toEqual(rotated.ca.data);
    expect(same.state.tls.data).toEqual(rotated.tls.data);
    const again = await upgradeOver(rotated, ['certificates.generated.rotation=2026-12b']);
    expect(again.status).not.toBe(0);
    expect(again.stderr).toContain('certificates.generated: the CA was rotated at');
    expect(again.stderr).toContain('less than 10 minutes ago');
    // After 10 minutes it goes through, and the CA retired by the first rotation leaves caBundle.
    const later = await upgradeOver({ ...rotated, ca: withAnnotations(rotated.ca, { 'vram-preflight.io/rotated-at': stamp(Date.now() - 11 * 60_000) }) }, ['certificates.generated.rotation=2026-12b']);
    expect(later.status, later.stderr).toBe(0);
    expect(fingerprints(bundleOf(later.state))).not.toContain(new X509Certificate(pem(first.ca.data['ca.crt'])).fingerprint256);
    expect(trusts(bundleOf(rotated), leafOf(later.state))).toBe(true);
  });

  it('a rotation waits while the next CA is not in the live caBundle (an edited webhook configuration): this upgrade puts it there, the next one rotates', async () => {
    const onlyCurrent: K8s = { ...first.hook, webhooks: [{ ...first.hook.webhooks[0], clientConfig: { ...first.hook.webhooks[0].clientConfig, caBundle: first.ca.data['ca.crt'] } }] };
    const waiting = await upgradeOver({ ...first, hook: onlyCurrent }, ['certificates.generated.rotation=2026-12']);
    expect(waiting.status, waiting.stderr).toBe(0);
    expect(waiting.state.ca.data).toEqual(first.ca.data);
    expect(waiting.state.tls.data['tls.crt']).toBe(first.tls.data['tls.crt']);
    expect(waiting.state.ca.metadata.annotations!['vram-preflight.io/rotation']).toBe('');
    expect(fingerprints(bundleOf(waiting.state))).toEqual(fingerprints(bundleOf(first)));
    const then = await upgradeOver(waiting.state, ['certificates.generated.rotation=2026-12']);
    expect(then.state.ca.data['ca.crt']).toBe(first.ca.data['next.crt']);
  });

  it('the serving certificate within renewBeforeDays of its expiry: renewed by the same CA, caBundle unchanged', async () => {
    const near = withAnnotations(first.tls, { 'vram-preflight.io/not-after': stamp(Date.now() + 10 * day) });
    const r = await upgradeOver({ ...first, tls: near });
    expect(r.status, r.stderr).toBe(0);
    expect(r.state.tls.data['tls.crt']).not.toBe(first.tls.data['tls.crt']);
    expect(leafOf(r.state).checkIssued(new X509Certificate(pem(first.ca.data['ca.crt'])))).toBe(true);
    expect(r.state.ca.data).toEqual(first.ca.data);
    expect(r.state.hook.webhooks[0].clientConfig.caBundle).toBe(first.hook.webhooks[0].clientConfig.caBundle);
    expect(Date.parse(r.state.tls.metadata.annotations!['vram-preflight.io/not-after']!)).toBeGreaterThan(Date.now() + 3000 * day);
  });

  it('the CA within renewBeforeDays of its expiry: rotated as if asked', async () => {
    const near = withAnnotations(first.ca, { 'vram-preflight.io/ca-not-after': stamp(Date.now() + 10 * day) });
    const r = await upgradeOver({ ...first, ca: near });
    expect(r.status, r.stderr).toBe(0);
    expect(r.state.ca.data['ca.crt']).toBe(first.ca.data['next.crt']);
    expect(trusts(bundleOf(first), leafOf(r.state))).toBe(true);
    expect(trusts(bundleOf(r.state), leafOf(first))).toBe(true);
  });

  it('a 0.3.0 install (one TLS Secret, its CA without a key, in the live caBundle) is taken over: its certificate kept and still trusted', async () => {
    // 0.3.0's Secret: tls.crt, tls.key, ca.crt = the CA that signed it, no annotations of ours.
    const oldCa = new X509Certificate(pem(first.ca.data['ca.crt'])).toString();
    const old: K8s = { apiVersion: 'v1', kind: 'Secret', type: 'kubernetes.io/tls', metadata: { name: `${FULLNAME}-tls`, namespace: NAMESPACE }, data: { 'tls.crt': first.tls.data['tls.crt'], 'tls.key': first.tls.data['tls.key'], 'ca.crt': Buffer.from(oldCa).toString('base64') } };
    const hook: K8s = { ...first.hook, webhooks: [{ ...first.hook.webhooks[0], clientConfig: { ...first.hook.webhooks[0].clientConfig, caBundle: Buffer.from(oldCa).toString('base64') } }] };
    const r = await upgradeOver({ tls: old, hook });
    expect(r.status, r.stderr).toBe(0);
    expect(r.state.tls.data['tls.crt']).toBe(old.data['tls.crt']);
    expect(trusts(bundleOf(r.state), leafOf(r.state))).toBe(true);
    expect(r.state.ca.data['previous.crt']).toBe(old.data['ca.crt']);
    expect(bundleOf(r.state)).toHaveLength(3);
  });
});
