// A fake Kubernetes API server for test/webhook/claims-limits.test.ts, in a
// process of its own (as the real one is: the storm's client shares no event
// loop with it), over HTTP/2 as the real one speaks (HTTP/1.1 too).
// ResourceClaimTemplates named hang-* are never answered, ok-* at once, any
// other 404. GET /stats answers {gets, open, mostOpen} (the most GETs open at
// once since the last /stats?reset). Prints "port N" once it listens.
//   node claims-api.mjs CERT KEY
import { readFileSync } from 'node:fs';
import http2 from 'node:http2';

const [cert, key] = process.argv.slice(2);
let gets = 0;
let open = 0;
let mostOpen = 0;
const server = http2.createSecureServer({ cert: readFileSync(cert), key: readFileSync(key), allowHTTP1: true }, (req, res) => {
  const json = (status, body) => res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
  if (req.url.startsWith('/stats')) {
    json(200, { gets, open, mostOpen });
    if (req.url.includes('reset')) mostOpen = open;
    return;
  }
  gets++;
  mostOpen = Math.max(mostOpen, ++open);
  res.on('close', () => open--);
  const name = req.url.split('/').pop();
  // Never answered: an API server stuck on these objects.
  if (name.startsWith('hang-')) return;
  if (!name.startsWith('ok-')) return json(404, { kind: 'Status', code: 404 });
  json(200, { apiVersion: 'resource.k8s.io/v1', kind: 'ResourceClaimTemplate', metadata: { name, namespace: 'models' }, spec: { spec: { devices: { requests: [{ name: 'gpu', exactly: { deviceClassName: 'gpu.nvidia.com' } }] } } } });
});
server.listen(0, '127.0.0.1', () => process.stdout.write(`port ${server.address().port}\n`));
