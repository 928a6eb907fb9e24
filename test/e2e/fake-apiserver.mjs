// A read-only stand-in for a Kubernetes API server: just enough discovery for
// `helm install --dry-run=client` of Helm 3.17, which (unlike Helm 4) still
// checks that a cluster is reachable and maps kinds through discovery. It
// answers /version, /api, /apis and the resource lists of the groups the
// test chart uses; every other path (the GETs Helm makes to look for
// existing objects) is 404, i.e. "nothing installed yet". It writes nothing.
//
// With a JSON file as argument ({"/api/v1/namespaces/NS/secrets/NAME": {...}}),
// it also answers those paths with those objects, as Helm's `lookup` reads
// them in `--dry-run=server`; a list of a namespaced resource is then an empty
// list (Helm's release history: "no release yet").
//
// Run as a child process (helm runs through spawnSync, which would block an
// in-process server): prints `listening <port>` on stdout; stop it with SIGTERM.
import { readFileSync } from 'node:fs';
import http from 'node:http';

const objects = process.argv[2] ? JSON.parse(readFileSync(process.argv[2], 'utf8')) : undefined;

const resource = (name, kind, namespaced = true) => ({
  name,
  singularName: kind.toLowerCase(),
  namespaced,
  kind,
  verbs: ['create', 'delete', 'get', 'list', 'patch', 'update', 'watch'],
});
const groups = {
  'apps/v1': [resource('deployments', 'Deployment'), resource('statefulsets', 'StatefulSet'), resource('daemonsets', 'DaemonSet')],
  'batch/v1': [resource('jobs', 'Job'), resource('cronjobs', 'CronJob')],
  'policy/v1': [resource('poddisruptionbudgets', 'PodDisruptionBudget')],
  'rbac.authorization.k8s.io/v1': [resource('clusterroles', 'ClusterRole', false), resource('clusterrolebindings', 'ClusterRoleBinding', false)],
  'admissionregistration.k8s.io/v1': [resource('mutatingwebhookconfigurations', 'MutatingWebhookConfiguration', false)],
  'cert-manager.io/v1': [resource('certificates', 'Certificate'), resource('issuers', 'Issuer')],
};
const core = [
  resource('configmaps', 'ConfigMap'),
  resource('serviceaccounts', 'ServiceAccount'),
  resource('services', 'Service'),
  resource('secrets', 'Secret'),
  resource('pods', 'Pod'),
  resource('persistentvolumeclaims', 'PersistentVolumeClaim'),
  resource('namespaces', 'Namespace', false),
];

function answer(url) {
  const p = url.split('?')[0];
  if (p === '/version') return { major: '1', minor: '31', gitVersion: 'v1.31.0', platform: 'linux/amd64' };
  if (p === '/api') return { kind: 'APIVersions', versions: ['v1'], serverAddressByClientCIDRs: [] };
  if (p === '/api/v1') return { kind: 'APIResourceList', groupVersion: 'v1', resources: core };
  if (p === '/apis') {
    return {
      kind: 'APIGroupList',
      apiVersion: 'v1',
      groups: Object.keys(groups).map((gv) => ({
        name: gv.split('/')[0],
        versions: [{ groupVersion: gv, version: gv.split('/')[1] }],
        preferredVersion: { groupVersion: gv, version: gv.split('/')[1] },
      })),
    };
  }
  const gv = p.startsWith('/apis/') ? p.slice(6) : '';
  if (groups[gv]) return { kind: 'APIResourceList', apiVersion: 'v1', groupVersion: gv, resources: groups[gv] };
  if (objects) {
    if (objects[p]) return objects[p];
    const list = /^\/api\/v1\/namespaces\/[^/]+\/([a-z]+)$/.exec(p);
    const listed = list && core.find((r) => r.name === list[1]);
    if (listed) return { kind: `${listed.kind}List`, apiVersion: 'v1', metadata: {}, items: [] };
  }
  return undefined;
}

const server = http.createServer((req, res) => {
  const body = req.method === 'GET' ? answer(req.url ?? '/') : undefined;
  res.writeHead(body ? 200 : req.method === 'GET' ? 404 : 405, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body ?? { kind: 'Status', apiVersion: 'v1', status: 'Failure', reason: 'NotFound', code: 404 }));
});
server.listen(0, '127.0.0.1', () => {
  process.stdout.write(`listening ${server.address().port}\n`);
});
process.on('SIGTERM', () => server.close(() => process.exit(0)));
