/**
 * `vram-preflight admit`: the webhook's answer without a cluster. One object
 * on stdin, JSON or YAML:
 *
 * - an AdmissionReview (what the API server sends): the AdmissionReview the
 *   webhook answers, as JSON;
 * - a Pod: the pod as the webhook would let it in (patched, annotated);
 * - a workload (Deployment, StatefulSet, LeaderWorkerSet, ...): the workload
 *   with its pod template wrapped, as the post-renderer would write it.
 *
 * The same decision as the webhook (src/webhook/admission.ts), the same
 * options (flags, VRAM_PREFLIGHT_*, --config: the chart's `config`), the
 * same registry lookups within the same budget. The output comes in the
 * input's format (JSON stays JSON, YAML stays YAML).
 *
 * Exit codes, as the CLI's: 0 the answer is on stdout (wrapped or nothing
 * to wrap); 1 a container would not be wrapped (the reasons and fixes on
 * stderr, nothing on stdout), or the input is not one readable object;
 * 2 usage or option error; 70 internal error.
 */
import { readFileSync } from 'node:fs';
import { Document, parseAllDocuments } from 'yaml';
import { optionHelp, parseCommandLine, refuseRenderOnlyEnv } from '../config/flags.js';
import { resolveOptions } from '../config/load.js';
import { CONFIG_FLAG } from '../config/sources.js';
import { quoteBounded } from '../config/suggest.js';
import { ANNOTATION_NOT_WRAPPED, applyPatch, asObject, escapeControl, patchObject, PreflightError, VERSION, withLookups, type Options, type Plain, type RegistryAnswers } from '../core/index.js';
import { admit, notWrappedAnnotation, type RefusedContainer } from './admission.js';
import { DEFAULT_CACHE_SETTINGS, ImageStartCache } from './image-starts.js';
import { webhookMetrics } from './metrics.js';
import { registryOptions } from './server.js';

export const ADMIT_HELP = `vram-preflight ${VERSION} admit: what the admission webhook answers, without a cluster

Usage:
  vram-preflight admit [options] < pod.yaml           the pod as the webhook lets it in
  vram-preflight admit [options] < review.json        the AdmissionReview the webhook answers
  vram-preflight admit [options] < deployment.yaml    a workload with its pod template wrapped

One object on stdin, JSON or YAML; the answer on stdout in the same format.
The same decision, options and registry lookups as \`vram-preflight webhook\`.

Options (flag, or environment variable; the config file is the chart's \`config\`):
${optionHelp('admit', 'all')}

Exit codes: 0 the answer is on stdout; 1 a container would not be wrapped
(reasons and fixes on stderr, nothing on stdout) or the input is not one
object; 2 usage or option error; 70 internal error.
Docs: docs/webhook.md ("Try it without a cluster").
`;

export interface AdmitIO {
  stdin: () => Promise<string>;
  stdout: { write(text: string): unknown };
  stderr: { write(text: string): unknown };
  env: Readonly<Record<string, string | undefined>>;
  readFile(path: string): string;
}

type Format = 'json' | 'yaml';

/** The one object on stdin, and the format it came in. */
function readObject(text: string): { object: Plain; format: Format } {
  const trimmed = text.trimStart();
  if (trimmed === '') throw new PreflightError('USAGE', 'nothing on stdin', { fix: 'vram-preflight admit < pod.yaml (a Pod, a workload or an AdmissionReview, JSON or YAML)' });
  let value: unknown;
  let format: Format;
  if (trimmed.startsWith('{')) {
    format = 'json';
    try {
      value = JSON.parse(text);
    } catch (error) {
      throw new PreflightError('YAML_SYNTAX', `stdin is not JSON: ${(error as Error).message}`, { fix: 'give one JSON object (or YAML)' });
    }
  } else {
    format = 'yaml';
    const documents = parseAllDocuments(text).filter((d) => d.contents !== null);
    if (documents.length !== 1) throw new PreflightError('USAGE', `stdin holds ${documents.length} YAML documents; admit answers one object`, { fix: 'give one Pod, workload or AdmissionReview (kubectl get pod NAME -o yaml)' });
    const document = documents[0]!;
    if (document.errors.length > 0) throw new PreflightError('YAML_SYNTAX', `stdin is not valid YAML: ${document.errors[0]!.message.split('\n')[0]}`, { fix: 'correct the YAML' });
    value = document.toJS();
  }
  const object = asObject(value);
  if (!object || typeof object.kind !== 'string') throw new PreflightError('USAGE', 'stdin is not a Kubernetes object (no kind)', { fix: 'give a Pod, a workload or an AdmissionReview' });
  return { object, format };
}

const write = (value: unknown, format: Format): string => (format === 'json' ? `${JSON.stringify(value, null, 2)}\n` : stringifyYaml(value));

function stringifyYaml(value: unknown): string {
  return new Document(value).toString({ lineWidth: 0 });
}

/** Registry lookups as the webhook makes them: one shared cache, the per-admission budget. */
function lookups(options: Options, env: AdmitIO['env']): (images: readonly string[]) => Promise<RegistryAnswers> {
  const cache = new ImageStartCache(DEFAULT_CACHE_SETTINGS, webhookMetrics());
  return (images) => cache.answers(images, registryOptions(options, env));
}

