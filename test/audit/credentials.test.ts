/**
 * How `vram-preflight audit` finds and authenticates to the API server, each
 * way against the real one (scripts/cluster.sh): kubeconfig client
 * certificates (files and data), tokens (inline and tokenFile), exec
 * credential plugins (client.authentication.k8s.io/v1, as EKS and GKE use;
 * real processes), impersonation, contexts, KUBECONFIG lists, ~/.kube/config,
 * TLS settings; and the clear refusals: auth-provider, basic auth, a plugin
 * that fails, a CA that does not match, insecure-skip-tls-verify with a CA
 * (as kubectl refuses it), a kubeconfig that holds nothing; never a password
 * of a URL or a credential a plugin printed in what it says.
 */
import { spawnSync } from 'node:child_process';
import { chmodSync, copyFileSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { auditEvents, bundle, cluster, kubectl, kubectlOk, namespace, removeTempDirs, runBundle, tempDir, waitFor, type Cluster } from './harness.js';

type Run = ReturnType<typeof runBundle>;

const id = `${process.pid.toString(36)}${Date.now().toString(36).slice(-5)}`;
const NS = `audit-${id}-cred`;
const ROLE = `vram-preflight-audit-cred-${id}`;

let c: Cluster;
let file = '';
let token = '';
let pki = '';

type User = Record<string, unknown>;
type ClusterEntry = Record<string, unknown>;

/** A kubeconfig in its own directory (relative paths are read from there); returns its path. */
function kubeconfig(dir: string, contexts: { name: string; cluster: ClusterEntry; user: User }[], current?: string, name = 'config'): string {
  const file = path.join(dir, name);
  writeFileSync(
    file,
    stringify({
      apiVersion: 'v1',
      kind: 'Config',
      clusters: contexts.map((x) => ({ name: x.name, cluster: x.cluster })),
      users: contexts.map((x) => ({ name: x.name, user: x.user })),
      contexts: contexts.map((x) => ({ name: x.name, context: { cluster: x.name, user: x.name } })),
      ...(current !== undefined && { 'current-context': current }),
    }),
  );
  return file;
}

/** The cluster's CA and admin key pair copied into `dir`, for kubeconfigs that name files. */
function copyPki(dir: string): void {
  for (const f of ['ca.crt', 'admin.crt', 'admin.key']) copyFileSync(path.join(pki, f), path.join(dir, f));
}

const b64 = (file: string): string => readFileSync(file).toString('base64');
const server = (): ClusterEntry => ({ server: c.api, 'certificate-authority-data': b64(path.join(pki, 'ca.crt')) });

function audit(args: readonly string[], env: Record<string, string>): Run {
  return runBundle(file, ['audit', '--registry-lookup=never', '--namespace', NS, '--webhook-configuration', `absent-${id}`, ...args], { HOME: tempDir('home'), ...env });
}

/** The audit read the namespace: its one wrapped pod is protected. */
function expectAudited(run: Run): void {
  expect(run.stderr).toBe('');
  expect(run.status).toBe(0);
  expect(run.stdout).toContain('1 pods; 1 containers run vLLM on an NVIDIA GPU: 1 protected, 0 not protected');
}

function expectRefused(run: Run, message: string): void {
  expect(run.status).toBe(1);
  expect(run.stdout).toBe('');
  expect(run.stderr).toContain(message);
}

/** An executable sh script in `dir`. */
function script(dir: string, name: string, body: string): string {
  const file = path.join(dir, name);
  writeFileSync(file, `#!/bin/sh\n${body}\n`);
  chmodSync(file, 0o755);
  return file;
}

beforeAll(async () => {
  c = cluster();
  file = bundle();
  pki = path.join(c.dir, 'pki');
  await namespace(NS, {});
  const pod = { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'model', namespace: NS }, spec: { containers: [{ name: 'model', image: 'vllm/vllm-openai:v0.10.1', args: ['--model', 'm'], resources: { limits: { 'nvidia.com/gpu': '1' } } }] } };
  const wrapped = runBundle(file, [], { HOME: tempDir('render') }, stringify(pod));
  expect(wrapped.status, wrapped.stderr).toBe(0);
  kubectlOk(['create', '-f', '-'], { input: wrapped.stdout });
  // A service account that may do what the audit does in this namespace.
  kubectlOk(['-n', NS, 'create', 'serviceaccount', 'reader']);
  kubectlOk(['apply', '-f', '-'], { input: [
    stringify({ apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'ClusterRole', metadata: { name: ROLE, labels: { 'vram-preflight-audit-test': id } }, rules: [{ apiGroups: [''], resources: ['pods'], verbs: ['list'] }, { apiGroups: [''], resources: ['namespaces'], verbs: ['get'] }, { apiGroups: ['admissionregistration.k8s.io'], resources: ['mutatingwebhookconfigurations'], verbs: ['get'] }] }),
    stringify({ apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'ClusterRoleBinding', metadata: { name: ROLE, labels: { 'vram-preflight-audit-test': id } }, roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: ROLE }, subjects: [{ kind: 'ServiceAccount', name: 'reader', namespace: NS }] }),
  ].join('---\n') });
  token = kubectlOk(['-n', NS, 'create', 'token', 'reader', '--duration=1h']).trim();
  // RBAC reaches the authorizer's cache within moments.
  await waitFor('the role binding to take effect', () => kubectl(['auth', 'can-i', 'list', 'pods', '-n', NS, `--as=system:serviceaccount:${NS}:reader`]).stdout.trim() === 'yes');
}, 600_000);

