/**
 * The Kubernetes API, for the doors that read a cluster (`vram-preflight
 * audit`, `vram-preflight verify`, the webhook's DRA claim reads): where the
 * API is and who we are (./kubeconfig.ts: a kubeconfig or the pod's service
 * account, by kubectl's rules for a command and by controller-runtime's for a
 * server), exec credential plugins (./exec.ts), the client (./client.ts: GET,
 * and LIST read as it streams, ./list-stream.ts; a POST, a log as text, a
 * watch, ./watch-stream.ts, and a WebSocket, ./websocket.ts; a deadline and
 * a body limit per call), a command in a container through the exec API
 * (./pod-exec.ts), DRA claims (./claims.ts).
 */
export { inClusterServer, loadConnection, loadServerConnection, SERVICE_ACCOUNT_DIR, type Connection, type ConnectionRequest, type ExecPlugin } from './kubeconfig.js';
export { KubernetesApiError, KubernetesClient, KubernetesDeadlineError, type CallOptions, type ClientSettings, type UpgradeOptions } from './client.js';
export type { WatchEvent } from './watch-stream.js';
export { WebSocketError, type WebSocket, type WebSocketMessage } from './websocket.js';
export { execInContainer, type ExecRequest, type ExecResult } from './pod-exec.js';
export { claimPath, readClaim, RESOURCE_API_VERSIONS, type ClaimRead, type ClaimReference } from './claims.js';
