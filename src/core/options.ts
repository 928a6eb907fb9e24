/**
 * What the core is told: the options every door (CLI, Argo CD plugin,
 * webhook) hands the transform, and their defaults. Where they come from
 * (flags, environment, a config file) is src/config/sources.ts's business.
 */

/** A config `images` entry: the start of an image (`entrypoint`/`cmd`), or `like:` a built-in table row. */
export interface ImageStart {
  repository: string;
  tag?: string;
  digest?: string;
  entrypoint?: string[];
  cmd?: string[];
  like?: string;
}

export type RegistryLookupMode = 'missing' | 'never' | 'always';

export interface Options {
  timeoutSeconds: number;
  pollIntervalSeconds: number;
  logIntervalSeconds: number;
  headroomMiB: number;
  /**
   * MiB of each GPU's free memory that vLLM's own process takes before its check (its CUDA
   * context, and NCCL's buffers on a multi-GPU engine), added to what the check asks: 'auto'
   * estimates it (CONTEXT_MIB_AUTO in src/core/preflight/settings.ts), a number overrides the estimate.
   */
  contextMiB: number | 'auto';
  defaultUtilization: number;
  onNvidiaSmiUnavailable: 'warn' | 'fail';
  containerNames: string[];
  images: ImageStart[];
  diagnosticsFile?: string;
  /** Also write the JSON report (src/report.schema.json) to this file, on every run. */
  reportFile?: string;
  /** Ask an image's registry for its start: only when nothing else places it, never, or first. */
  registryLookup: RegistryLookupMode;
  /** Which image of a multi-platform index runs on the nodes. */
  registryPlatform: string;
  registryTimeoutSeconds: number;
  /** Where registry answers are cached (default: $XDG_CACHE_HOME/vram-preflight). */
  cacheDir?: string;
  /** Registries (host[:port]) reached over plain HTTP or unverified TLS; loopback always may (the CLI's lookups). */
  registryInsecure: string[];
  /** Registries (host, host:port, *.domain) the webhook may look up besides the image table's and those the config names. */
  registryAllow: string[];
  /** Extra CA certificates (PEM) trusted for registries. */
  registryCaFile?: string;
  /** Seconds one nvidia-smi query may take before the preflight counts it as unavailable (hung). */
  nvidiaSmiTimeoutSeconds: number;
  /** `off`: parse every document with the `yaml` library alone, never the fast path (src/core/yaml/fast-parse.ts). */
  fastParse: 'on' | 'off';
}

export const DEFAULT_OPTIONS: Readonly<Options> = Object.freeze({
  timeoutSeconds: 300,
  pollIntervalSeconds: 1,
  logIntervalSeconds: 10,
  headroomMiB: 0,
  contextMiB: 'auto',
  defaultUtilization: 0.9,
  onNvidiaSmiUnavailable: 'warn',
  containerNames: [],
  images: [],
  registryLookup: 'missing',
  registryPlatform: 'linux/amd64',
  registryTimeoutSeconds: 5,
  registryInsecure: [],
  registryAllow: [],
  nvidiaSmiTimeoutSeconds: 10,
  fastParse: 'on',
});