afterAll(() => {
  if (c) {
    kubectl(['delete', 'namespace', NS, '--wait=false', '--ignore-not-found']);
    kubectl(['delete', 'clusterrole,clusterrolebinding', '-l', `vram-preflight-audit-test=${id}`, '--ignore-not-found']);
  }
  removeTempDirs();
});

describe('kubeconfig', () => {
  it('client certificate and key as files, the CA as a file, relative to the kubeconfig', () => {
    const dir = tempDir('files');
    copyPki(dir);
    const config = kubeconfig(dir, [{ name: 'test', cluster: { server: c.api, 'certificate-authority': 'ca.crt' }, user: { 'client-certificate': 'admin.crt', 'client-key': 'admin.key' } }], 'test');
    const run = audit(['--kubeconfig', config], {});
    expectAudited(run);
    expect(run.stdout.split('\n')[0]).toContain(`(kubeconfig ${config}, context "test")`);
  });

  it('a bearer token inline, and from a tokenFile read for each request; a token the API server refuses says so', () => {
    const dir = tempDir('token');
    expectAudited(audit(['--kubeconfig', kubeconfig(dir, [{ name: 't', cluster: server(), user: { token } }], 't')], {}));
    writeFileSync(path.join(dir, 'token'), `${token}\n`);
    const config = kubeconfig(dir, [{ name: 't', cluster: server(), user: { tokenFile: 'token' } }], 't', 'file-config');
    expectAudited(audit(['--kubeconfig', config], {}));
    writeFileSync(path.join(dir, 'token'), 'not-a-token');
    const refused = audit(['--kubeconfig', config], {});
    expectRefused(refused, 'error KUBERNETES_API: cannot get MutatingWebhookConfiguration');
    expect(refused.stderr).toContain('HTTP 401 Unauthorized');
    expect(refused.stderr).toContain('fix: the credentials were not accepted');
  });

  it('impersonation (as): the API server answers as the impersonated identity', () => {
    const dir = tempDir('as');
    const run = audit(['--kubeconfig', kubeconfig(dir, [{ name: 'a', cluster: server(), user: { 'client-certificate-data': b64(path.join(pki, 'admin.crt')), 'client-key-data': b64(path.join(pki, 'admin.key')), as: `system:serviceaccount:${NS}:nobody` } }], 'a')], {});
    expectRefused(run, `User "system:serviceaccount:${NS}:nobody" cannot get resource "mutatingwebhookconfigurations"`);
  });

  it('--context picks a context other than the current one; an unknown one names those there are', () => {
    const dir = tempDir('contexts');
    const config = kubeconfig(dir, [
      { name: 'broken', cluster: { server: 'https://127.0.0.1:1', 'certificate-authority-data': b64(path.join(pki, 'ca.crt')) }, user: { token } },
      { name: 'good', cluster: server(), user: { token } },
    ], 'broken');
    expectRefused(audit(['--kubeconfig', config], {}), 'error KUBERNETES_API: cannot reach the Kubernetes API at https://127.0.0.1:1 (kubeconfig');
    expect(audit(['--kubeconfig', config], {}).stderr).toContain('ECONNREFUSED nothing listens there');
    expectAudited(audit(['--kubeconfig', config, '--context', 'good'], {}));
    expectRefused(audit(['--kubeconfig', config, '--context', 'nope'], {}), `error KUBECONFIG: kubeconfig ${config} has no context "nope"\n  fix: use one of: broken, good`);
  });

  it('KUBECONFIG: a list of files merged as kubectl merges them (missing files skipped); ~/.kube/config without it', () => {
    const dir = tempDir('merge');
    // The first file sets the current context and defines nothing; the second holds the context, cluster and user.
    writeFileSync(path.join(dir, 'first'), stringify({ apiVersion: 'v1', kind: 'Config', 'current-context': 'good' }));
    kubeconfig(dir, [{ name: 'good', cluster: server(), user: { token } }, { name: 'other', cluster: { server: 'https://127.0.0.1:1' }, user: {} }], 'other', 'second');
    expectAudited(audit([], { KUBECONFIG: [path.join(dir, 'absent'), path.join(dir, 'first'), path.join(dir, 'second')].join(':') }));
    const home = tempDir('home-kube');
    mkdirSync(path.join(home, '.kube'));
    kubeconfig(path.join(home, '.kube'), [{ name: 'h', cluster: server(), user: { token } }], 'h');
    const run = audit([], { HOME: home });
    expectAudited(run);
    expect(run.stdout.split('\n')[0]).toContain(`(kubeconfig ${home}/.kube/config, context "h")`);
    expectRefused(audit([], {}), 'error KUBECONFIG: no kubeconfig (no --kubeconfig, no KUBECONFIG, no ~/.kube/config) and not in a pod (no KUBERNETES_SERVICE_HOST)');
  });

  it('TLS: a CA that did not sign the server is refused with the reason; tls-server-name and insecure-skip-tls-verify are honoured', () => {
    const dir = tempDir('tls');
    const other = path.join(dir, 'other-ca.crt');
    const ca = spawnSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '1', '-subj', '/CN=other', '-keyout', path.join(dir, 'other.key'), '-out', other]);
    expect(ca.status).toBe(0);
    const wrong = audit(['--kubeconfig', kubeconfig(dir, [{ name: 'w', cluster: { server: c.api, 'certificate-authority': other }, user: { token } }], 'w')], {});
    expectRefused(wrong, "the server's certificate is not signed by a trusted CA: give the cluster's CA (certificate-authority-data)");
    expectAudited(audit(['--kubeconfig', kubeconfig(dir, [{ name: 'n', cluster: { ...server(), 'tls-server-name': 'kubernetes.default.svc' }, user: { token } }], 'n', 'named')], {}));
    expectRefused(audit(['--kubeconfig', kubeconfig(dir, [{ name: 'n', cluster: { ...server(), 'tls-server-name': 'elsewhere.example' }, user: { token } }], 'n', 'misnamed')], {}), "ERR_TLS_CERT_ALTNAME_INVALID the server's certificate is not for this host name");
    expectAudited(audit(['--kubeconfig', kubeconfig(dir, [{ name: 'i', cluster: { server: c.api, 'insecure-skip-tls-verify': true }, user: { token } }], 'i', 'insecure')], {}));
  });

  it('insecure-skip-tls-verify together with a CA is refused before any connection, as kubectl refuses it: the token never goes to a server nobody verified', () => {
    const dir = tempDir('insecure-ca');
    const ca = spawnSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '1', '-subj', '/CN=other', '-keyout', path.join(dir, 'other.key'), '-out', path.join(dir, 'other.crt')]);
    expect(ca.status).toBe(0);
    const before = auditEvents().end;
    for (const [name, entry] of [['file', { 'certificate-authority': path.join(dir, 'other.crt') }], ['data', { 'certificate-authority-data': b64(path.join(dir, 'other.crt')) }]] as const) {
      const run = audit(['--kubeconfig', kubeconfig(dir, [{ name: 'x', cluster: { server: c.api, 'insecure-skip-tls-verify': true, ...entry }, user: { token } }], 'x', `config-${name}`)], {});
      expectRefused(run, 'error KUBECONFIG: cluster "x" sets insecure-skip-tls-verify together with a certificate-authority, which kubectl refuses too ("specifying a root certificates file with the insecure flag is not allowed")');
      expect(run.stderr).toContain('fix: remove insecure-skip-tls-verify, so that the CA verifies the server');
    }
    // No request of the audit reached the API server.
    expect(auditEvents(before).events.filter((e) => e.userAgent === 'vram-preflight-audit')).toEqual([]);
  });

  it('a password in a URL (proxy-url, a server that is not https or not a URL) is never printed: user:xxxxx, as kubectl redacts it', () => {
    const dir = tempDir('redact');
    const cases: [string, ClusterEntry, string][] = [
      ['proxy', { ...server(), 'proxy-url': 'http://admin:S3CRET-proxy@proxy.example:3128' }, 'is reached through proxy-url http://admin:xxxxx@proxy.example:3128'],
      ['http', { server: 'http://user:S3CRET-http@127.0.0.1:9' }, 'server http://user:xxxxx@127.0.0.1:9 is not https'],
      ['bad', { server: 'https://user:S3CRET-bad@127.0.0.1:9:9' }, 'server "https://user:xxxxx@127.0.0.1:9:9" is not a URL'],
      ['token-only', { server: 'http://S3CRET-tokenlike@127.0.0.1:9' }, 'server http://xxxxx@127.0.0.1:9 is not https'],
    ];
    for (const [name, cluster, said] of cases) {
      const run = audit(['--kubeconfig', kubeconfig(dir, [{ name: 'r', cluster, user: { token } }], 'r', name)], {});
      expectRefused(run, said);
      expect(`${run.stdout}${run.stderr}`).not.toContain('S3CRET');
    }
  });

  it('KUBECONFIG=/dev/null: said as a kubeconfig that holds nothing (not "none of the files exists"); in a pod it means in-cluster, as for kubectl', () => {
    const run = audit([], { KUBECONFIG: '/dev/null' });
    expectRefused(run, 'error KUBECONFIG: KUBECONFIG names no usable kubeconfig: /dev/null holds no kubeconfig (empty); and not in a pod (no KUBERNETES_SERVICE_HOST)');
    expect(run.stderr).not.toContain('none of the files');
    expect(audit([], { KUBECONFIG: `/nonexistent-${id}` }).stderr).toContain(`/nonexistent-${id} does not exist`);
    // In a pod: the service account, as client-go's deferred loading does (here its token is not mounted, which is what it says).
    const pod = audit([], { KUBECONFIG: '/dev/null', KUBERNETES_SERVICE_HOST: '127.0.0.1', KUBERNETES_SERVICE_PORT: new URL(c.api).port });
    expectRefused(pod, "error KUBECONFIG: cannot read the service account's CA /var/run/secrets/kubernetes.io/serviceaccount/ca.crt");
  });

  it('refuses what it cannot do, by name: an auth-provider, basic auth, proxy-url', () => {
    const dir = tempDir('refusals');
    const gke = audit(['--kubeconfig', kubeconfig(dir, [{ name: 'g', cluster: server(), user: { 'auth-provider': { name: 'gcp', config: { 'cmd-path': 'gcloud' } } } }], 'g', 'gke')], {});
    expectRefused(gke, 'error KUBECONFIG: user "g" authenticates with the auth-provider "gcp", which kubectl itself no longer supports (removed in Kubernetes 1.26)');
    expect(gke.stderr).toContain('fix: use its exec credential plugin: gke-gcloud-auth-plugin for GKE');
    expectRefused(audit(['--kubeconfig', kubeconfig(dir, [{ name: 'o', cluster: server(), user: { 'auth-provider': { name: 'oidc', config: { 'idp-issuer-url': 'https://issuer.example' } } } }], 'o', 'oidc')], {}), 'error KUBECONFIG: user "o" authenticates with the auth-provider "oidc", which vram-preflight audit does not support (it runs exec credential plugins only)');
    expectRefused(audit(['--kubeconfig', kubeconfig(dir, [{ name: 'b', cluster: server(), user: { username: 'u', password: 'p' } }], 'b', 'basic')], {}), 'authenticates with a username and password (basic auth)');
    expectRefused(audit(['--kubeconfig', kubeconfig(dir, [{ name: 'p', cluster: { ...server(), 'proxy-url': 'http://proxy:3128' }, user: { token } }], 'p', 'proxied')], {}), 'is reached through proxy-url http://proxy:3128, which vram-preflight does not support');
  });
});

