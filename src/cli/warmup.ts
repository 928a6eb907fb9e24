/**
 * What the launcher (src/cli/launcher.ts) runs once before it writes the V8 code
 * cache: the CLI, in memory, on a small render like a real one (transform
 * and explain), so that the cache holds the functions a real render compiles
 * whatever the run that writes it did (`--version` included). Nothing is read
 * from or written to the process: no stdin, stdout, stderr, environment or
 * file.
 */
import { main, type CliIO } from './main.js';

const EXAMPLE = `---
# Source: model/templates/service.yaml
apiVersion: v1
kind: Service
metadata:
  name: warm-vllm
spec:
  ports:
    - port: 8000
      targetPort: http
---
# Source: model/templates/deployment.yaml
apiVersion: apps/v1
kind: Deployment
metadata:
  name: warm-vllm
  labels:
    app.kubernetes.io/name: warm-vllm
spec:
  replicas: 1
  template:
    metadata:
      labels:
        app.kubernetes.io/name: warm-vllm
    spec:
      containers: 
        - name: model
          image: vllm/vllm-openai:v0.11.0
          command: ["vllm", "serve"]
          args:
          - /models/warm
          - --port
          - "8000"
          - --gpu-memory-utilization
          - "0.9"
          env:
          - name: HF_HOME
            value: /models
          resources:
            limits:
              nvidia.com/gpu: 1
        - name: proxy
          image: nginx:1.27
          args: ["-g", "daemon off;"]
---
# Source: model/templates/job.yaml
apiVersion: batch/v1
kind: Job
metadata:
  name: warm-vllm-seed
spec:
  template:
    spec:
      containers: 
        - name: seed
          image: busybox:1.36
          command:
            - sh
            - -c
            - echo vllm
`;

export async function warmUp(): Promise<void> {
  for (const argv of [[], ['explain']]) {
    const io: CliIO = {
      stdin: (async function* () {
        yield Buffer.from(EXAMPLE);
      })(),
      stdout: { write: () => true },
      stderr: { write: () => true },
      env: {},
      readFile: () => {
        throw new Error('no file is read while warming up');
      },
      writeFile: () => undefined,
    };
    await main(argv, io);
  }
}
