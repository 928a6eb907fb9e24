/**
 * What known images run when a container gives no `command` (their
 * ENTRYPOINT) and no `args` (their CMD). Adding an image, or a new start of
 * one, is one row. Every row carries its evidence; `explain` and
 * docs/detection.md show it. Sources: shared notes "image-starts-evidence".
 *
 * A tag no row places (a custom or model tag, a nightly without a date, a
 * digest, the releases where the evidence does not settle the start) is not
 * guessed: a wrong start crash-loops the model. The registry lookup, a config
 * entry or an explicit `command:` places it instead.
 */
import { compareVersions, effectiveTag, parseVersion, repositoryMatches, type ImageReference, type Version } from './image-ref.js';
import { isAsciiDigit } from '../char-classes.js';

/** How the tags of one repository read. */
export type TagGrammar = 'vllm' | 'lmcache' | 'kserve' | 'plain';

export interface ParsedTag {
  version?: Version;
  /** `nightly-YYYY-MM-DD`. */
  date?: string;
  /** A named tag without its variant suffixes (`latest`, `latest-nightly`, `nightly`, `glm5`). */
  name?: string;
  /** A variant that changes the start (KServe's `-gpu`); '' for none. */
  variant: string;
}

/** Suffixes that name the same release built for another architecture, CUDA or base OS. */
// `s`: a tag is any text here (one with a line break is refused elsewhere, by the container that holds it).
const VLLM_SUFFIXES = /^(.*?)(-(?:x86_64|aarch64|arm64))?(-cu\d{3})?(-ubuntu\d{4})?$/s;
const NIGHTLY_DATE = /^nightly-(\d{4}-\d{2}-\d{2})$/;

export function parseTag(tag: string, grammar: TagGrammar): ParsedTag {
  let base = tag;
  let variant = '';
  if (grammar === 'vllm') base = VLLM_SUFFIXES.exec(tag)![1]!;
  else if (grammar === 'lmcache') base = withoutCudaSuffix(tag);
  else if (grammar === 'kserve' && tag.endsWith('-gpu')) {
    base = tag.slice(0, -4);
    variant = 'gpu';
  }
  const version = parseVersion(base);
  if (version) return { version, variant };
  const date = grammar === 'lmcache' ? NIGHTLY_DATE.exec(base)?.[1] : undefined;
  if (date) return { date, variant };
  return { name: base, variant };
}

/**
 * `/^(.*?)(-cu\d{3})?$/s.exec(tag)[1]`: the tag without a final `-cuNNN`. A test of the
 * end, not the regex: a render reads every tag, in a fresh process where a regex costs its
 * compilation on its first runs (docs/benchmarks.md).
 */
export function withoutCudaSuffix(tag: string): string {
  const at = tag.length - '-cuNNN'.length;
  const isCuda = at >= 0 && tag.startsWith('-cu', at) && isAsciiDigit(tag.charCodeAt(at + 3)) && isAsciiDigit(tag.charCodeAt(at + 4)) && isAsciiDigit(tag.charCodeAt(at + 5));
  return isCuda ? tag.slice(0, at) : tag;
}

export interface TagRule {
  /** Inclusive bounds (`0.14.1`; an rc sorts before its release, `.N` after). */
  from?: string;
  through?: string;
  /** Exclusive upper bound. */
  below?: string;
  /** Named tags (variant suffixes stripped). */
  named?: readonly string[];
  /** Inclusive bounds on `nightly-YYYY-MM-DD`. */
  datesFrom?: string;
  datesThrough?: string;
  /** Only tags of this variant ('' = no variant suffix). */
  variant?: string;
}

export interface KnownImage {
  /** Repository path as on Docker Hub, or with its registry (`ghcr.io/llm-d/llm-d-cuda`). */
  repository: string;
  grammar: TagGrammar;
  tags: TagRule;
  entrypoint: readonly string[];
  /** The image's CMD; `[]` when it has none. */
  cmd: readonly string[];
  /** Proven: a Dockerfile at a commit or a quoted `docker inspect`; inferred: indirect evidence, named. */
  confidence: 'proven' | 'inferred';
  evidence: string;
  /** The primary public source, for explain and docs. */
  link: string;
}

/** Tag ranges the evidence leaves open, per repository, for the refusal message. */
export interface UnplacedRange {
  repository: string;
  tags: TagRule;
  why: string;
}

const API_SERVER = ['python3', '-m', 'vllm.entrypoints.openai.api_server'];

