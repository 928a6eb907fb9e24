/**
 * A command in a running container through the API server's exec
 * (`/api/v1/namespaces/NS/pods/POD/exec`), over a WebSocket (./websocket.ts,
 * opened by the client with its credentials: KubernetesClient.upgrade)
 * in the channel protocol of Kubernetes' remote command: each binary message
 * starts with its channel, 1 stdout, 2 stderr, 3 the outcome as a Status
 * object (success, or the exit code: reason NonZeroExitCode). Offered:
 * `v5.channel.k8s.io` (Kubernetes 1.30 and later: the API server speaks it
 * itself and forwards to the kubelet), then `v4.channel.k8s.io` (the
 * kubelet's own, which older API servers pass through).
 *
 * RBAC: the WebSocket upgrade is a GET, so the API server asks for `get` on
 * pods/exec, and from Kubernetes 1.35 also for `create`
 * (AuthorizePodWebsocketUpgradeCreatePermission, on by default); the caller
 * checks both before it runs anything.
 */
import { asObject, type Plain } from '../core/index.js';
import type { KubernetesClient } from './client.js';
import { WebSocketError } from './websocket.js';

export const EXEC_PROTOCOLS = ['v5.channel.k8s.io', 'v4.channel.k8s.io'] as const;

const CHANNEL = { stdout: 1, stderr: 2, error: 3 } as const;

/** What each output channel keeps, at most. */
const OUTPUT_LIMIT = 64 << 10;

export interface ExecResult {
  /** The subprotocol the API server picked. */
  protocol: string;
  stdout: string;
  stderr: string;
  /** The Status on the error channel; absent when the connection ended without one (the container stopped under the command). */
  status?: Plain;
  /** 0 on Success, the code of NonZeroExitCode; absent when the Status says neither. */
  exitCode?: number;
}

export interface ExecRequest {
  namespace: string;
  pod: string;
  container: string;
  command: readonly string[];
  /** Epoch ms by which the command must be over (the connection is cut then). */
  deadline: number;
}

/** The exec's path and query, as kubectl exec sends it (stdin and tty off). */
export function execPath(r: Pick<ExecRequest, 'namespace' | 'pod' | 'container' | 'command'>): string {
  const query = new URLSearchParams();
  for (const word of r.command) query.append('command', word);
  query.set('container', r.container);
  query.set('stdout', 'true');
  query.set('stderr', 'true');
  return `/api/v1/namespaces/${encodeURIComponent(r.namespace)}/pods/${encodeURIComponent(r.pod)}/exec?${query}`;
}

function exitCodeOf(status: Plain): number | undefined {
  if (status.status === 'Success') return 0;
  if (status.reason !== 'NonZeroExitCode') return undefined;
  const causes = Array.isArray(asObject(status.details)?.causes) ? (asObject(status.details)!.causes as unknown[]) : [];
  const code = causes.map(asObject).find((c) => c?.reason === 'ExitCode')?.message;
  return typeof code === 'string' && /^\d+$/.test(code) ? Number(code) : undefined;
}

/** Runs the command; a handshake the API server refuses is a KubernetesApiError with its Status message. */
export async function execInContainer(client: KubernetesClient, r: ExecRequest): Promise<ExecResult> {
  const socket = await client.upgrade(execPath(r), { protocols: EXEC_PROTOCOLS, deadline: r.deadline, maxMessageBytes: 1 << 20 });
  const timer = setTimeout(() => socket.destroy(), Math.max(0, r.deadline - Date.now()));
  const out = { stdout: '', stderr: '' };
  let status: Plain | undefined;
  try {
    for await (const message of socket.messages) {
      if (message.data.length === 0) continue;
      const channel = message.data[0];
      const data = message.data.subarray(1).toString('utf8');
      if (channel === CHANNEL.stdout && out.stdout.length < OUTPUT_LIMIT) out.stdout += data.slice(0, OUTPUT_LIMIT - out.stdout.length);
      else if (channel === CHANNEL.stderr && out.stderr.length < OUTPUT_LIMIT) out.stderr += data.slice(0, OUTPUT_LIMIT - out.stderr.length);
      else if (channel === CHANNEL.error && data.trim() !== '') {
        try {
          status = asObject(JSON.parse(data));
        } catch {
          status = { status: 'Failure', message: data.slice(0, 1000) };
        }
      }
    }
  } catch (error) {
    // The container stopping under the command (its PID 1 was the target) may cut the connection: the outcome is then unknown, not an error.
    if (!(error instanceof WebSocketError)) throw error;
  } finally {
    clearTimeout(timer);
    socket.close();
  }
  const exitCode = status ? exitCodeOf(status) : undefined;
  return { protocol: socket.protocol, ...out, ...(status && { status }), ...(exitCode !== undefined && { exitCode }) };
}