describe('exec credential plugins (client.authentication.k8s.io/v1)', () => {
  const credential = (status: Record<string, unknown>, apiVersion = 'client.authentication.k8s.io/v1') => JSON.stringify({ apiVersion, kind: 'ExecCredential', status });

  it('runs the plugin with KUBERNETES_EXEC_INFO (not interactive, the cluster when asked) and its env, and uses the token it prints', () => {
    const dir = tempDir('exec');
    writeFileSync(path.join(dir, 'credential.json'), credential({ token, expirationTimestamp: '2099-01-01T00:00:00Z' }));
    // A relative command with a slash is found next to the kubeconfig, as kubectl does.
    script(dir, 'plugin.sh', 'printf "%s" "$KUBERNETES_EXEC_INFO" > "$(dirname "$0")/exec-info.json"\nprintf "%s" "$PLUGIN_GREETING" > "$(dirname "$0")/env.txt"\ncat "$(dirname "$0")/credential.json"');
    const config = kubeconfig(dir, [{
      name: 'eks',
      cluster: { ...server(), extensions: [{ name: 'client.authentication.k8s.io/exec', extension: { audience: 'test' } }] },
      user: { exec: { apiVersion: 'client.authentication.k8s.io/v1', command: './plugin.sh', args: [], env: [{ name: 'PLUGIN_GREETING', value: 'hello' }], interactiveMode: 'Never', provideClusterInfo: true } },
    }], 'eks');
    expectAudited(audit(['--kubeconfig', config], {}));
    const info = JSON.parse(readFileSync(path.join(dir, 'exec-info.json'), 'utf8'));
    expect(info).toEqual({
      apiVersion: 'client.authentication.k8s.io/v1',
      kind: 'ExecCredential',
      spec: { interactive: false, cluster: { server: c.api, 'certificate-authority-data': b64(path.join(pki, 'ca.crt')), config: { audience: 'test' } } },
    });
    expect(readFileSync(path.join(dir, 'env.txt'), 'utf8')).toBe('hello');
  });

  it('a client certificate from the plugin; v1beta1 too', () => {
    const dir = tempDir('exec-cert');
    writeFileSync(path.join(dir, 'credential.json'), credential({ clientCertificateData: readFileSync(path.join(pki, 'admin.crt'), 'utf8'), clientKeyData: readFileSync(path.join(pki, 'admin.key'), 'utf8') }, 'client.authentication.k8s.io/v1beta1'));
    const plugin = script(dir, 'plugin.sh', 'cat "$(dirname "$0")/credential.json"');
    expectAudited(audit(['--kubeconfig', kubeconfig(dir, [{ name: 'x', cluster: server(), user: { exec: { apiVersion: 'client.authentication.k8s.io/v1beta1', command: plugin } } }], 'x')], {}));
  });

  it('a token the API server refuses (401): the plugin runs once more, as client-go does', () => {
    const dir = tempDir('exec-retry');
    // First run: a stale token; later runs: the good one.
    const plugin = script(dir, 'plugin.sh', `d=$(dirname "$0")\nif [ -f "$d/ran" ]; then t='${token}'; else t=stale; touch "$d/ran"; fi\necho "run" >> "$d/runs"\nprintf '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"%s"}}' "$t"`);
    expectAudited(audit(['--kubeconfig', kubeconfig(dir, [{ name: 'x', cluster: server(), user: { exec: { apiVersion: 'client.authentication.k8s.io/v1', command: plugin, interactiveMode: 'IfAvailable' } } }], 'x')], {}));
    expect(readFileSync(path.join(dir, 'runs'), 'utf8')).toBe('run\nrun\n');
  });

  it('a plugin that fails, is missing, speaks v1alpha1 or wants a terminal: a clear error', () => {
    const dir = tempDir('exec-fail');
    const failing = script(dir, 'login.sh', 'echo "error: the SSO session has expired; run aws sso login" >&2\nexit 255');
    const exec = (extra: Record<string, unknown>) => ({ exec: { apiVersion: 'client.authentication.k8s.io/v1', interactiveMode: 'Never', command: failing, ...extra } });
    let n = 0;
    const run = (user: User) => audit(['--kubeconfig', kubeconfig(dir, [{ name: 'x', cluster: server(), user }], 'x', `config-${++n}`)], {});
    expectRefused(run(exec({})), `error KUBECONFIG: exec credential plugin ${failing}: it exited 255: error: the SSO session has expired; run aws sso login`);
    // What a failing plugin says is kept, cut, and without the credentials it may echo (its own env's values, tokens, a URL's password).
    const leaky = script(dir, 'leaky.sh', `i=0; while [ $i -lt 50 ]; do echo "retrying $i" >&2; i=$((i+1)); done\necho "POST https://sso:S3CRET-url@login.example/token with client_secret=S3CRET-secret failed, Authorization: Bearer S3CRET-bearer-0123456789, token eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl" >&2\necho "key in env: $PLUGIN_KEY; $(head -c 3000 /dev/zero | tr '\\0' x)" >&2\nexit 1`);
    const said = run({ exec: { apiVersion: 'client.authentication.k8s.io/v1', interactiveMode: 'Never', command: leaky, env: [{ name: 'PLUGIN_KEY', value: 'S3CRET-env-value' }] } });
    expectRefused(said, `exec credential plugin ${leaky}: it exited 1: `);
    expect(said.stderr).not.toMatch(/S3CRET|eyJhbGci/);
    expect(said.stderr).toContain('https://sso:xxxxx@login.example/token');
    expect(said.stderr).toContain('client_secret=[redacted]');
    expect(said.stderr).toContain('key in env: [redacted]');
    expect(said.stderr.split('\n')[0]!.length).toBeLessThan(700);
    expectRefused(run(exec({ command: 'aws-iam-authenticator-absent', installHint: 'install aws-iam-authenticator: https://example.invalid/install' })), 'exec credential plugin aws-iam-authenticator-absent: cannot run it (ENOENT)\n  fix: install aws-iam-authenticator: https://example.invalid/install');
    expectRefused(run(exec({ apiVersion: 'client.authentication.k8s.io/v1alpha1' })), 'the exec credential plugin\'s apiVersion is "client.authentication.k8s.io/v1alpha1"');
    expectRefused(run(exec({ interactiveMode: 'Always' })), 'it asks for a terminal (interactiveMode: Always), which the audit never gives it');
    expectRefused(run(exec({ interactiveMode: undefined })), 'the exec credential plugin\'s interactiveMode is undefined');
  });
});
