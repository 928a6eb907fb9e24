/**
 * `npm run bench -- --only f` (or `npx tsx scripts/bench/apiserver.ts`): the
 * webhook's latency as the real kube-apiserver records it, at a steady rate
 * of pod creations, on the control plane of scripts/cluster.sh.
 *
 * Pods are created at RATE per second, alternately in a namespace the
 * webhook is called for and in one it is not (the baseline: the same API
 * server, the same pod, the same moment), PODS of each. Printed:
 * - the API server's own histogram for our webhook,
 *   apiserver_admission_webhook_admission_duration_seconds (its buckets:
 *   5, 25, 100, 500 ms, …): the share of calls in each, and p50/p99
 *   interpolated inside the bucket as Prometheus' histogram_quantile does;
 * - the client's create latency, p50/p99, with and without the webhook, and
 *   the difference (what the webhook adds to a pod's creation);
 * - the webhook's own view (its /metrics histogram of /mutate).
 * Twice: the webhook at a `url` (the API server speaks HTTP/2 to it) and,
 * on the test cluster's node, the chart installed with helm, its pods real
 * containers of the release's image, behind its Service (HTTP/1.1, through
 * the real kube-proxy: test/node/webhook-chart.ts).
 */
import { performance } from 'node:perf_hooks';
import path from 'node:path';
import * as k from '../../test/apiserver/harness.js';
import { nodeNamespace } from '../../test/node/harness.js';
import { helm, installChart, readyEndpoints, webhookImage } from '../../test/node/webhook-chart.js';

const argv = process.argv.slice(2);
const flag = (name: string, fallback: number) => {
  const i = argv.indexOf(name);
  return i === -1 ? fallback : Number(argv[i + 1]);
};
const RATE = flag('--rate', 50);
const PODS = flag('--pods', 600);
const RUN = Date.now().toString(36);

