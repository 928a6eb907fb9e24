/**
 * The webhook's pure-ish parts on their own: the image-start cache's lifetimes
 * and bound (clock given), the annotation ops on every shape of metadata, the
 * Prometheus text, the file watch's poll (the path a Secret volume's
 * symlink swap takes when no inotify event comes), and the patch's base64
 * written in pieces.
 */
import { execFileSync } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import * as h from './harness.js';
import { annotationOps, NOT_WRAPPED_LIMIT, notWrappedAnnotation, notWrappedWarnings, shortReason, WARNING_LIMIT, type RefusedContainer } from '../../src/webhook/admission.js';
import { imageEntryFix } from '../../src/core/index.js';
import { expiryNotice, renewalFix } from '../../src/webhook/certificate-expiry.js';
import { pointerSegment } from '../../src/core/index.js';
import { ImageStartCache, DEFAULT_CACHE_SETTINGS, type Answer } from '../../src/webhook/image-starts.js';
import { webhookMetrics } from '../../src/webhook/metrics.js';
import { base64Json } from '../../src/webhook/patch-encoding.js';
import { watchFiles } from '../../src/webhook/watch.js';
import type { RegistryOptions } from '../../src/registry/index.js';
import { registryAllowed } from '../../src/registry/allow.js';
import { DEFAULT_OPTIONS, type Options } from '../../src/core/index.js';
import { registryPolicy } from '../../src/registry/options.js';

const registryOptions: RegistryOptions = { platform: 'linux/amd64', requestTimeoutMs: 100, totalTimeoutMs: 100, env: {} };
const answer = (image: string): Answer => ({ image, entrypoint: ['vllm', 'serve'], cmd: [], digest: 'sha256:00', platform: 'linux/amd64', source: 'registry', checkedAt: '2026-12-04T00:00:00Z' });

describe('image-start cache', () => {
  it('keeps a tag 10 min, a digest 24 h, a failure 30 s, and at most maxEntries images', async () => {
    let now = 0;
    const asked: string[] = [];
    const cache = new ImageStartCache({ ...DEFAULT_CACHE_SETTINGS, maxEntries: 3 }, webhookMetrics(), async (images) => {
      asked.push(...images);
      return new Map(images.map((i) => [i, i.startsWith('bad') ? { image: i, error: 'HTTP 500' } : answer(i)]));
    }, () => now);
    const tag = 'r/vllm:v1';
    const digest = 'r/vllm@sha256:' + 'a'.repeat(64);
    await cache.answers([tag, digest, 'bad/x:1'], registryOptions);
    expect(asked).toEqual([tag, digest, 'bad/x:1']);
    now += 29_000;
    await cache.answers([tag, digest, 'bad/x:1'], registryOptions);
    expect(asked).toHaveLength(3);
    now += 2000; // the failure is 31 s old
    await cache.answers(['bad/x:1'], registryOptions);
    expect(asked).toHaveLength(4);
    now += 10 * 60_000; // the tag is 10.5 min old
    await cache.answers([tag, digest], registryOptions);
    expect(asked.slice(4)).toEqual([tag]);
    // A fourth image pushes out the oldest entry (the digest, stored first); the failure has expired meanwhile; the tag and the new one are kept.
    await cache.answers(['r/other:v1'], registryOptions);
    await cache.answers([digest, 'bad/x:1', tag, 'r/other:v1'], registryOptions);
    expect(asked.slice(5)).toEqual(['r/other:v1', digest, 'bad/x:1']);
  });
});

