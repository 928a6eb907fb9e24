/**
 * What the doors use of the core. The post-renderer (src/cli) and the
 * admission webhook (src/webhook) decide and edit with the same functions:
 * `transform` for a manifest stream, `patchObject` for one object as JSON.
 */
export { transform, type TransformInput, type TransformResult } from './transform.js';
export { applyPatch, jsonPointer, patchObject, pointerSegment, type JsonPatchOperation, type PatchInput, type PatchResult } from './patch.js';
export { withLookups } from './lookups.js';
export { asObject } from './values.js';
export { ACTION_EFFECTS, type Action, type ContainerReport } from './decide/container.js';
export { ANNOTATION_CONTAINERS, ANNOTATION_NOT_WRAPPED, ANNOTATION_SKIP, ANNOTATION_UTILIZATION, ANNOTATION_WRAPPED } from './decide/detect.js';
export type { ImageStartAnswer, LookupFailure, LookupFailureKind, RegistryAnswers } from './decide/start.js';
export { imageEntryFix, imageEntryYaml, type ImageEntryFix } from './decide/start.js';
export { claimReferences, emptyDeviceClaims, recordDeviceClaim, type DeviceClaims } from './tables/gpu.js';
export { DEFAULT_OPTIONS, type ImageStart, type Options, type RegistryLookupMode } from './options.js';
export { describeDocument, PreflightError, type DocumentRef, type ErrorCode } from './errors.js';
export { renderReport } from './report/report.js';
export { VERSION } from './version.js';
export { LINE_FORMATS, LOG_PREFIX, readPreflightLine, type MemoryHolder, type PreflightLine, type TightestGpu } from './preflight-lines.js';