const quantile = (sorted: number[], q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
const ms = (v: number) => `${v.toFixed(2)} ms`;

/** histogram_quantile: linear inside the bucket that holds the rank. */
function histogramQuantile(buckets: { le: number; count: number }[], q: number): number {
  const total = buckets[buckets.length - 1]!.count;
  const rank = q * total;
  let prevLe = 0;
  let prevCount = 0;
  for (const b of buckets) {
    if (b.count >= rank) return b.le === Infinity ? prevLe : prevLe + ((b.le - prevLe) * (rank - prevCount)) / Math.max(1, b.count - prevCount);
    prevLe = b.le;
    prevCount = b.count;
  }
  return prevLe;
}

async function webhookBuckets(name: string): Promise<{ le: number; count: number }[]> {
  const samples = await k.apiserverMetrics();
  return samples
    .filter((s) => s.name === 'apiserver_admission_webhook_admission_duration_seconds_bucket' && s.labels.name === name && s.labels.operation === 'CREATE' && s.labels.type === 'admit')
    .map((s) => ({ le: s.labels.le === '+Inf' ? Infinity : Number(s.labels.le), count: s.value }))
    .sort((a, b) => a.le - b.le);
}

async function measure(label: string, prefix: string, webhookName: string, withWebhook: string, without: string): Promise<void> {
  const before = await webhookBuckets(webhookName);
  const times: Record<string, number[]> = { with: [], without: [] };
  const pending: Promise<void>[] = [];
  const interval = 1000 / RATE;
  const t0 = performance.now();
  for (let i = 0; i < PODS * 2; i++) {
    const which = i % 2 === 0 ? 'with' : 'without';
    const ns = which === 'with' ? withWebhook : without;
    const started = performance.now();
    pending.push(
      k.api('POST', `/api/v1/namespaces/${ns}/pods`, k.vllmPod(`${prefix}-${i}`)).then((res) => {
        if (res.status !== 201) throw new Error(`create: ${res.status} ${res.text}`);
        if (which === 'with' && !k.isWrapped(res.json().spec.containers[0])) throw new Error('a pod was not wrapped: the measurement is void');
        times[which]!.push(performance.now() - started);
      }),
    );
    const next = t0 + (i + 1) * interval;
    const wait = next - performance.now();
    if (wait > 0) await k.sleep(wait);
  }
  await Promise.all(pending);
  const after = await webhookBuckets(webhookName);
  const delta = after.map((b, i) => ({ le: b.le, count: b.count - (before[i]?.count ?? 0) }));
  const total = delta[delta.length - 1]!.count;
  const w = times.with!.sort((a, b) => a - b);
  const wo = times.without!.sort((a, b) => a - b);
  console.log(`\n-- ${label}: ${PODS} pods with the webhook, ${PODS} without, interleaved, ${RATE}/s`);
  console.log(`   API server's histogram for ${webhookName} (${total} calls): ${delta.filter((b) => b.le !== Infinity).map((b) => `<= ${b.le * 1000} ms ${((100 * b.count) / total).toFixed(1)} %`).join(', ')}`);
  console.log(`   p50 ${ms(histogramQuantile(delta, 0.5) * 1000)}, p99 ${ms(histogramQuantile(delta, 0.99) * 1000)} (interpolated in its buckets, as histogram_quantile)`);
  console.log(`   pod create, client side: with the webhook p50 ${ms(quantile(w, 0.5))} p99 ${ms(quantile(w, 0.99))}; without p50 ${ms(quantile(wo, 0.5))} p99 ${ms(quantile(wo, 0.99))}; the webhook adds p50 ${ms(quantile(w, 0.5) - quantile(wo, 0.5))}, p99 ${ms(quantile(w, 0.99) - quantile(wo, 0.99))}`);
}

async function main(): Promise<void> {
  k.cluster();
  const dir = k.tempDir('bench');
  const bundle = k.buildBundle(dir);
  const tls = k.servingPki(dir);
  const plain = await k.namespace(`vpt-bench-plain-${RUN}`, {});

  // (1) url clientConfig: loopback, HTTP/2.
  const webhook = await k.startWebhook(bundle, tls, ['--registry-lookup', 'never']);
  const ns = await k.namespace(`vpt-bench-url-${RUN}`, { 'vram-preflight.io/inject': 'enabled', 'vram-preflight.test/suite': `bench-${RUN}` });
  const mwc = k.chartWebhookConfiguration(`vpt-bench-${RUN}`, `bench-${RUN}`, webhook.url, tls.caCert, { labels: { 'vram-preflight.test/run': RUN } });
  mwc.webhooks[0].name = `bench-url.vram-preflight.io`;
  k.applyObjects([mwc]);
  await k.waitForWebhook(ns, webhook, tls.caCert);
  await measure('the webhook at a url (loopback; the API server speaks HTTP/2)', 'url', mwc.webhooks[0].name, ns, plain);
  k.kubectl(['delete', 'mutatingwebhookconfiguration', mwc.metadata.name]);
  await k.stopWebhook(webhook);

  // (2) the chart as deployed on the node, through its Service (HTTP/1.1).
  const noNode = k.cluster().env.VRAM_PREFLIGHT_NODE ? undefined : (k.cluster().env.VRAM_PREFLIGHT_NODE_ERROR ?? 'no node');
  if (!noNode) {
    const release = `vpt-bench-${RUN}`;
    webhookImage(dir);
    const releaseNs = await nodeNamespace(`vpt-bench-chart-${RUN}`);
    const chart = installChart(release, releaseNs);
    const work = await k.namespace(`vpt-bench-svc-${RUN}`, { 'vram-preflight.io/inject': 'enabled' });
    for (let i = 0; ; i++) {
      const res = await k.api('POST', `/api/v1/namespaces/${work}/pods?dryRun=All`, k.vllmPod('probe'));
      if (res.status === 201 && k.isWrapped(res.json().spec.containers[0]) && (await readyEndpoints(chart)).length === chart.replicas) break;
      if (i > 900) throw new Error(`the chart's webhook never answered through its Service (ready endpoints: ${(await readyEndpoints(chart)).join(', ')})`);
      await k.sleep(100);
    }
    await measure('the chart on the node, 2 replicas behind its Service (HTTP/1.1, through kube-proxy)', 'svc', chart.webhook, work, plain);
    helm(['uninstall', release, '--namespace', releaseNs, '--wait=false']);
    await k.deleteNamespace(releaseNs);
    await k.deleteNamespace(work);
  } else console.log(`\n-- the chart behind its Service: not measured (it runs on the test cluster's node, and there is none: ${noNode})`);

  await k.deleteNamespace(ns);
  await k.deleteNamespace(plain);
  k.closeApi();
  k.removeDir(dir);
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
