/**
 * The pure transform: a manifest stream in, the rewritten stream plus a report
 * and diagnostics out. No I/O, no globals; the CLI supplies options (and the
 * registry's answers, looked up at its edge) and decides what to print.
 *
 * Pipeline: cut the stream into documents on text alone (src/core/yaml/stream.ts);
 * parse only documents that may hold a target (`candidateTest`); find their
 * pod templates (src/core/tables/workloads.ts) and decide each container
 * (src/core/decide/container.ts); apply the edits (src/core/yaml/edit.ts) and check the edited
 * text means what was intended (src/core/yaml/verify.ts). Everything else is copied.
 */
import { isMap, isSeq, type Node, type YAMLMap } from 'yaml';
import type { Options } from './options.js';
import type { ContainerReport } from './decide/container.js';
import { visitObject, type ObjectVisit } from './decide/object.js';
import { asObject, type Plain } from './values.js';
import { describeDocument, PreflightError, type DocumentRef } from './errors.js';
import { emptyDeviceClaims, recordDeviceClaim, type DeviceClaims } from './tables/gpu.js';
import { KNOWN_IMAGES } from './tables/images.js';
import { applyEdits, readArgv, startEdits, type TextEdit } from './yaml/edit.js';
import type { RegistryAnswers, StartSources } from './decide/start.js';
import { LineIndex, lineEnding, splitStream, type Chunk, type StreamText } from './yaml/stream.js';
import { verifyEditedChunk, type IntendedStart } from './yaml/verify.js';
import { KINDS_WITHOUT_CONTAINERS } from './tables/workloads.js';
import { mentionsAnyLowered, TARGET_WORDS } from './decide/target-words.js';
import { mentionMayDecide } from './decide/deciding-mentions.js';
import { parseDocuments } from './yaml/fast-parse.js';
import { depthBeyond, MAX_NESTING } from './yaml/depth.js';
import { yaml11BreakOutsideQuotes } from './yaml/go-yaml.js';
import { isJsWhitespace, isLineTerminator } from './char-classes.js';
import { effectiveGet, findDuplicateKeys, resolveAlias, type ParsedDocument } from './yaml/nodes.js';

export type { Action, ContainerReport } from './decide/container.js';

export interface TransformResult {
  /** The output stream, in pieces (one per document chunk); empty when there are errors. */
  readonly pieces: readonly string[];
  /** The pieces joined (computed on first read). */
  readonly output: string;
  containers: ContainerReport[];
  errors: PreflightError[];
  warnings: string[];
  /** Images whose start only their registry can tell: the CLI looks them up and runs the transform again. */
  wantedImages: string[];
}

export interface TransformInput {
  /** Registry answers by image reference as written (src/registry, at the CLI's edge). */
  registry?: RegistryAnswers;
  /**
   * Which documents that have containers are parsed: `any-mention` (the
   * default, and explain's: every document that mentions a target word,
   * so that explain lists every container of it) or `deciding-mention` (the
   * render's: only where a mention could decide a container, see
   * src/core/decide/deciding-mentions.ts). The output, warnings and errors
   * are the same either way, save the problems of a document's YAML itself
   * (a syntax error, a duplicate key, command or args that are not lists of
   * strings) in a document whose mentions decide nothing: passed through
   * unread, as any document that does not mention vLLM.
   */
  candidates?: CandidateRule;
  /**
   * Documents the caller answers itself (`vram-preflight admit`: Pods and
   * AdmissionReviews, which are the webhook's to answer): read as every
   * document is read, with the same problems reported, then not decided;
   * their text is copied. True sets the document aside.
   */
  setAside?: (document: ReadDocument) => boolean;
}

/** A document as the post-renderer reads it: its value, and its containers' command and args read as go-yaml reads them. */
export interface ReadDocument {
  /** Its chunk's position among the stream's chunks (0-based): `TransformResult.pieces` holds one piece per chunk. */
  chunk: number;
  /** Documents in that chunk (more than one only where `...` ends one without a `---`). */
  documentsInChunk: number;
  /** Where its content starts in the chunk's text (after the `---` line, comments and directives). */
  contentStart: number;
  value: unknown;
  ref: DocumentRef;
  /** A container's command and args at a value path, read from the document's nodes (merge keys, aliases, go-yaml's scalars). */
  access: ObjectVisit['access'];
}

