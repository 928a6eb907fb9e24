/**
 * Registry lookups cannot be aimed (docs/webhook.md, Hardening row 7), on the built bundle: a
 * pod that names an image on a host and port of its choosing gets no
 * connection made there unless an operator allowed that registry, and what
 * its creator reads back says only "not allowed" or "lookup failed" (the
 * reason is in the webhook's log); lookups in flight are capped for the
 * whole process, however many distinct images the pods name.
 */
import net from 'node:net';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { closeServer, listen } from '../registry/harness.js';
import * as c from './child.js';
import * as h from './harness.js';

h.requireTools();

const dir = h.tempDir('registry-policy');
let file: string;
let pki: h.Pki;
const children: c.Child[] = [];
const stops: (() => Promise<void>)[] = [];

beforeAll(() => {
  file = c.bundle(dir);
  pki = h.makePki(path.join(dir, 'pki'));
}, 120_000);

afterAll(async () => {
  for (const child of children) await child.stop();
  for (const stop of stops) await stop();
  h.removeDir(dir);
});

async function start(args: string[]): Promise<c.Child> {
  const child = await c.startChild(file, pki.leaf(`webhook-${children.length}`), ['--cache-dir', path.join(dir, `cache-${children.length}`), ...args]);
  children.push(child);
  return child;
}

/** A TCP listener that never answers: the connections it got, and the most at once. */
async function target(): Promise<{ host: string; total: () => number; most: () => number }> {
  let total = 0;
  let open = 0;
  let most = 0;
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    total++;
    most = Math.max(most, ++open);
    sockets.add(socket);
    socket.on('error', () => {});
    // Closed as soon as the client's FIN arrives ('end'): 'close' comes only after this side's own end
    // is flushed, a tick later, by which time the lookup's freed slot may already have opened another.
    let counted = true;
    const gone = () => {
      if (counted) (counted = false), open--;
    };
    socket.on('end', gone);
    socket.on('close', gone);
    socket.resume();
  });
  const port = await listen(server);
  stops.push(async () => {
    for (const s of sockets) s.destroy();
    await closeServer(server);
  });
  return { host: `127.0.0.1:${port}`, total: () => total, most: () => most };
}

const podOf = (image: string) => h.vllmPod({ containers: [{ name: 'model', image, args: ['--model', 'm'], resources: { limits: { 'nvidia.com/gpu': '1' } } }] });

describe('registry lookups cannot be aimed (Hardening row 7)', () => {
  it('an image on a host and port the operator did not allow: no connection is made there, and the pod reads only that its registry is not allowed', async () => {
    const aimed = await target();
    const child = await start(['--registry-budget-ms', '1500']);
    const answers = await Promise.all([`${aimed.host}/vllm/vllm-openai:v0.12.0`, '169.254.169.254/vllm/vllm-openai:v0.12.0', 'localhost:22/vllm/vllm-openai:v0.12.0'].map((image) => h.h1(child.url, pki.caCert, { body: h.review(podOf(image)) })));
    const warnings = answers.map((a) => h.readReview(a).warnings?.[0] ?? '');
    c.figure(7, `a pod aiming at ${aimed.host}: ${aimed.total()} connections made there; the pod reads: "${warnings[0]}"`);
    expect(aimed.total()).toBe(0);
    for (const warning of warnings) expect(warning).toMatch(/its registry is not one the webhook may look up \(registryAllow in the config\)$/);
    // The fix in the annotation says why the registry was not read (not that it did not answer), and what would let the webhook ask it.
    const image = `${aimed.host}/vllm/vllm-openai:v0.12.0`;
    const note = ((h.applyPatch(podOf(image), h.readReview(answers[0]!).patch!) as h.Pod).metadata.annotations as Record<string, string>)['vram-preflight.io/not-wrapped']!;
    expect(note).toContain(`(its registry is not one lookups may ask (registryAllow in the config would let it), so read the image's ENTRYPOINT where it can be pulled (\`skopeo inspect --config docker://${image}\``);
    expect(note).not.toContain('did not answer');
  }, 30_000);

  it('an allowed registry that fails: the pod reads "the lookup failed", never how (refused, timed out, which address); the log says how', async () => {
    const silent = await target();
    const closed = await target();
    await stops.pop()!(); // nothing listens on `closed` any more
    const child = await start(['--registry-allow', silent.host, '--registry-allow', closed.host, '--registry-insecure', silent.host, '--registry-insecure', closed.host, '--registry-budget-ms', '800', '--registry-timeout-seconds', '0.5']);
    const answers = await Promise.all([silent, closed].map((t) => h.h1(child.url, pki.caCert, { body: h.review(podOf(`${t.host}/vllm/vllm-openai:v0.12.0`)) })));
    for (const answer of answers) {
      const warning = h.readReview(answer).warnings?.[0] ?? '';
      expect(warning).toMatch(/the lookup failed \(the webhook's log says why\)$/);
      expect(warning).not.toMatch(/refused|ECONN|timed? ?out|within|TLS|socket/i);
    }
    expect(silent.total()).toBeGreaterThan(0);
    await new Promise((resolve) => setTimeout(resolve, 1500));
    const logged = JSON.stringify(child.logs().filter((l) => String(l.msg).startsWith('registry lookup')));
    expect(logged).toMatch(/ECONNREFUSED|cannot connect/);
  }, 30_000);

  it('200 pods naming 200 distinct images of a registry that never answers: at most 8 lookups connect at once', async () => {
    const silent = await target();
    const child = await start(['--registry-insecure', silent.host, '--registry-budget-ms', '1000', '--registry-timeout-seconds', '1']);
    const session = h.h2session(child.url, pki.caCert);
    const answers = await Promise.all(Array.from({ length: 200 }, (_, i) => session.request({ body: h.review(podOf(`${silent.host}/vllm/vllm-openai:t${i}`)) })));
    session.close();
    c.figure(7, `200 distinct images at once: ${silent.most()} connections at once to the registry (${silent.total()} in all)`);
    for (const answer of answers) expect(h.readReview(answer).allowed).toBe(true);
    expect(silent.most()).toBeLessThanOrEqual(8);
  }, 60_000);
});
