/**
 * The post-renderer is the oracle of the webhook, over the wire: every pod of
 * the corpus (the pod a controller creates from each pod template of
 * fixtures/ and the real renders, and the pods operators build in
 * fixtures/pods/) is sent to the running webhook as the API server sends it,
 * over real TLS, once over HTTP/1.1 and once over HTTP/2. Each answer is
 * allowed; its patch, applied by python3-jsonpatch, gives every container the
 * start the post-renderer gives it in the pod's own manifest; a container a
 * render already wrapped is left as it is; a container the post-renderer
 * refuses is admitted unchanged and named in the not-wrapped annotation.
 */
import https from 'node:https';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_OPTIONS } from '../../src/core/options.js';
import { applyWithJsonpatch, fixturePodCorpus, renderPod, wrappedBefore, type Plain } from '../support/doors.js';
import * as h from './harness.js';

h.requireTools();

const ROOT = path.resolve(import.meta.dirname, '../..');

/** Pods the webhook with default options can be compared on: no per-case options, no registry, no DRA objects. */
function corpus(): { name: string; pod: Plain }[] {
  const fromTemplates = fixturePodCorpus()
    .filter((c) => JSON.stringify(c.options) === JSON.stringify(DEFAULT_OPTIONS))
    .flatMap((c) => c.pods.map((pod, i) => ({ name: `${c.name}#${i}`, pod })));
  const podsDir = path.join(ROOT, 'fixtures/pods');
  const fromOperators = readdirSync(podsDir)
    .filter((f) => f.endsWith('.json') && !f.endsWith('.expected.json') && !f.endsWith('.claims.json'))
    .map((f) => ({ name: `pods/${f}`, pod: JSON.parse(readFileSync(path.join(podsDir, f), 'utf8')) as Plain }));
  return [...fromTemplates, ...fromOperators];
}

const dir = h.tempDir('corpus');
let pki: h.Pki;
let started: h.Started;
let agent: https.Agent;
let session: ReturnType<typeof h.h2session>;

beforeAll(async () => {
  pki = h.makePki(path.join(dir, 'pki'));
  const leaf = pki.leaf('webhook');
  // No registry: an image only its registry can place is admitted unchanged, as the post-renderer without one refuses it.
  started = await h.start({ certFile: leaf.cert, keyFile: leaf.key, flags: [{ flag: '--registry-lookup', value: 'never' }] });
  agent = new https.Agent({ keepAlive: true, maxSockets: 8, ca: readFileSync(pki.caCert) });
  session = h.h2session(started.url, pki.caCert);
});

afterAll(async () => {
  session?.close();
  agent?.destroy();
  await started?.webhook.drain();
  h.removeDir(dir);
});

const pods = corpus();
const options = { ...DEFAULT_OPTIONS, registryLookup: 'never' as const };

describe.each([
  ['HTTP/1.1', (body: string) => h.h1(started.url, pki.caCert, { body }, agent)],
  ['HTTP/2', (body: string) => session.request({ body })],
] as const)('the whole corpus over %s', (_protocol, send) => {
  it('every pod: allowed, and the patched containers are the post-renderer\'s', async () => {
    expect(pods.length).toBeGreaterThan(80);
    const answers = await Promise.all(pods.map(({ pod }) => send(h.review(pod)).then(h.readReview)));
    const patched = applyWithJsonpatch(pods.map(({ pod }, i) => ({ pod, patch: (answers[i]!.patch ?? []) as never[] })));
    let wrapped = 0;
    pods.forEach(({ name, pod }, i) => {
      const answer = answers[i]!;
      expect(answer.allowed, name).toBe(true);
      const before = (pod.spec as Plain).containers as Plain[];
      const after = ((patched[i] as Plain).spec as Plain).containers as Plain[];
      const { rendered, pod: oracle } = renderPod(pod, options);
      const refused = new Set(rendered.containers.filter((c) => c.action === 'error').map((c) => c.container));
      const notWrapped = String(((patched[i] as Plain).metadata as Plain | undefined)?.annotations && (((patched[i] as Plain).metadata as Plain).annotations as Plain)['vram-preflight.io/not-wrapped'] || '');
      before.forEach((container, j) => {
        const label = `${name}: container ${String(container.name)}`;
        if (wrappedBefore(container)) {
          expect(after[j], `${label} was wrapped at render time`).toEqual(container);
        } else if (oracle) {
          expect(after[j], label).toEqual(((oracle.spec as Plain).containers as Plain[])[j]);
        } else if (refused.has(String(container.name))) {
          expect(after[j], `${label} is refused by the post-renderer`).toEqual(container);
          expect(notWrapped, `${label} named in the not-wrapped annotation`).toContain(String(container.name));
        }
        if (JSON.stringify(after[j]) !== JSON.stringify(container)) wrapped++;
      });
    });
    expect(wrapped).toBeGreaterThan(40);
  });
});