export type CandidateRule = 'any-mention' | 'deciding-mention';

/**
 * Cheap text test that decides whether a document is parsed at all: it must
 * hold containers and mention vLLM, one of its family's images, an earlier
 * wrap, an annotation of ours or a configured image. A backslash may spell
 * any of these in a double-quoted escape, so it makes a document a candidate too.
 * Under `deciding-mention` a document with containers must mention one where
 * it could decide a container, unless it names a kind explain reports without
 * containers (any mention names those) or passes --gpu-memory-utilization
 * (the warning for it on an image that is not vLLM's needs no word in the start).
 */
export function candidateTest(options: Options, rule: CandidateRule): (text: string) => boolean {
  const all = [...TARGET_WORDS, ...KNOWN_IMAGES.map((i) => i.repository), ...options.images.map((i) => i.repository)].map((w) => w.toLowerCase());
  // A word that holds another one adds nothing to the test but time (every built-in repository names vllm, llm-d or huggingfaceserver).
  const words = [...new Set(all)].filter((w, _, list) => !list.some((other) => other !== w && w.includes(other)));

  const sharp = rule === 'deciding-mention';
  return (text) => {
    if (text.includes('\\')) return true;
    // The mention first: it rules most documents out with plain searches, before any regex runs.
    const lower = text.toLowerCase();
    if (!mentionsAnyLowered(lower, words)) return false;
    // Operator resources (Dynamo, KubeAI), OpenShift templates and KServe's model predictors carry no `containers` key of their own, yet explain must name them;
    // so must it an operator's resource of a kind no table names that names a vLLM image (decide/unrecognised.ts). The render, which writes them back as they came, reads none of these.
    if (!hasContainersKey(text)) return kindLineNames(text, KINDS_WITHOUT_CONTAINERS) || (!sharp && lower.includes('image'));
    if (!sharp) return true;
    // The line test first: it stops at the first mention that counts, which most documents with a vLLM container reach early.
    return mentionMayDecide(lower, words) || lower.includes('memory-utilization') || lower.includes('memory_utilization') || namesKindWithoutContainers(text);
  };
}

// The scans below stand for regexes: a render is a fresh process, where each regex costs its
// compilation on its first runs (docs/benchmarks.md); test/core/cold-regexes.test.ts holds
// each scan to its regex.

/** `/containers['"]?\s*:/.test(text)`: a `containers` key, quoted or not. */
export function hasContainersKey(text: string): boolean {
  for (let at = text.indexOf('containers'); at !== -1; at = text.indexOf('containers', at + 1)) {
    let i = at + 'containers'.length;
    const c = text.charCodeAt(i);
    if (c === 0x22 || c === 0x27) i++;
    while (isJsWhitespace(text.charCodeAt(i))) i++;
    if (text.charCodeAt(i) === 0x3a) return true;
  }
  return false;
}

/**
 * `new RegExp(`^kind:[ \\t]*['"]?(${kinds.join('|')})\\b`, 'm').test(text)`: a line that
 * starts with `kind:` naming one of the kinds, as a whole word (kinds are plain names).
 */
export function kindLineNames(text: string, kinds: readonly string[]): boolean {
  for (let at = text.indexOf('kind:'); at !== -1; at = text.indexOf('kind:', at + 1)) {
    if (at > 0 && !isLineTerminator(text.charCodeAt(at - 1))) continue;
    let i = at + 'kind:'.length;
    while (text.charCodeAt(i) === 0x20 || text.charCodeAt(i) === 0x09) i++;
    const c = text.charCodeAt(i);
    if (c === 0x22 || c === 0x27) i++;
    for (const kind of kinds) {
      if (text.startsWith(kind, i) && !isRegexWordCharacter(text.charCodeAt(i + kind.length))) return true;
    }
  }
  return false;
}

