/**
 * The core's one face: all that the doors (src/cli, src/webhook, src/audit, src/verify) and the edges
 * (src/config, src/registry, src/kubernetes) use of it, and the only module of the core they
 * import (test/layout.test.ts keeps it so, with two exceptions that bundles need: the
 * launcher's word test and the registry's image references). Inside the core nothing
 * imports this file: its modules import each other, each from a lower floor.
 *
 * The post-renderer and the admission webhook decide and edit with the same functions:
 * `transform` for a manifest stream, `patchObject` for one object as JSON.
 */

// Running the core: a stream, one object, registry lookups around either.
export { transform, type CandidateRule, type TransformInput, type TransformResult } from './transform.js';
export { applyPatch, patchObject, pointerSegment, type JsonPatchOperation, type PatchInput, type PatchResult } from './patch.js';
export { withLookups } from './lookups.js';
export { splitStream, type Chunk, type StreamText } from './yaml/stream.js';

// A stream read document by document as the post-renderer reads it (admit answers each
// object of a stream: a Pod or a review as the webhook does, anything else as the render).
export { candidateTest, collectDeviceClaims, kindAndNameOf, nestingTooDeep, type ReadDocument } from './transform.js';
export { parseDocuments } from './yaml/fast-parse.js';
export { MAX_NESTING, nestingDepth } from './yaml/depth.js';
export { writeYaml } from './yaml/emit.js';
export { findOperatorKind, findWorkloadKind } from './tables/workloads.js';
export { vllmImageWithoutContainers } from './decide/unrecognised.js';

// What it decided, and how a door reports it.
export { ACTION_EFFECTS, type Action, type ContainerReport } from './decide/container.js';
export { ANNOTATION_NOT_WRAPPED, ANNOTATION_SKIP, ANNOTATION_WRAPPED } from './decide/detect.js';
export { renderReport } from './report/report.js';
export { renderExplanation } from './report/explain.js';

// Image starts: the built-in table, image references, what a registry answers.
export { KNOWN_IMAGES } from './tables/images.js';
export { parseImage } from './tables/image-ref.js';
export { imageEntryFix, imageEntryYaml, type ImageEntryFix, type ImageStartAnswer, type LookupFailure, type LookupFailureKind, type RegistryAnswers } from './decide/start.js';

// DRA claims, read at the webhook's and the audit's edge.
export { claimReferences, emptyDeviceClaims, recordDeviceClaim, type DeviceClaims } from './tables/gpu.js';

// The preflight's log lines, as verify reads them from a restarted container's log.
export { LINE_FORMATS, LOG_PREFIX, readPreflightLine, type MemoryHolder, type PreflightLine, type TightestGpu } from './preflight/lines.js';

// The base: options, errors, plain values, the version.
export { DEFAULT_OPTIONS, type ImageStart, type Options, type RegistryLookupMode } from './options.js';
export { checkPreflightOptions } from './preflight/settings.js';
export { escapeControl, PreflightError, redactUserinfo, type DocumentRef, type ErrorCode } from './errors.js';
export { asObject, type Plain } from './values.js';
export { VERSION } from './version.js';
