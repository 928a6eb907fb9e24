/**
 * DRA: a pod only names its ResourceClaims and ResourceClaimTemplates; their
 * device class (is it an NVIDIA GPU?) lives in the objects. This reads one,
 * in the newest resource.k8s.io version the API server serves, and says why
 * when it cannot (RBAC, not found, no answer in time), as a value: the caller
 * decides what an unreadable claim means for the container, and how long it
 * may wait (the call's deadline and body limit are the caller's).
 */
import { KubernetesApiError, KubernetesDeadlineError, type CallOptions, type KubernetesClient } from './client.js';

/** resource.k8s.io versions, newest first: v1 (Kubernetes 1.34), v1beta2 (1.33), v1beta1 (1.32). */
export const RESOURCE_API_VERSIONS: readonly string[] = ['v1', 'v1beta2', 'v1beta1'];

export interface ClaimReference {
  kind: 'ResourceClaim' | 'ResourceClaimTemplate';
  name: string;
}

/** `timedOut`: the call's deadline passed (or the caller ended it): no answer of the API server's. */
export type ClaimRead = { object: Record<string, unknown> } | { error: string; timedOut?: true };

/** The path of a claim or template in one API version. */
export function claimPath(version: string, namespace: string, ref: ClaimReference): string {
  const plural = ref.kind === 'ResourceClaim' ? 'resourceclaims' : 'resourceclaimtemplates';
  return `/apis/resource.k8s.io/${version}/namespaces/${encodeURIComponent(namespace)}/${plural}/${encodeURIComponent(ref.name)}`;
}

/**
 * Reads one claim or template: the version that answered last is tried first
 * (`versions.preferred`, updated), then the others; 404 in every version is
 * "not found", any other error stops with its message.
 */
export async function readClaim(client: KubernetesClient, namespace: string, ref: ClaimReference, versions: { preferred: string }, call: CallOptions = {}): Promise<ClaimRead> {
  const order = [versions.preferred, ...RESOURCE_API_VERSIONS.filter((v) => v !== versions.preferred)];
  for (const version of order) {
    try {
      const object = await client.get(claimPath(version, namespace, ref), call);
      versions.preferred = version;
      // Older versions answer without kind through a list; a GET has it, but be sure.
      return { object: { ...object, kind: ref.kind } };
    } catch (error) {
      if (error instanceof KubernetesApiError && error.status === 404) continue;
      const message = `cannot read it from the Kubernetes API: ${(error as Error).message}`;
      return error instanceof KubernetesDeadlineError || call.signal?.aborted ? { error: message, timedOut: true } : { error: message };
    }
  }
  return { error: `not found in namespace ${namespace} (resource.k8s.io ${RESOURCE_API_VERSIONS.join(', ')})` };
}