/** What `\b` takes for a word character: ASCII letters, digits and `_`. */
function isRegexWordCharacter(c: number): boolean {
  return isWordCharacter(c) || c === 0x5f;
}

/**
 * Whether the text names, as a word, a kind explain reports without
 * containers (an operator resource, an OpenShift Template, a KServe or
 * KubeRay kind): any mention names those. A word anywhere, not only after
 * `kind:`, so that a List's items, JSON and any quoting are covered.
 */
function namesKindWithoutContainers(text: string): boolean {
  for (const kind of KINDS_WITHOUT_CONTAINERS) {
    for (let at = text.indexOf(kind); at !== -1; at = text.indexOf(kind, at + 1)) {
      if (!isWordCharacter(text.charCodeAt(at - 1)) && !isWordCharacter(text.charCodeAt(at + kind.length))) return true;
    }
  }
  return false;
}

/** ASCII letters and digits (NaN, before the start or after the end, is none). */
function isWordCharacter(c: number): boolean {
  return (c >= 48 && c <= 57) || (c >= 65 && c <= 90) || (c >= 97 && c <= 122);
}

/** A document that could decide a container, nested deeper than vram-preflight reads (`depth`: "1005 levels deep"). */
export function nestingTooDeep(depth: string, document: DocumentRef): PreflightError {
  return new PreflightError('NESTING_TOO_DEEP', `the document nests ${depth}; vram-preflight reads documents up to ${MAX_NESTING} levels deep (go-yaml, which Helm and kubectl use, up to 10,000)`, {
    document,
    fix: 'render the deeply nested value flatter (a chart nests ~15 levels; the depth is almost always a template that recurses), or keep it out of a document that holds containers',
  });
}

/** DRA claims can be defined anywhere in the stream (Helm sorts unknown kinds last): read them first. */
export function collectDeviceClaims(chunks: readonly Chunk[], fast: boolean): DeviceClaims {
  const claims = emptyDeviceClaims();
  for (const chunk of chunks) {
    if (!chunk.text.includes('ResourceClaim') || !chunk.text.includes('resource.k8s.io')) continue;
    for (const doc of parseDocuments(chunk.text, fast)) {
      if (doc.errors.length) continue;
      try {
        const value = doc.toJS() as unknown;
        if (value && typeof value === 'object' && String((value as Plain).apiVersion ?? '').startsWith('resource.k8s.io/')) recordDeviceClaim(claims, value as Plain);
      } catch {
        // An unreadable claim is simply not known: containers using it are reported as unknown.
      }
    }
  }
  return claims;
}



/** The node at a value path, following merge keys and aliases exactly as the value was built. */
function nodeAt(root: unknown, path: readonly (string | number)[], doc: ParsedDocument): unknown {
  let node = resolveAlias(root, doc);
  for (const step of path) {
    if (typeof step === 'number') node = isSeq(node) ? resolveAlias(node.items[step], doc) : undefined;
    else node = effectiveGet(node, step, doc);
  }
  return node;
}

function sourceOf(before: string, previousChunk: string | undefined): string | undefined {
  // Helm 4 prints `---\n# Source: x\n---\n<document>`: the name is in a chunk of comments only before it.
  return sourceComment(before) ?? (previousChunk !== undefined && commentsOnly(previousChunk) ? sourceComment(previousChunk) : undefined);
}

/**
 * `/^# Source: (.+?)\r?$/m.exec(text)?.[1]`: the name on the first `# Source: ` line with one.
 * `.` stops at any line terminator, so the name runs to the line's end, less a CR.
 */
export function sourceComment(text: string): string | undefined {
  const mark = '# Source: ';
  for (let at = text.indexOf(mark); at !== -1; at = text.indexOf(mark, at + 1)) {
    if (at > 0 && !isLineTerminator(text.charCodeAt(at - 1))) continue;
    const from = at + mark.length;
    let end = from;
    while (end < text.length && !isLineTerminator(text.charCodeAt(end))) end++;
    if (end > from) return text.slice(from, end);
  }
  return undefined;
}