/** The not-wrapped containers on stderr: each reason and its fix, as the pod's annotation says them (not cut to a warning's length). */
function reportRefused(io: AdmitIO, refused: readonly RefusedContainer[]): void {
  for (const line of notWrappedAnnotation(refused).split('\n')) io.stderr.write(`vram-preflight: ${line}\n`);
  io.stderr.write(`vram-preflight: nothing was written to stdout; the webhook would admit the pod unchanged, with this in its annotation ${ANNOTATION_NOT_WRAPPED} and as warnings\n`);
}

async function answer(object: Plain, format: Format, options: Options, io: AdmitIO): Promise<number> {
  const lookup = lookups(options, io.env);
  if (object.kind === 'AdmissionReview') {
    const admission = await admit(JSON.stringify(object), { options, lookup });
    if (admission.status !== 200) throw new PreflightError('USAGE', `the webhook would answer HTTP ${admission.status}: ${String((JSON.parse(admission.body) as { error?: unknown }).error)}`, { fix: 'give an AdmissionReview admission.k8s.io/v1 with request.uid (or a Pod)' });
    if (admission.refused.length > 0) {
      reportRefused(io, admission.refused);
      return 1;
    }
    io.stdout.write(write(JSON.parse(admission.body), format));
    return 0;
  }
  if (object.kind === 'Pod' && (object.apiVersion === 'v1' || object.apiVersion === undefined)) {
    const metadata = asObject(object.metadata);
    const review = {
      apiVersion: 'admission.k8s.io/v1',
      kind: 'AdmissionReview',
      request: {
        uid: 'vram-preflight-admit',
        kind: { group: '', version: 'v1', kind: 'Pod' },
        resource: { group: '', version: 'v1', resource: 'pods' },
        namespace: typeof metadata?.namespace === 'string' ? metadata.namespace : 'default',
        operation: 'CREATE',
        object,
      },
    };
    const admission = await admit(JSON.stringify(review), { options, lookup });
    if (admission.refused.length > 0) {
      reportRefused(io, admission.refused);
      return 1;
    }
    const response = (JSON.parse(admission.body) as { response: { patch?: string } }).response;
    const patch = response.patch ? (JSON.parse(Buffer.from(response.patch, 'base64').toString('utf8')) as Parameters<typeof applyPatch>[1]) : [];
    io.stdout.write(write(applyPatch(object, patch), format));
    return 0;
  }
  // A workload: the core's patch of its pod template, as the post-renderer would write it.
  const result = await withLookups((registry) => patchObject(object, options, { registry }), options.registryLookup, lookup);
  for (const warning of [...new Set(result.warnings)]) io.stderr.write(`vram-preflight: warning: ${escapeControl(warning)}\n`);
  if (result.errors.length > 0) {
    for (const error of result.errors) io.stderr.write(`vram-preflight: ${error.format()}\n`);
    return 1;
  }
  if (result.containers.length === 0) io.stderr.write(`vram-preflight: ${escapeControl(String(object.kind))} has no containers vram-preflight reads (docs/detection.md); written back unchanged\n`);
  io.stdout.write(write(applyPatch(object, result.patch), format));
  return 0;
}

/** `vram-preflight admit ARGS`: the exit code. */
export async function runAdmit(argv: readonly string[], io: AdmitIO): Promise<number> {
  let options: Options;
  try {
    const line = parseCommandLine(argv, 'admit');
    if (line.stop === '--help') {
      io.stdout.write(ADMIT_HELP);
      return 0;
    }
    if (line.stop === '--version') {
      io.stdout.write(`${VERSION}\n`);
      return 0;
    }
    if (line.words.length > 0) throw new PreflightError('USAGE', `unexpected argument ${quoteBounded(line.words[0])}`, { fix: 'admit reads the object on stdin: vram-preflight admit < pod.yaml' });
    refuseRenderOnlyEnv(io.env, 'admit');
    const configPath = line.wrap.find((f) => f.flag === CONFIG_FLAG)?.value;
    options = resolveOptions({ configPath, flags: line.wrap.filter((f) => f.flag !== CONFIG_FLAG) }, io);
  } catch (error) {
    if (!(error instanceof PreflightError)) throw error;
    io.stderr.write(`vram-preflight: ${error.format()}\n`);
    return 2;
  }
  try {
    const { object, format } = readObject(await io.stdin());
    return await answer(object, format, options, io);
  } catch (error) {
    if (!(error instanceof PreflightError)) throw error;
    io.stderr.write(`vram-preflight: ${error.format()}\n`);
    return 1;
  }
}

/** The process: stdin, stdout, stderr, the exit code; an internal error is exit 70 with one line. */
export async function runAdmitProcess(argv: readonly string[]): Promise<void> {
  const io: AdmitIO = {
    stdin: async () => {
      const chunks: Buffer[] = [];
      for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
      return Buffer.concat(chunks).toString('utf8');
    },
    stdout: process.stdout,
    stderr: process.stderr,
    env: process.env,
    readFile: (path) => readFileSync(path, 'utf8'),
  };
  try {
    process.exitCode = await runAdmit(argv, io);
  } catch (error) {
    process.stderr.write(`vram-preflight: error INTERNAL: internal error (a bug in vram-preflight ${VERSION}, not in the input): ${error instanceof Error ? `${error.name}: ${error.message}` : String(error)}\n`);
    process.exitCode = 70;
  }
}