export const KNOWN_IMAGES: readonly KnownImage[] = [
  { repository: 'vllm/vllm-openai', grammar: 'vllm', tags: { through: '0.11.0' }, entrypoint: API_SERVER, cmd: [], confidence: 'proven', evidence: 'vllm docker/Dockerfile @0000977e (target vllm-openai, no CMD); vllm#17172, vllm#25309; v0.11.0 image: vllm#27389', link: 'https://github.com/vllm-project/vllm/issues/17172' },
  { repository: 'vllm/vllm-openai', grammar: 'vllm', tags: { from: '0.14.1', named: ['latest'] }, entrypoint: ['vllm', 'serve'], cmd: [], confidence: 'proven', evidence: 'docker inspect of v0.26.0 (Entrypoint ["vllm","serve"], Cmd null): NVIDIA-AI-IOT/jetson-ai-lab#420; v0.17.1: vllm#37133; v0.20.1: vllm#42399; v0.14.1: vllm-project/recipes 13874d7a', link: 'https://github.com/NVIDIA-AI-IOT/jetson-ai-lab/pull/420' },
  { repository: 'lmcache/vllm-openai', grammar: 'lmcache', tags: { from: '0.3.0', named: ['latest', 'latest-nightly'], datesFrom: '2025-06-16' }, entrypoint: ['/opt/venv/bin/vllm', 'serve'], cmd: [], confidence: 'inferred', evidence: 'LMCache docker/Dockerfile @ab6cf272 (image-build, image-release); production-stack#514 (2025-06-16: new nightly entrypoint); LMCache#898; unchanged in LMCache#3275 (2026-05)', link: 'https://github.com/vllm-project/production-stack/pull/514' },
  { repository: 'kserve/huggingfaceserver', grammar: 'kserve', tags: { from: '0.15.0', named: ['latest'], variant: 'gpu' }, entrypoint: ['python3', '-m', 'huggingfaceserver'], cmd: [], confidence: 'proven', evidence: 'kserve python/huggingface_server.Dockerfile, every revision since kserve#3334 (GPU image, -gpu tags since kserve#4049)', link: 'https://github.com/kserve/kserve/blob/master/python/huggingface_server.Dockerfile' },
  { repository: 'kserve/huggingfaceserver', grammar: 'kserve', tags: { from: '0.15.0', named: ['latest'], variant: '' }, entrypoint: ['python', '-m', 'huggingfaceserver'], cmd: [], confidence: 'proven', evidence: 'kserve python/huggingface_server_cpu.Dockerfile, every revision (CPU image, unsuffixed tags since v0.15.0)', link: 'https://github.com/kserve/kserve/blob/master/python/huggingface_server_cpu.Dockerfile' },
  { repository: 'kserve/huggingfaceserver', grammar: 'kserve', tags: { from: '0.12.0', below: '0.15.0', variant: '' }, entrypoint: ['python3', '-m', 'huggingfaceserver'], cmd: [], confidence: 'proven', evidence: 'kserve python/huggingface_server.Dockerfile since kserve#3334 (2024-01; the unsuffixed tag was the GPU image before v0.15.0)', link: 'https://github.com/kserve/kserve/pull/3334' },
  { repository: 'ghcr.io/llm-d/llm-d', grammar: 'plain', tags: { below: '0.3.0' }, entrypoint: API_SERVER, cmd: [], confidence: 'proven', evidence: 'llm-d/llm-d Dockerfile (2025-06)', link: 'https://github.com/llm-d/llm-d/blob/main/Dockerfile' },
  { repository: 'ghcr.io/llm-d/llm-d-cuda', grammar: 'plain', tags: { from: '0.3.0', below: '0.5.0' }, entrypoint: ['python', '-m', 'vllm.entrypoints.openai.api_server'], cmd: [], confidence: 'proven', evidence: 'llm-d/llm-d docker/Dockerfile.cuda @a22af716 (2025-10) and @0199edbf (2026-01)', link: 'https://github.com/llm-d/llm-d/blob/main/docker/Dockerfile.cuda' },
  { repository: 'nvcr.io/nvidia/ai-dynamo/vllm-runtime', grammar: 'plain', tags: {}, entrypoint: ['/opt/nvidia/nvidia_entrypoint.sh'], cmd: [], confidence: 'inferred', evidence: 'ai-dynamo/dynamo container/Dockerfile.vllm @039a0245 (NGC base entrypoint, CMD [])', link: 'https://github.com/ai-dynamo/dynamo/blob/main/container/Dockerfile.vllm' },
];

const UNPLACED_RANGES: readonly UnplacedRange[] = [
  { repository: 'vllm/vllm-openai', tags: { from: '0.11.0.1', below: '0.14.1' }, why: 'vLLM moved this image from the api_server module to `vllm serve` in one of v0.11.1-v0.14.0, and no source settles which' },
  { repository: 'lmcache/vllm-openai', tags: { datesThrough: '2025-06-15' }, why: 'LMCache changed this image\'s ENTRYPOINT around May-June 2025' },
];

function versionIn(version: Version, rule: TagRule): boolean {
  const bound = (text: string) => parseVersion(text)!;
  if (rule.from !== undefined && compareVersions(version, bound(rule.from)) < 0) return false;
  if (rule.through !== undefined && compareVersions(version, bound(rule.through)) > 0) return false;
  if (rule.below !== undefined && compareVersions(version, bound(rule.below)) >= 0) return false;
  return true;
}