/**
 * `/^(---[ \t]*\r?\n?)?([ \t]*(#.*)?\r?(\n|$))*$/.test(text)`: an optional `---` line, then
 * lines of comments or blanks only. The regex may end the `---` line after its spaces, its
 * CR or its LF: each is tried.
 */
export function commentsOnly(text: string): boolean {
  if (!text.startsWith('---')) return commentLinesFrom(text, 0);
  let i = 3;
  while (text.charCodeAt(i) === 0x20 || text.charCodeAt(i) === 0x09) i++;
  if (commentLinesFrom(text, i)) return true;
  const cr = text.charCodeAt(i) === 0x0d ? i + 1 : i;
  if (cr > i && commentLinesFrom(text, cr)) return true;
  return text.charCodeAt(cr) === 0x0a && commentLinesFrom(text, cr + 1);
}

/** `([ \t]*(#.*)?\r?(\n|$))*$` from `i`. */
function commentLinesFrom(text: string, i: number): boolean {
  while (i < text.length) {
    while (text.charCodeAt(i) === 0x20 || text.charCodeAt(i) === 0x09) i++;
    if (text.charCodeAt(i) === 0x23) while (i < text.length && !isLineTerminator(text.charCodeAt(i))) i++;
    if (text.charCodeAt(i) === 0x0d) i++;
    if (i === text.length) return true;
    if (text.charCodeAt(i) !== 0x0a) return false;
    i++;
  }
  return true;
}

/** Where a document's content starts in its chunk's text. */
function contentStartOf(doc: ParsedDocument): number {
  return (doc.contents as Node | null)?.range?.[0] ?? doc.range?.[0] ?? 0;
}

function documentRef(lines: LineIndex, chunk: Chunk, doc: ParsedDocument, value: Plain | undefined, index: number, previousChunk: string | undefined): DocumentRef {
  const contentStart = contentStartOf(doc);
  const metadata = asObject(value?.metadata);
  const helmFilename = asObject(metadata?.annotations)?.['postrenderer.helm.sh/postrender-filename'];
  const ref: DocumentRef = {
    index,
    line: 0,
    kind: typeof value?.kind === 'string' ? value.kind : undefined,
    name: typeof metadata?.name === 'string' ? metadata.name : undefined,
    source: sourceOf(chunk.text.slice(0, contentStart), previousChunk),
    helmFilename: typeof helmFilename === 'string' ? helmFilename : undefined,
  };
  // Only messages need the line: computing it for every document would index the whole stream.
  Object.defineProperty(ref, 'line', { get: () => lines.position(chunk.offset + contentStart).line, enumerable: true });
  return ref;
}

