/**
 * KubeRay, not the image, decides how the Ray container of a head or worker
 * pod starts. KubeRay's BuildPod (ray-project/kuberay,
 * ray-operator/controllers/ray/common/pod.go) takes the pod's Ray container
 * (`containers[0]`, utils.RayContainerIndex), joins its `command` and `args`
 * item by item as " %s " (convertCmdToString: no quoting), and
 *
 * - keeps them as written when the text contains `ray start`, or when the
 *   annotation `ray.io/overwrite-container-cmd` is "true" (on the Ray object,
 *   which KubeRay copies to every template, or on a template);
 * - otherwise replaces them with `/bin/bash -lc --` and one argument: the
 *   joined text, ` && `, then the generated `ray start …` (only the latter
 *   when the text is empty: a container without command or args runs
 *   `ray start`, whatever its image's ENTRYPOINT). Releases before the
 *   `--block` fix put `ray start` first; a start written as one plain
 *   command survives either order.
 *
 * So a start KubeRay keeps is either the container's own (as written) or its
 * items as words of a bash command line (joined).
 */
export const RAY_OVERWRITE_ANNOTATION = 'ray.io/overwrite-container-cmd';

/** Which container of a Ray pod KubeRay starts (utils.RayContainerIndex). */
export const RAY_CONTAINER_INDEX = 0;

export type RayStart =
  /** KubeRay starts the container as `ray start` (nothing to join): vLLM, if any, runs in Ray actors. */
  | 'ray-start'
  /** KubeRay keeps command and args as written. */
  | 'as-written'
  /** KubeRay runs the joined items as a bash command line, followed by `&& ray start …`. */
  | 'joined';

/** What KubeRay does with a Ray container's command and args. */
export function kuberayStart(command: readonly string[] | null, args: readonly string[] | null, overwrite: boolean): RayStart {
  const text = [...(command ?? []), ...(args ?? [])].map((item) => ` ${item} `).join('');
  if (overwrite || text.includes('ray start')) return 'as-written';
  return text === '' ? 'ray-start' : 'joined';
}

export function overwriteRequested(value: unknown): boolean {
  return typeof value === 'string' && value.toLowerCase() === 'true';
}

/**
 * One argv item as a single bash word: KubeRay pastes items unquoted, so the
 * preflight script (several lines, quotes, `$`) is written single-quoted.
 */
export function asBashWord(item: string): string {
  return `'${item.replaceAll("'", "'\\''")}'`;
}

/**
 * A start whose joined text is one simple command: no item holds what bash
 * reads as a command separator, a redirection, a quote or a comment, so the
 * preflight put before it receives that command's words after `--` (bash
 * expands `$VAR` in them as it would have without the preflight).
 */
export function joinsAsOneCommand(argv: readonly string[]): boolean {
  return argv.length > 0 && argv.every((item) => !/[;&|<>()`'"\\\n\r#]/.test(item));
}

/**
 * A RayService whose Serve config (`spec.serveConfigV2`, the Ray Serve
 * application's YAML as a string) names vLLM: vLLM runs in Ray Serve actors,
 * started by Ray inside the worker processes, not by any container's start.
 */
export function rayServeRunsVllm(object: Record<string, unknown>): boolean {
  const spec = object.spec;
  const serveConfig = spec && typeof spec === 'object' ? (spec as Record<string, unknown>).serveConfigV2 : undefined;
  return typeof serveConfig === 'string' && /vllm/i.test(serveConfig);
}