/** True when a tag (in the repository's grammar) lies in the rule. */
export function tagMatches(parsed: ParsedTag, rule: TagRule): boolean {
  if (rule.variant !== undefined && parsed.variant !== rule.variant) return false;
  if (parsed.name !== undefined) return rule.named?.includes(parsed.name) ?? false;
  if (parsed.date !== undefined) {
    if (rule.datesFrom === undefined && rule.datesThrough === undefined) return false;
    return (rule.datesFrom === undefined || parsed.date >= rule.datesFrom) && (rule.datesThrough === undefined || parsed.date <= rule.datesThrough);
  }
  if (parsed.version !== undefined) {
    const hasBounds = rule.from !== undefined || rule.through !== undefined || rule.below !== undefined;
    const rowTakesAll = !hasBounds && rule.named === undefined && rule.datesFrom === undefined && rule.datesThrough === undefined;
    return (hasBounds || rowTakesAll) && versionIn(parsed.version, rule);
  }
  return false;
}

/** A row matches every tag when it states no rule at all. */
function takesEveryTag(rule: TagRule): boolean {
  return Object.keys(rule).length === 0;
}

/** The row placing this image, looked up under `repository` (the image's own, or a `like:` alias). */
export function findKnownImage(image: ImageReference, repository?: string): KnownImage | undefined {
  const tag = effectiveTag(image);
  return KNOWN_IMAGES.find((row) => {
    if (repository !== undefined ? row.repository !== repository : !repositoryMatches(image, row.repository)) return false;
    if (takesEveryTag(row.tags)) return true;
    return tag !== undefined && tagMatches(parseTag(tag, row.grammar), row.tags);
  });
}

/** Why the table does not place this image, for the refusal message. */
export function whyUnplaced(image: ImageReference, repository?: string): string {
  const rows = KNOWN_IMAGES.filter((row) => (repository !== undefined ? row.repository === repository : repositoryMatches(image, row.repository)));
  const name = repository ?? rows[0]?.repository;
  if (rows.length === 0) return 'the image is not in the built-in table';
  const tag = effectiveTag(image);
  if (tag === undefined) return `${name} is pinned by digest only, and a digest names no release the table can place`;
  const parsed = parseTag(tag, rows[0]!.grammar);
  const gap = UNPLACED_RANGES.find((g) => g.repository === name && tagMatches(parsed, g.tags));
  if (gap) return `the built-in table does not place ${name}:${tag}: ${gap.why}`;
  if (parsed.name !== undefined) return `the built-in table does not place ${name}:${tag}: a custom, nightly or model tag names no release`;
  return `the built-in table has no row for ${name}:${tag}`;
}

export function isKnownRepository(image: ImageReference): boolean {
  return KNOWN_IMAGES.some((row) => repositoryMatches(image, row.repository));
}

/** The table row whose repository this one looks like by its last path component (a renamed mirror). */
export function lookAlikeRepository(image: ImageReference): string | undefined {
  const last = image.repository.slice(image.repository.lastIndexOf('/') + 1);
  return KNOWN_IMAGES.find((row) => row.repository.slice(row.repository.lastIndexOf('/') + 1) === last)?.repository;
}

/**
 * vLLM's family: images that run vLLM unless their command says otherwise.
 * Their name says so (`vllm` anywhere in the repository: vllm-openai, its
 * mirrors, LMCache, Dynamo's vllm-runtime) or they are llm-d's images.
 */
export function isVllmFamilyImage(image: ImageReference): boolean {
  const repo = image.repository;
  return repo.includes('vllm') || isLlmdRepository(repo);
}

/**
 * `/(^|\/)llm-d\/llm-d(-[a-z0-9]+)*$/.test(repo)`: `llm-d/llm-d`, `ghcr.io/llm-d/llm-d-cuda`.
 * The suffix holds no `/`, so only the last two segments can match. A scan, not the regex:
 * a render asks for every image, in a fresh process where a regex costs its compilation on
 * its first runs (docs/benchmarks.md).
 */
export function isLlmdRepository(repo: string): boolean {
  const at = repo.lastIndexOf('/') - 'llm-d'.length;
  if (at < 0 || !repo.startsWith('llm-d/llm-d', at) || (at > 0 && repo.charCodeAt(at - 1) !== 0x2f)) return false;
  // (-[a-z0-9]+)* to the end
  let i = at + 'llm-d/llm-d'.length;
  while (i < repo.length) {
    if (repo.charCodeAt(i) !== 0x2d) return false;
    const group = ++i;
    while (i < repo.length && (isAsciiDigit(repo.charCodeAt(i)) || (repo.charCodeAt(i) >= 0x61 && repo.charCodeAt(i) <= 0x7a))) i++;
    if (i === group) return false;
  }
  return true;
}