/** A document's kind and name from its text alone, as well as that goes (block YAML at the top level). */
export function kindAndNameOf(text: string): { kind?: string; name?: string } {
  const kind = /^kind:[ \t]*["']?([A-Za-z0-9.-]+)/m.exec(text)?.[1];
  const name = /^metadata:[ \t]*\r?\n(?:[ \t]+.*\r?\n)*?[ \t]+name:[ \t]*["']?([A-Za-z0-9.-]+)/m.exec(text)?.[1];
  return { kind, name };
}

/** A document that does not parse has no value: name it from its text, as well as that goes. */
function refFromText(lines: LineIndex, chunk: Chunk, index: number, previousChunk: string | undefined): DocumentRef {
  const { kind, name } = kindAndNameOf(chunk.text);
  const line = lines.position(chunk.offset).line;
  return { index, line, kind, name, source: sourceOf(chunk.text, previousChunk) };
}

/** One container's decided start, as text edits of its document. */
type TextEditOf = { edits: TextEdit[]; intended: IntendedStart; report: ContainerReport };

/** Applies a document chunk's edits, checks them, and refuses any edit that would mean more than intended. */
function editChunk(chunk: Chunk, values: readonly unknown[], edits: TextEditOf[][], result: TransformResult, fast: boolean): string {
  const all = edits.flat();
  if (all.length === 0) return chunk.text;
  const intended = (subset: readonly (readonly TextEditOf[])[]): IntendedStart[][] => subset.map((list) => list.map((e) => e.intended));
  const edited = applyEdits(chunk.text, all.flatMap((e) => e.edits));
  const problem = verifyEditedChunk(edited, values, intended(edits), fast);
  if (!problem) return edited;
  // Find the edit(s) at fault: each alone, against the same check.
  const alone = all.map((one) => ({ one, problem: verifyEditedChunk(applyEdits(chunk.text, one.edits), values, intended(edits.map((list) => list.filter((e) => e === one))), fast) }));
  const culprits = alone.filter((a) => a.problem !== undefined);
  for (const { one, problem: single } of culprits.length ? culprits : alone) {
    const { report } = one;
    const message = `${(single ?? problem).message}, not just this container's command and args (YAML anchors, aliases or << merge keys share its text); nothing was written`;
    const error = new PreflightError('UNSAFE_EDIT', message, {
      document: report.document,
      container: report.container,
      image: report.image,
      fix: 'write this container\'s command, args and the containers around it without sharing them through anchors, aliases or << merge keys, or opt it out with vram-preflight.io/skip: "true"',
    });
    report.action = 'error';
    report.reason = message;
    report.error = error;
    result.errors.push(error);
  }
  return chunk.text;
}

export function transform(stream: StreamText, options: Options, input: TransformInput = {}): TransformResult {
  const pieces: string[] = [];
  let joined: string | undefined;
  const result = { pieces, containers: [], errors: [], warnings: [], wantedImages: [] } as unknown as TransformResult;
  // Joined on demand: the CLI writes the pieces, so a large stream is never copied whole.
  Object.defineProperty(result, 'output', { get: () => (result.errors.length ? '' : (joined ??= pieces.join(''))) });
  const isCandidate = candidateTest(options, input.candidates ?? 'any-mention');
  const lines = new LineIndex(stream);
  const chunks = splitStream(stream);
  const fast = options.fastParse !== 'off';
  const claims = collectDeviceClaims(chunks, fast);
  const sources: StartSources = { images: options.images, registry: input.registry ?? new Map(), lookup: options.registryLookup };
  const wanted = new Set<string>();
  let index = 0;
  let previousChunk: string | undefined;
  for (const chunk of chunks) {
    index += 1;
    const previous = previousChunk;
    previousChunk = chunk.text;
    if (!isCandidate(chunk.text)) {
      pieces.push(chunk.text);
      continue;
    }
    const tooDeep = (depth: string): void => {
      result.errors.push(nestingTooDeep(depth, refFromText(lines, chunk, index, previous)));
      pieces.push(chunk.text);
    };
    const depth = depthBeyond(chunk.text, MAX_NESTING);
    if (depth !== undefined) {
      tooDeep(`${depth} levels deep`);
      continue;
    }
    const [errorsBefore, warningsBefore, containersBefore] = [result.errors.length, result.warnings.length, result.containers.length];
    try {
      transformChunk(chunk, index, previous);
    } catch (error) {
      // The bound above counts what charts render; a layout it undercounts still never surfaces as a stack overflow.
      if (!(error instanceof RangeError) || !/call stack/i.test(error.message)) throw error;
      result.errors.splice(errorsBefore);
      result.warnings.splice(warningsBefore);
      result.containers.splice(containersBefore);
      tooDeep('deeper than its reader can follow (the JavaScript call stack ran out)');
    }
    // A line go-yaml sees and YAML 1.2 does not (a NEL in a comment) may hide or add a container,
    // an item or an annotation: what was decided here is not what the cluster reads.
    const hidden = result.errors.length === errorsBefore ? yaml11BreakOutsideQuotes(chunk.text) : -1;
    if (hidden !== -1) {
      const code = chunk.text.charCodeAt(hidden);
      const name = code === 0x85 ? 'NEL (U+0085)' : code === 0x2028 ? 'LS (U+2028)' : 'PS (U+2029)';
      result.errors.push(
        new PreflightError('YAML_SYNTAX', `a raw ${name} outside a quoted string, with text after it on its line: go-yaml (Helm, kubectl) reads it as a line break, so the text after it is a line of its own to the cluster (a comment ends there), not to vram-preflight's reader`, {
          document: refFromText(lines, chunk, index, previous),
          position: lines.position(chunk.offset + hidden),
          fix: 'remove the character, or write it inside a double-quoted string as \\N, \\L or \\P',
        }),
      );
    }
  }
  result.wantedImages = [...wanted];
  return result;

  function transformChunk(chunk: Chunk, index: number, previous: string | undefined): void {
    const docs = parseDocuments(chunk.text, fast);
    for (const doc of docs) {
      const overflow = doc.errors.find((e) => /call stack/i.test(e.message));
      if (overflow) throw new RangeError(overflow.message);
    }
    const values: unknown[] = [];
    const editsByDoc: TextEditOf[][] = [];
    let broken = false;
    for (const [i, doc] of docs.entries()) {
      const syntax = doc.errors[0];
      if (syntax) {
        // The parser's own "at line N" counts from the chunk, not the stream: drop it.
        const message = syntax.message.split('\n')[0]!.replace(/ at line \d+, column \d+:?$/, '');
        const position = lines.position(chunk.offset + syntax.pos[0]);
        result.errors.push(new PreflightError('YAML_SYNTAX', message, { document: refFromText(lines, chunk, index + i, i === 0 ? previous : undefined), position, fix: 'fix the chart template that renders this document' }));
        broken = true;
        break;
      }
      let value: unknown;
      try {
        value = doc.toJS();
      } catch (error) {
        // toJS refuses alias bombs and the like: a YAML problem of this document.
        const message = (error as Error).message;
        const fix = message.startsWith('Unresolved alias')
          ? 'set the anchor (&name) before the alias (*name) that uses it, in the same document (anchors do not reach across documents), or write the value out'
          : 'fix the chart template that renders this document (write the values out instead of through aliases)';
        result.errors.push(new PreflightError('YAML_SYNTAX', message, { document: refFromText(lines, chunk, index + i, i === 0 ? previous : undefined), position: lines.position(chunk.offset + (doc.range?.[0] ?? 0)), fix }));
        broken = true;
        break;
      }
      values.push(value);
      const ref = documentRef(lines, chunk, doc, asObject(value), index + i, i === 0 ? previous : undefined);
      for (const dup of doc.uniqueKeys ? [] : findDuplicateKeys(doc.contents)) {
        result.warnings.push(`${describeDocument(ref)}: key "${dup.key}" appears more than once in ${dup.path}; the last value is used, as Helm and kubectl do`);
      }
      const access: ObjectVisit['access'] = (path) => {
        const node = nodeAt(doc.contents, path, doc);
        if (!isMap(node)) return undefined;
        const start = node.range?.[0];
        return {
          readArgv: (key) => readArgv(node, key, doc, chunk.text, {}),
          position: start === undefined ? undefined : () => lines.position(chunk.offset + start),
        };
      };
      if (input.setAside?.({ chunk: index - 1, documentsInChunk: docs.length, contentStart: contentStartOf(doc), value, ref, access })) {
        editsByDoc.push([]);
        continue;
      }
      const edits: TextEditOf[] = [];
      const nl = lineEnding(chunk.text);
      const write: ObjectVisit['write'] = ({ intended, anchors }, report, context) => {
        const node = nodeAt(doc.contents, intended.path, doc) as YAMLMap;
        edits.push({ edits: startEdits(chunk.text, node, intended.command, intended.args, nl, context, anchors), intended, report });
      };
      visitObject({ ref, options, sources, claims, result, access, write, wanted }, value, []);
      editsByDoc.push(edits);
    }
    pieces.push(broken ? chunk.text : editChunk(chunk, values, editsByDoc, result, fast));
  }
}
