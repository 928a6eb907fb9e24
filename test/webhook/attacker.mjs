// A hostile client of the webhook, run as a process of its own so that its
// own work (encrypting hundreds of MiB, thousands of sockets) is not charged
// to the legitimate admissions the test measures at the same time.
//
//   node attacker.mjs '{"mode":"h2-bodies","port":N,"ca":"ca.crt","count":60,"bytes":3565158}'
//   node attacker.mjs '{"mode":"h1-bodies","port":N,"ca":"ca.crt","count":60,"rounds":2,"bytes":3565158}'
//   node attacker.mjs '{"mode":"idle","port":N,"ca":"ca.crt","count":3000}'
//
// "host" and "servername" (default 127.0.0.1 and localhost): where the webhook
// listens and the name its certificate is checked against (a pod's address and
// its Service's name in test/apiserver/service.test.ts).
//
// Prints one JSON line when done (the bodies' answers by status; for idle,
// how many connections were open once all were tried, then it holds them
// until it is killed).
import { readFileSync } from 'node:fs';
import http2 from 'node:http2';
import tls from 'node:tls';

const job = JSON.parse(process.argv[2]);
const ca = readFileSync(job.ca);
const host = job.host ?? '127.0.0.1';
const servername = job.servername ?? 'localhost';

/** An AdmissionReview of `bytes` bytes whose pod has many labels: what parses into the most objects per byte. */
function bigReview(bytes) {
  const labels = {};
  let size = 0;
  for (let i = 0; size < bytes - 1200; i++) {
    labels[`l${i}`] = `v${i}`;
    size += `"l${i}":"v${i}",`.length;
  }
  return JSON.stringify({
    apiVersion: 'admission.k8s.io/v1',
    kind: 'AdmissionReview',
    request: { uid: 'attacker', kind: { group: '', version: 'v1', kind: 'Pod' }, resource: { group: '', version: 'v1', resource: 'pods' }, namespace: 'x', operation: 'CREATE', object: { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'big', labels }, spec: { containers: [{ name: 'c', image: 'nginx' }] } } },
  });
}

const tally = {};
const count = (what) => (tally[what] = (tally[what] ?? 0) + 1);

if (job.mode === 'h2-bodies') {
  const body = Buffer.from(bigReview(job.bytes));
  // The client's own session memory would otherwise refuse 60 bodies queued at once (ENHANCE_YOUR_CALM from Node's client).
  const session = http2.connect(`https://${host}:${job.port}`, { ca, servername, maxSessionMemory: 1024 });
  session.on('error', () => count('session-error'));
  await Promise.all(
    Array.from({ length: job.count }, () =>
      new Promise((resolve) => {
        const stream = session.request({ ':method': 'POST', ':path': '/mutate', 'content-type': 'application/json', 'content-length': String(body.length) });
        let status = 'reset';
        stream.on('response', (headers) => (status = String(headers[':status'])));
        stream.on('data', () => {});
        stream.on('error', () => {});
        stream.on('close', () => resolve(count(status)));
        stream.end(body);
      }),
    ),
  );
  session.destroy();
  console.log(JSON.stringify(tally));
} else if (job.mode === 'h1-bodies') {
  // Each round: `count` connections, every TLS handshake done first, then a request with its whole body on each at once.
  // (Sending as each handshake completes, this process's own encryption of the bodies already sent held the later
  // handshakes past the server's deadline on a busy machine, and most bodies never reached it.)
  const body = Buffer.from(bigReview(job.bytes));
  const head = Buffer.from(`POST /mutate HTTP/1.1\r\nHost: ${servername}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n`);
  const connect = () =>
    new Promise((resolve) => {
      const socket = tls.connect({ host, port: job.port, servername, ca, ALPNProtocols: ['http/1.1'] }, () => resolve(socket));
      socket.on('error', () => resolve(undefined));
    });
  const upload = (socket) =>
    new Promise((resolve) => {
      if (!socket) return resolve(count('not-connected'));
      let got = '';
      let done = false;
      const finish = (what) => {
        if (done) return;
        done = true;
        count(what);
        socket.destroy();
        resolve();
      };
      // The status line of the answer, once its headers are in.
      socket.on('data', (d) => {
        got += d.toString('latin1');
        const status = /^HTTP\/1\.1 (\d{3}) /.exec(got);
        if (status && got.includes('\r\n\r\n')) finish(status[1]);
      });
      socket.on('error', () => finish('error'));
      socket.on('close', () => finish('closed'));
      socket.write(head);
      socket.write(body);
    });
  for (let round = 0; round < job.rounds; round++) {
    const sockets = await Promise.all(Array.from({ length: job.count }, connect));
    await Promise.all(sockets.map(upload));
  }
  console.log(JSON.stringify(tally));
} else if (job.mode === 'idle') {
  const sockets = [];
  let open = 0;
  for (let i = 0; i < job.count; i += 100) {
    await Promise.all(
      Array.from({ length: Math.min(100, job.count - i) }, () =>
        new Promise((resolve) => {
          const socket = tls.connect({ host, port: job.port, servername, ca, ALPNProtocols: ['http/1.1'] }, () => {
            open++;
            resolve();
          });
          socket.on('error', () => resolve());
          socket.on('close', () => open--);
          // Flowing, so that a close by the server is seen (a paused socket never emits 'end', and so never 'close').
          socket.resume();
          sockets.push(socket);
        }),
      ),
    );
  }
  // Let the server's closes arrive: until the count holds for 500 ms (on a busy machine they take longer), 5 s at most.
  for (let last = -1, i = 0; open !== last && i < 10; i++) {
    last = open;
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
  console.log(JSON.stringify({ tried: job.count, open }));
  await new Promise(() => {});
}
