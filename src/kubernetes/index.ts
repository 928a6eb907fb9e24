/**
 * The Kubernetes API, for the doors that read a cluster (`vram-preflight
 * audit`; the webhook's DRA claim reads may move here): where the API is and
 * who we are (./kubeconfig.ts: kubeconfig or in-cluster), exec credential
 * plugins (./exec.ts), GET and paginated LIST (./client.ts), DRA claims
 * (./claims.ts).
 */
export { inClusterServer, loadConnection, SERVICE_ACCOUNT_DIR, type Connection, type ConnectionRequest, type ExecPlugin } from './kubeconfig.js';
export { KubernetesApiError, KubernetesClient, type ClientSettings, type RequestAuthentication } from './client.js';
export { requestJson, requestText, watchObjects, type RequestOptions, type WatchEvent } from './requests.js';
export { openWebSocket, WebSocketError, type WebSocket, type WebSocketMessage } from './websocket.js';
export { execInContainer, type ExecRequest, type ExecResult } from './pod-exec.js';
export { claimPath, readClaim, RESOURCE_API_VERSIONS, type ClaimRead, type ClaimReference } from './claims.js';
