/**
 * What a known image runs when a container gives no `command` (ENTRYPOINT)
 * and no `args` (CMD). Adding an image, or a new start of one, is one row.
 *
 * Rows are version-aware: an image whose start changed between tags has one
 * row per start. A tag that no row can place (a custom tag, a bare digest) is
 * refused rather than guessed: a wrong start crash-loops the model.
 */

export interface TagRange {
  /** Inclusive lower bound, `major.minor.patch`. */
  from?: string;
  /** Exclusive upper bound, `major.minor.patch`. */
  below?: string;
  /** Named tags this row also covers (e.g. `latest`). */
  named?: readonly string[];
}

export interface KnownImage {
  /** Repository path without registry, as on Docker Hub (`library/` implied for single names). */
  repository: string;
  tags: TagRange;
  entrypoint: readonly string[];
  /** The image's CMD; `[]` when the image has none. */
  cmd: readonly string[];
  /** Where this was read: the Dockerfile and release it comes from. */
  evidence: string;
}

/*
 * vllm/vllm-openai switched its ENTRYPOINT from the api_server module to
 * `vllm serve` some time between January 2026 (vllm#32292 still describes the
 * module: a positional model is ignored) and v0.26.0 (`docker inspect` shows
 * ["vllm","serve"], NVIDIA-AI-IOT/jetson-ai-lab#420). The exact release could
 * not be settled from the sources we can read, so tags in between are refused:
 * name the start in `command:` or in the config file's `images`.
 */
export const KNOWN_IMAGES: readonly KnownImage[] = [
  { repository: 'vllm/vllm-openai', tags: { from: '0.26.0', named: ['latest'] }, entrypoint: ['vllm', 'serve'], cmd: [], evidence: 'vllm docker/Dockerfile target vllm-openai; docker inspect of v0.26.0 (jetson-ai-lab#420)' },
  { repository: 'vllm/vllm-openai', tags: { from: '0.1.0', below: '0.13.0' }, entrypoint: ['python3', '-m', 'vllm.entrypoints.openai.api_server'], cmd: [], evidence: 'vllm Dockerfile target vllm-openai up to at least 2026-01 (vllm#17172, vllm#25309, vllm#32292)' },
  { repository: 'lmcache/vllm-openai', tags: { from: '0.3.0', named: ['latest'] }, entrypoint: ['/opt/venv/bin/vllm', 'serve'], cmd: [], evidence: 'LMCache docker/Dockerfile (image-release stage); LMCache#898, #906' },
  { repository: 'kserve/huggingfaceserver', tags: { from: '0.13.0', named: ['latest'] }, entrypoint: ['python3', '-m', 'huggingfaceserver'], cmd: [], evidence: 'kserve python/huggingface_server.Dockerfile' },
];

export interface ImageReference {
  /** As written in the manifest. */
  raw: string;
  registry: string;
  /** Repository path, normalised as on Docker Hub. */
  repository: string;
  tag?: string;
  digest?: string;
}

export function parseImage(raw: string): ImageReference {
  let rest = raw.trim();
  let digest: string | undefined;
  const at = rest.indexOf('@');
  if (at !== -1) {
    digest = rest.slice(at + 1);
    rest = rest.slice(0, at);
  }
  let tag: string | undefined;
  const lastSlash = rest.lastIndexOf('/');
  const colon = rest.lastIndexOf(':');
  if (colon > lastSlash) {
    tag = rest.slice(colon + 1);
    rest = rest.slice(0, colon);
  }
  let registry = 'docker.io';
  const firstSlash = rest.indexOf('/');
  if (firstSlash !== -1) {
    const first = rest.slice(0, firstSlash);
    if (first.includes('.') || first.includes(':') || first === 'localhost') {
      registry = first;
      rest = rest.slice(firstSlash + 1);
    }
  }
  if (registry === 'docker.io' || registry === 'index.docker.io' || registry === 'registry-1.docker.io') {
    registry = 'docker.io';
    if (!rest.includes('/')) rest = `library/${rest}`;
  }
  return { raw, registry, repository: rest.toLowerCase(), tag, digest };
}

/** A mirror keeps the path: `harbor.corp/proxy/vllm/vllm-openai` is `vllm/vllm-openai`. */
export function repositoryMatches(image: ImageReference, repository: string): boolean {
  const want = repository.toLowerCase();
  return image.repository === want || image.repository.endsWith(`/${want}`);
}

interface Version {
  parts: [number, number, number];
  /** Anything after major.minor.patch (`rc1`, `-cu126`, ...). */
  suffix: string;
}

function parseVersion(text: string): Version | undefined {
  const match = /^v?(\d+)\.(\d+)\.(\d+)(.*)$/.exec(text);
  if (!match) return undefined;
  return { parts: [Number(match[1]), Number(match[2]), Number(match[3])], suffix: match[4] ?? '' };
}

function compare(a: readonly number[], b: readonly number[]): number {
  for (let i = 0; i < 3; i++) {
    const d = (a[i] ?? 0) - (b[i] ?? 0);
    if (d !== 0) return d;
  }
  return 0;
}

/**
 * True when the tag lies in the range. A suffixed tag of a boundary version
 * (`v0.10.0rc1`) could lie on either side of the change, so it is not placed.
 */
export function tagInRange(tag: string, range: TagRange): boolean {
  if (range.named?.includes(tag)) return true;
  const version = parseVersion(tag);
  if (!version) return false;
  const bounds = [range.from, range.below].filter((b): b is string => b !== undefined).map((b) => parseVersion(b)!.parts);
  if (version.suffix !== '' && bounds.some((b) => compare(version.parts, b) === 0)) return false;
  if (range.from !== undefined && compare(version.parts, parseVersion(range.from)!.parts) < 0) return false;
  if (range.below !== undefined && compare(version.parts, parseVersion(range.below)!.parts) >= 0) return false;
  return range.from !== undefined || range.below !== undefined;
}

export function findKnownImage(image: ImageReference): KnownImage | undefined {
  // No tag means `latest` to the container runtime; a bare digest names no tag to place.
  const tag = image.tag ?? (image.digest === undefined ? 'latest' : undefined);
  if (tag === undefined) return undefined;
  return KNOWN_IMAGES.find((row) => repositoryMatches(image, row.repository) && tagInRange(tag, row.tags));
}

export function isKnownRepository(image: ImageReference): boolean {
  return KNOWN_IMAGES.some((row) => repositoryMatches(image, row.repository));
}
