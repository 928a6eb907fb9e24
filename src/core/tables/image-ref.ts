/**
 * Image references and release versions: parsing only, no knowledge of images.
 */

export interface ImageReference {
  /** As written in the manifest. */
  raw: string;
  registry: string;
  /** Repository path, normalised as on Docker Hub (`library/` for single names), lower case. */
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

/**
 * Why `raw` cannot be an image reference, when it holds a character none can
 * (whitespace or a control character: a block scalar or a values file often
 * leaves a line break there); the kubelet would refuse to pull it.
 */
export function imageReferenceProblem(raw: string): string | undefined {
  const found = /[\s\u0000-\u001f\u007f-\u009f]/.exec(raw);
  if (!found) return undefined;
  const char = found[0];
  const named = char === '\n' ? 'a line break' : char === '\r' ? 'a carriage return' : char === '\t' ? 'a tab' : char === ' ' ? 'a space' : `the character U+${char.charCodeAt(0).toString(16).toUpperCase().padStart(4, '0')}`;
  return `it holds ${named}, which no image reference can hold (the kubelet would refuse to pull it: InvalidImageName)`;
}

/** The tag the runtime pulls: none written means `latest`, a bare digest names no tag. */
export function effectiveTag(image: ImageReference): string | undefined {
  return image.tag ?? (image.digest === undefined ? 'latest' : undefined);
}

/**
 * `repository` as written in a table or config entry, which may name a registry
 * (`ghcr.io/llm-d/llm-d-cuda`) or not (`vllm/vllm-openai`: Docker Hub). A
 * mirror keeps the path (`harbor.corp/proxy/vllm/vllm-openai` is `vllm/vllm-openai`);
 * an entry that names a registry must match it unless it is Docker Hub's.
 */
export function repositoryMatches(image: ImageReference, repository: string): boolean {
  const wanted = parseImage(repository);
  const namesRegistry = repository.includes('/') && wanted.registry !== 'docker.io';
  if (namesRegistry) return image.registry === wanted.registry && image.repository === wanted.repository;
  return image.repository === wanted.repository || image.repository.endsWith(`/${wanted.repository}`) || (wanted.repository.startsWith('library/') && image.repository.endsWith(`/${wanted.repository.slice(8)}`));
}

/** The shortest way to write the image's repository in a config entry. */
export function repositoryForConfig(image: ImageReference): string {
  return image.registry === 'docker.io' ? image.repository.replace(/^library\//, '') : `${image.registry}/${image.repository}`;
}

/**
 * A release version, ordered as Python packages order them:
 * `0.14.1rc1` < `0.14.1` < `0.14.1.1` (a post-release).
 */
export interface Version {
  parts: readonly [number, number, number];
  /** 0: release candidate, 1: the release, 2: a post-release. */
  stage: 0 | 1 | 2;
  /** rc number or post-release number. */
  n: number;
}

const VERSION = /^v?(\d{1,6})\.(\d{1,6})\.(\d{1,6})(?:(?:\.|post)(\d{1,6})|-?rc(\d{1,6}))?$/;

export function parseVersion(text: string): Version | undefined {
  const m = VERSION.exec(text);
  if (!m) return undefined;
  const parts = [Number(m[1]), Number(m[2]), Number(m[3])] as const;
  if (m[4] !== undefined) return { parts, stage: 2, n: Number(m[4]) };
  if (m[5] !== undefined) return { parts, stage: 0, n: Number(m[5]) };
  return { parts, stage: 1, n: 0 };
}

export function compareVersions(a: Version, b: Version): number {
  for (let i = 0; i < 3; i++) {
    const d = a.parts[i]! - b.parts[i]!;
    if (d !== 0) return d;
  }
  return a.stage - b.stage || a.n - b.n;
}

export function formatVersion(v: Version): string {
  const base = `v${v.parts.join('.')}`;
  return v.stage === 0 ? `${base}rc${v.n}` : v.stage === 2 ? `${base}.${v.n}` : base;
}
