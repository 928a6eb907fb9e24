/**
 * Image references and release versions: parsing only, no knowledge of images.
 */
import { isAsciiDigit, isJsWhitespace } from '../char-classes.js';

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
  const at = firstSpaceOrControl(raw);
  if (at === -1) return undefined;
  const char = raw[at]!;
  const named = char === '\n' ? 'a line break' : char === '\r' ? 'a carriage return' : char === '\t' ? 'a tab' : char === ' ' ? 'a space' : `the character U+${char.charCodeAt(0).toString(16).toUpperCase().padStart(4, '0')}`;
  return `it holds ${named}, which no image reference can hold (the kubelet would refuse to pull it: InvalidImageName)`;
}

/**
 * `/[\s\u0000-\u001f\u007f-\u009f]/.exec(raw)?.index ?? -1`. A scan, not the regex: every
 * image of a render is checked, in a fresh process where a regex costs its compilation on
 * its first runs (docs/benchmarks.md).
 */
export function firstSpaceOrControl(raw: string): number {
  for (let i = 0; i < raw.length; i++) {
    const c = raw.charCodeAt(i);
    if (c <= 0x1f || (c >= 0x7f && c <= 0x9f) || isJsWhitespace(c)) return i;
  }
  return -1;
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

/**
 * `v1.2.3`, `1.2.3.4` or `1.2.3post4` (a post-release), `1.2.3rc4` or `1.2.3-rc4`: what
 * /^v?(\d{1,6})\.(\d{1,6})\.(\d{1,6})(?:(?:\.|post)(\d{1,6})|-?rc(\d{1,6}))?$/ reads,
 * read by a scan: a render reads every tag, in a fresh process where a regex costs its
 * compilation on its first runs (docs/benchmarks.md).
 */
export function parseVersion(text: string): Version | undefined {
  let at = text.startsWith('v') ? 1 : 0;
  const numbers: number[] = [];
  for (let i = 0; i < 3; i++) {
    if (i > 0) {
      if (text.charCodeAt(at) !== 0x2e) return undefined;
      at++;
    }
    const end = shortNumberEnd(text, at);
    if (end === -1) return undefined;
    numbers.push(Number(text.slice(at, end)));
    at = end;
  }
  const parts = [numbers[0]!, numbers[1]!, numbers[2]!] as const;
  if (at === text.length) return { parts, stage: 1, n: 0 };
  let stage: 0 | 2;
  if (text.charCodeAt(at) === 0x2e) [stage, at] = [2, at + 1];
  else if (text.startsWith('post', at)) [stage, at] = [2, at + 4];
  else if (text.startsWith('rc', at)) [stage, at] = [0, at + 2];
  else if (text.startsWith('-rc', at)) [stage, at] = [0, at + 3];
  else return undefined;
  const end = shortNumberEnd(text, at);
  return end === text.length ? { parts, stage, n: Number(text.slice(at, end)) } : undefined;
}

/** Where `\d{1,6}` from `at` ends when no digit follows it; -1 when it cannot. */
function shortNumberEnd(text: string, at: number): number {
  let end = at;
  while (isAsciiDigit(text.charCodeAt(end))) end++;
  return end > at && end - at <= 6 ? end : -1;
}

export function compareVersions(a: Version, b: Version): number {
  for (let i = 0; i < 3; i++) {
    const d = a.parts[i]! - b.parts[i]!;
    if (d !== 0) return d;
  }
  return a.stage - b.stage || a.n - b.n;
}

