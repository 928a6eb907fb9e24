/** Strings only the webhook's code holds; the build refuses an application that contains one. */
export const WEBHOOK_ONLY_MARKERS: readonly string[];
/** The same for the audit and its Kubernetes client. */
export const AUDIT_ONLY_MARKERS: readonly string[];
