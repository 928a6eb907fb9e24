// Generates a large Helm-style manifest stream for the throughput benchmark:
// `count` documents of ~5 KiB each (10,000 -> ~50 MB), 1 % of them vLLM
// Deployments on NVIDIA GPUs (to be rewritten), 2 % Services named after a vLLM
// app (they mention "vllm" but are not workloads), the rest ConfigMaps,
// Deployments and Services with nothing to do with vLLM. Deterministic.
//
//   node scripts/bench/generate.mjs 10000 > big.yaml

const PAD = 'x'.repeat(64);

function configMap(i) {
  const lines = [];
  for (let k = 0; k < 60; k++) lines.push(`    key-${k}: "${PAD}-${i}-${k}"`);
  return `---
# Source: bench/templates/configmap-${i}.yaml
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings-${i}
  labels:
    app.kubernetes.io/instance: bench
    app.kubernetes.io/managed-by: Helm
data:
  settings.yaml: |
${lines.join('\n')}
`;
}

function service(i, app) {
  return `---
# Source: bench/templates/service-${i}.yaml
apiVersion: v1
kind: Service
metadata:
  name: ${app}-${i}
  labels:
    app.kubernetes.io/instance: bench
    app.kubernetes.io/managed-by: Helm
    app.kubernetes.io/component: ${app}
  annotations:
    description: "${PAD}${PAD}${PAD}${PAD}${PAD}${PAD}${PAD}${PAD}${PAD}${PAD}${PAD}${PAD}"
    notes: "${PAD}${PAD}${PAD}${PAD}${PAD}${PAD}${PAD}${PAD}${PAD}${PAD}${PAD}${PAD}"
spec:
  type: ClusterIP
  selector:
    app: ${app}-${i}
  ports:
${Array.from({ length: 40 }, (_, p) => `    - name: port-${p}\n      port: ${8000 + p}\n      targetPort: ${8000 + p}\n      protocol: TCP`).join('\n')}
`;
}

function deployment(i, container) {
  const env = Array.from({ length: 40 }, (_, e) => `            - name: SETTING_${e}\n              value: "${PAD}-${e}"`).join('\n');
  return `---
# Source: bench/templates/deployment-${i}.yaml
apiVersion: apps/v1
kind: Deployment
metadata:
  name: app-${i}
  labels:
    app.kubernetes.io/instance: bench
    app.kubernetes.io/managed-by: Helm
spec:
  replicas: 1
  selector:
    matchLabels:
      app: app-${i}
  template:
    metadata:
      labels:
        app: app-${i}
    spec:
      containers: 
        - name: ${container.name}
          image: ${container.image}
${container.start}
          env:
${env}
          resources:
            limits:
${container.gpu ? '              nvidia.com/gpu: 1\n' : ''}              memory: 16Gi
      volumes:
        - name: config
          configMap:
            name: settings-${i}
            defaultMode: 0644
`;
}

const VLLM = {
  name: 'model',
  image: 'vllm/vllm-openai:v0.11.0',
  start: `          command: ["vllm", "serve"]
          args:
            - Qwen/Qwen2.5-7B-Instruct
            - --gpu-memory-utilization
            - "0.9"`,
  gpu: true,
};
const WEB = { name: 'web', image: 'nginx:1.27', start: '          args: ["-g", "daemon off;"]', gpu: false };

export function generate(count) {
  const parts = [];
  for (let i = 0; i < count; i++) {
    const r = i % 100;
    if (r === 0) parts.push(deployment(i, VLLM));
    else if (r === 1 || r === 2) parts.push(service(i, 'vllm'));
    else if (r % 3 === 0) parts.push(configMap(i));
    else if (r % 3 === 1) parts.push(deployment(i, WEB));
    else parts.push(service(i, 'web'));
  }
  return parts.join('');
}

if (process.argv[1] && import.meta.url.endsWith(process.argv[1].split('/').pop())) {
  process.stdout.write(generate(Number(process.argv[2] ?? 10000)));
}