describe('the registries the webhook may look up (docs/webhook.md, Hardening row 7)', () => {
  const may = (registry: string, options: Partial<Options> = {}) => registryAllowed(registry, registryPolicy({ ...DEFAULT_OPTIONS, ...options }));

  it('by default: those of the built-in image table, at public addresses only; none a pod names', () => {
    for (const registry of ['docker.io', 'ghcr.io', 'nvcr.io']) expect(may(registry), registry).toEqual({ allowed: true, privateAddresses: false });
    for (const registry of ['registry.example.com', 'quay.io', '127.0.0.1:5000', 'localhost:22', '169.254.169.254', 'kubernetes.default.svc:443']) expect(may(registry).allowed, registry).toBe(false);
  });

  it("the config's mirrors (images, registryInsecure) and registryAllow's hosts are allowed, private addresses too; a *.domain only at public addresses; the table's registries stay public-only", () => {
    const options: Partial<Options> = {
      images: [{ repository: 'mirror.corp.example:5000/vllm/vllm-openai', like: 'vllm/vllm-openai' }],
      registryInsecure: ['registry.models.svc:5000'],
      registryAllow: ['harbor.internal', '*.corp.example', 'docker.io'],
    };
    expect(may('mirror.corp.example:5000', options)).toEqual({ allowed: true, privateAddresses: true });
    expect(may('registry.models.svc:5000', options)).toEqual({ allowed: true, privateAddresses: true });
    expect(may('harbor.internal', options)).toEqual({ allowed: true, privateAddresses: true });
    expect(may('cache.corp.example', options)).toEqual({ allowed: true, privateAddresses: false });
    expect(may('docker.io', options)).toEqual({ allowed: true, privateAddresses: false });
    // Another port of an allowed host is another service.
    expect(may('harbor.internal:8443', options).allowed).toBe(false);
  });
});

describe('annotation ops', () => {
  const values = { 'vram-preflight.io/wrapped': 'model' };
  it('creates metadata.annotations where the pod has none, never metadata itself; adds a key beside others; nothing for a value already there', () => {
    // No metadata object (absent, null, a string): no op, never one that replaces metadata (docs/webhook.md, What it does to a pod).
    for (const metadata of [undefined, null, 'x', 3, ['a']]) expect(annotationOps(metadata === undefined ? {} : { metadata }, values)).toEqual([]);
    expect(annotationOps({ metadata: { name: 'p' } }, values)).toEqual([{ op: 'add', path: '/metadata/annotations', value: values }]);
    expect(annotationOps({ metadata: { annotations: null } }, values)).toEqual([{ op: 'add', path: '/metadata/annotations', value: values }]);
    expect(annotationOps({ metadata: { annotations: { a: 'b' } } }, values)).toEqual([{ op: 'add', path: '/metadata/annotations/vram-preflight.io~1wrapped', value: 'model' }]);
    expect(annotationOps({ metadata: { annotations: { ...values } } }, values)).toEqual([]);
  });

  it('escapes JSON Pointer tokens (RFC 6901) and shortens reasons to one line', () => {
    expect(pointerSegment('a/b~c')).toBe('a~1b~0c');
    expect(shortReason('first line\nsecond')).toBe('first line');
    expect(shortReason('x'.repeat(300), 20)).toBe(`${'x'.repeat(19)}…`);
  });
});

describe('metrics', () => {
  it('renders counters, gauges and histograms in the text format, label values escaped', () => {
    const m = webhookMetrics();
    m.requests.inc({ route: '/mutate', code: '200' });
    m.requests.inc({ route: 'a"b\\c', code: '404' });
    m.latency.observe(0.003);
    m.latency.observe(7);
    const text = m.render();
    expect(text).toContain('vram_preflight_webhook_http_requests_total{route="/mutate",code="200"} 1');
    expect(text).toContain('vram_preflight_webhook_http_requests_total{route="a\\"b\\\\c",code="404"} 1');
    expect(text).toContain('vram_preflight_webhook_admission_duration_seconds_bucket{le="0.0025"} 0');
    expect(text).toContain('vram_preflight_webhook_admission_duration_seconds_bucket{le="0.005"} 1');
    expect(text).toContain('vram_preflight_webhook_admission_duration_seconds_bucket{le="+Inf"} 2');
    expect(text).toContain('vram_preflight_webhook_admission_duration_seconds_count 2');
    expect(text).toContain('vram_preflight_webhook_admissions_total{outcome="not-wrapped",dry_run="false"} 0');
    expect(text.endsWith('\n')).toBe(true);
  });
});

