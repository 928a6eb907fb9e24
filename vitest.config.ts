import { defineConfig } from 'vitest/config';

// The tests against the real cluster (scripts/cluster.sh) share one
// kube-apiserver and one node: their webhook configurations are cluster-wide,
// so those files run one after another, after every other file (vitest runs a
// project without file parallelism last). The docs
// test installs the webhook chart as the docs do (a cluster-wide webhook
// configuration for every namespace labelled vram-preflight.io/inject=enabled).
const CLUSTER_TESTS = ['test/apiserver/**/*.test.ts', 'test/audit/**/*.test.ts', 'test/node/**/*.test.ts', 'test/docs-commands.test.ts', 'test/verify/verify.test.ts', 'test/verify/node.test.ts'];

export default defineConfig({
  test: {
    testTimeout: 20_000,
    hookTimeout: 60_000,
    projects: [
      { extends: true, test: { name: 'unit', include: ['test/**/*.test.ts'], exclude: [...CLUSTER_TESTS, '**/node_modules/**'] } },
      { extends: true, test: { name: 'cluster', include: CLUSTER_TESTS, fileParallelism: false } },
    ],
  },
});