describe('file watch', () => {
  it('a change is noticed by the poll alone (here the directory does not exist yet, so there is no watch)', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'vram-preflight-watch-'));
    try {
      const file = path.join(dir, 'config.yaml');
      writeFileSync(file, 'a: 1\n');
      let changes = 0;
      // A path whose directory does not exist yet cannot be watched: only the poll sees it appear.
      const late = path.join(dir, 'later', 'x.yaml');
      const watch = watchFiles([late], () => changes++, 100);
      const { mkdirSync } = await import('node:fs');
      mkdirSync(path.dirname(late));
      writeFileSync(late, 'b: 2\n');
      const until = Date.now() + 10_000;
      while (changes === 0 && Date.now() < until) await new Promise((r) => setTimeout(r, 50));
      watch.close();
      expect(changes).toBe(1);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('the patch, base64 in pieces', () => {
  // A seeded generator (mulberry32): the same cases every run.
  const random = (seed: number) => () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const alphabet = ['a', 'Z', '0', ' ', '\n', '"', '\\', '\u00e9', '\u20ac', '\ud83d\ude80', '\u0000', '/', '~', '$'];
  const text = (next: () => number, length: number): string => Array.from({ length }, () => alphabet[Math.floor(next() * alphabet.length)]).join('');

  it('decodes to the same JSON value as JSON.stringify, whatever the strings (multi-byte, escapes, long or short)', () => {
    const next = random(19);
    for (let round = 0; round < 300; round++) {
      const script = text(next, Math.floor(next() * 3000));
      const ops = [
        { op: 'add', path: `/spec/containers/${round % 3}/command`, value: ['/bin/sh', '-ec'] },
        { op: 'add', path: '/spec/containers/0/args', value: [script, '--', text(next, Math.floor(next() * 20)), script] },
        ...(next() < 0.5 ? [{ op: 'remove', path: '/spec/containers/1/args' }] : []),
        { op: 'add', path: '/metadata/annotations', value: { 'vram-preflight.io/wrapped': text(next, 5), n: 1.5, t: true, z: null } },
      ];
      const pieces = base64Json(ops);
      pieces.slice(0, -1).forEach((piece) => expect(piece.length % 4, 'every piece but the last is whole base64 groups').toBe(0));
      const decoded = Buffer.from(pieces.join(''), 'base64').toString('utf8');
      expect(JSON.parse(decoded)).toEqual(ops);
      // The same text as JSON.stringify's, with spaces added (padding) and nothing else.
      const expected = JSON.stringify(ops);
      let at = 0;
      let added = 0;
      for (const char of expected) {
        while (!decoded.startsWith(char, at) && decoded[at] === ' ') (at++, added++);
        // expect() only on a mismatch: one per character made this test ~20 s, past its timeout on a busy machine.
        if (!decoded.startsWith(char, at)) expect(decoded.slice(at, at + char.length), `at ${at}`).toBe(char);
        at += char.length;
      }
      expect(decoded.slice(at).trim()).toBe('');
      expect(added + decoded.length - at).toBeLessThanOrEqual(2 * pieces.length);
    }
  });

  it('gives the same bytes for the same patch, from the cache or not', () => {
    const ops = [{ op: 'add', path: '/spec/containers/0/args', value: ['x'.repeat(2000), '--', 'vllm'] }];
    const first = base64Json(ops).join('');
    expect(base64Json(ops).join('')).toBe(first);
    expect(base64Json(JSON.parse(JSON.stringify(ops))).join('')).toBe(first);
  });
});

describe('the not-wrapped answer stays within the API server\'s limits', () => {
  // 40 refused containers with long names, long reasons and control characters in both.
  const refused: RefusedContainer[] = Array.from({ length: 40 }, (_, i) => ({
    container: `c${i}-${'n'.repeat(50)}\u001b[2J`,
    reason: `the lookup failed: registry.example.com: ${'x'.repeat(400)}\r\nsecond line`,
    fix: { entry: imageEntryFix(`registry.example.com/ml/${'r'.repeat(40)}:v1`, i % 2 === 0, true) },
  }));

  it('warnings: one line each, at most 256 characters, under 4096 in all, and the last says how many more', () => {
    const warnings = notWrappedWarnings(refused);
    for (const w of warnings) {
      expect(w.length).toBeLessThanOrEqual(WARNING_LIMIT);
      // A control character makes the API server drop the warning whole.
      expect(w).not.toMatch(/[\u0000-\u001f\u007f-\u009f]/);
    }
    expect(warnings.reduce((n, w) => n + w.length, 0)).toBeLessThanOrEqual(4096);
    expect(warnings.at(-1)).toMatch(/^vram-preflight: \d+ more container\(s\) not wrapped: see the annotation vram-preflight\.io\/not-wrapped$/);
    expect(warnings[1]).toMatch(/^vram-preflight: to wrap "c0-n+\\x1b\[2J": add to the chart's config\.images: \{repository: registry\.example\.com\/ml\/r+, tag: "v1", entrypoint: \[\.\.\.\]\}$/);
    // A container without args needs the CMD too.
    expect(warnings[3]).toMatch(/entrypoint: \[\.\.\.\], cmd: \[\.\.\.\]\}$/);
  });

  it('annotation: at most NOT_WRAPPED_LIMIT characters, no control characters but its own line breaks, the rest named', () => {
    const note = notWrappedAnnotation(refused);
    expect(note.length).toBeLessThanOrEqual(NOT_WRAPPED_LIMIT);
    expect(note).not.toMatch(/[\u0000-\u0009\u000b-\u001f\u007f-\u009f]/);
    expect(note).toMatch(/\n\.\.\. and \d+ more container\(s\): see the webhook's log$/);
    // Whole blocks only: the first container's reason, fix and YAML entry are all there.
    expect(note).toContain('  fix: add this entry to config.images in the webhook chart\'s values (the registry did not answer from here, so read the image\'s ENTRYPOINT and CMD where it can be pulled');
    expect(note).toContain(`        - repository: registry.example.com/ml/${'r'.repeat(40)}\n          tag: "v1"\n          entrypoint: [...]`);
  });

  it('one refused container keeps its whole reason up to 300 characters and its fix', () => {
    const one = notWrappedAnnotation([{ container: 'model', reason: 'short reason', fix: { text: 'give the container a command' } }]);
    expect(one).toBe('model: short reason\n  fix: give the container a command');
  });
});

describe('certificate expiry notice', () => {
  const day = 24 * 60 * 60 * 1000;
  const now = Date.parse('2026-12-04T00:00:00Z');
  it('nothing outside the window; warn inside it, with the whole days left; error once passed', () => {
    expect(expiryNotice(now + 31 * day, now, 30)).toBeUndefined();
    expect(expiryNotice(now + 30 * day, now, 30)).toEqual({ level: 'warn', msg: 'certificate expires in 30 day(s)', daysLeft: 30 });
    expect(expiryNotice(now + day / 2, now, 30)).toEqual({ level: 'warn', msg: 'certificate expires in less than a day (12 h)', daysLeft: 0 });
    expect(expiryNotice(now - 1, now, 30)).toMatchObject({ level: 'error', msg: expect.stringMatching(/^certificate has expired/) });
  });

  it("the fix says how to renew the certificate at hand: a self-signed one (made by hand) by writing a new pair over the files; one a CA signed (the chart's, cert-manager's) the way each renews", () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'expiry-'));
    try {
      const pki = h.makePki(path.join(dir, 'pki'));
      const signed = new X509Certificate(readFileSync(pki.leaf('webhook').cert));
      execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '1', '-subj', '/CN=localhost', '-keyout', path.join(dir, 'tls.key'), '-out', path.join(dir, 'tls.crt')], { stdio: 'pipe' });
      const byHand = new X509Certificate(readFileSync(path.join(dir, 'tls.crt')));
      expect(renewalFix(byHand)).toMatch(/^renew it: a self-signed certificate \(made by hand, e\.g\. with openssl\) is renewed by writing a new certificate and key over the files/);
      expect(renewalFix(signed)).toMatch(/^renew it: with cert-manager it renews by itself .* with the chart-generated certificate, helm upgrade renews it/);
      // The CA itself is self-signed too: a certificate file that holds a CA is one of your own.
      expect(renewalFix(new X509Certificate(readFileSync(pki.caCert)))).toContain('self-signed');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
