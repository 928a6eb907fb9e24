/**
 * GPU signals: every way a container gets an NVIDIA GPU, one row each.
 * A container counts as on an NVIDIA GPU when any signal fires; `explain`
 * shows which one did. Where vLLM runs without one (CPU, AMD, Intel), there
 * is no nvidia-smi to ask and nothing to wait for.
 */
import { isAsciiDigit } from '../char-classes.js';
import { asObject, type Plain } from '../values.js';


/** Device classes of NVIDIA's DRA driver (k8s-dra-driver-gpu). */
const NVIDIA_DEVICE_CLASSES: readonly string[] = ['gpu.nvidia.com', 'mig.nvidia.com'];
/** The DRA driver's device class of MIG instances. */
const MIG_DEVICE_CLASS = 'mig.nvidia.com';

/** What a DRA claim in the stream asks for, by name. */
export interface DeviceClaims {
  /** ResourceClaimTemplate name → device classes it requests. */
  templates: Map<string, string[]>;
  /** ResourceClaim name → device classes it requests. */
  claims: Map<string, string[]>;
}

export function emptyDeviceClaims(): DeviceClaims {
  return { templates: new Map(), claims: new Map() };
}

/** Device classes named by a claim spec, in any resource.k8s.io version (v1beta1 `deviceClassName`, v1beta2/v1 `exactly`, `firstAvailable`). */
function deviceClassesOf(claimSpec: unknown): string[] {
  const requests = asObject(asObject(claimSpec)?.devices)?.requests;
  if (!Array.isArray(requests)) return [];
  const classes: string[] = [];
  const add = (request: unknown): void => {
    const r = asObject(request);
    if (!r) return;
    for (const holder of [r, asObject(r.exactly)]) {
      if (typeof holder?.deviceClassName === 'string') classes.push(holder.deviceClassName);
    }
    if (Array.isArray(r.firstAvailable)) r.firstAvailable.forEach(add);
  };
  requests.forEach(add);
  return classes;
}

/** Records a ResourceClaim or ResourceClaimTemplate of the stream. */
export function recordDeviceClaim(claims: DeviceClaims, object: Plain): void {
  const name = asObject(object.metadata)?.name;
  if (typeof name !== 'string') return;
  if (object.kind === 'ResourceClaim') claims.claims.set(name, deviceClassesOf(object.spec));
  if (object.kind === 'ResourceClaimTemplate') claims.templates.set(name, deviceClassesOf(asObject(object.spec)?.spec));
}

/**
 * The DRA objects a pod spec refers to, by name: a door that sees only the
 * pod (the webhook) reads them from the cluster and records them.
 */
export function claimReferences(podSpec: unknown): { claims: string[]; templates: string[] } {
  const refs = { claims: [] as string[], templates: [] as string[] };
  const list = asObject(podSpec)?.resourceClaims;
  if (!Array.isArray(list)) return refs;
  for (const entry of list) {
    // Kubernetes 1.31+ puts the reference at the top; 1.26-1.30 under `source`.
    const ref = { ...asObject(asObject(entry)?.source), ...asObject(entry) };
    if (typeof ref.resourceClaimTemplateName === 'string') refs.templates.push(ref.resourceClaimTemplateName);
    else if (typeof ref.resourceClaimName === 'string') refs.claims.push(ref.resourceClaimName);
  }
  return refs;
}

export interface GpuSignal {
  /** Which row of the table fired. */
  signal: 'resource' | 'runtimeClass' | 'visibleDevices' | 'cudaVisibleDevices' | 'dra';
  /** For explain: `nvidia.com/gpu=2`, `runtimeClassName nvidia`, … */
  detail: string;
  /** The GPU is a MIG instance (a `nvidia.com/mig-*` resource, a `MIG-` device, the `mig.nvidia.com` class): nvidia-smi cannot read its memory. */
  mig?: true;
}

/**
 * A device list names a MIG instance: `MIG-<uuid>`, the old `MIG-GPU-<uuid>/gi/ci`, or, in
 * NVIDIA_VISIBLE_DEVICES, `<gpu index>:<mig index>` (nvidia-container-toolkit's index form;
 * CUDA_VISIBLE_DEVICES takes no such entry, isCudaDeviceList refuses it first).
 */
function namesMigDevice(list: string): boolean {
  return list.split(',').some((entry) => entry.trim().startsWith('MIG-') || isMigIndex(entry.trim()));
}

/** `/^\d+:\d+$/.test(entry)`, by a scan (a render runs it per container; docs/benchmarks.md). */
function isMigIndex(entry: string): boolean {
  const colon = entry.indexOf(':');
  if (colon < 1 || colon === entry.length - 1) return false;
  for (let i = 0; i < entry.length; i++) if (i !== colon && !isAsciiDigit(entry.charCodeAt(i))) return false;
  return true;
}

/** The signal, marked as a MIG instance where it is one. */
function withMig(signal: GpuSignal, mig: boolean): GpuSignal {
  return mig ? { ...signal, mig: true } : signal;
}

export interface GpuFindings {
  signals: GpuSignal[];
  /** DRA claims of the container defined outside the stream: cannot tell. */
  unknownClaims: string[];
}

export interface GpuInput {
  container: Plain;
  podSpec: Plain;
  claims: DeviceClaims;
}

/** Resource names of NVIDIA GPUs: whole (`gpu`), time-sliced renames (`gpu.shared`), MIG slices (`mig-1g.10gb`). */
function isNvidiaGpuResource(name: string): boolean {
  return name === 'nvidia.com/gpu' || name.startsWith('nvidia.com/gpu.') || name.startsWith('nvidia.com/mig-');
}

function quantity(value: unknown): number {
  if (typeof value === 'number') return value;
  if (typeof value === 'string') {
    const n = Number(value.trim());
    return Number.isFinite(n) ? n : 0;
  }
  return 0;
}

function resourceSignals({ container }: GpuInput): GpuSignal[] {
  const resources = asObject(container.resources);
  const found = new Map<string, number>();
  for (const list of [resources?.requests, resources?.limits]) {
    const entries = asObject(list);
    if (!entries) continue;
    // Extended resources must have limits == requests; limits win when both are given.
    for (const [name, value] of Object.entries(entries)) if (isNvidiaGpuResource(name) && quantity(value) > 0) found.set(name, quantity(value));
  }
  return [...found].map(([name, n]) => withMig({ signal: 'resource', detail: `${name}=${n}` }, name.startsWith('nvidia.com/mig-')));
}

/** RuntimeClasses of the NVIDIA Container Toolkit / GPU Operator: `nvidia`, `nvidia-cdi`, `nvidia-legacy`. */
/**
 * `/^nvidia([-.][a-z0-9.-]*)?$/.test(name)`. A scan, not the regex: a render checks every
 * pod, in a fresh process where a regex costs its compilation on its first runs (docs/benchmarks.md).
 */
export function isNvidiaRuntimeClass(name: string): boolean {
  if (!name.startsWith('nvidia')) return false;
  if (name.length === 6) return true;
  if (name.charCodeAt(6) !== 0x2d && name.charCodeAt(6) !== 0x2e) return false;
  for (let i = 7; i < name.length; i++) {
    const c = name.charCodeAt(i);
    if (!(c >= 0x61 && c <= 0x7a) && !isAsciiDigit(c) && c !== 0x2e && c !== 0x2d) return false;
  }
  return true;
}

function runtimeClassSignals({ podSpec }: GpuInput): GpuSignal[] {
  const name = podSpec.runtimeClassName;
  return typeof name === 'string' && isNvidiaRuntimeClass(name) ? [{ signal: 'runtimeClass', detail: `runtimeClassName ${name}` }] : [];
}

/** The NVIDIA runtime hands the listed devices to a container; `void`, `none` and empty hand none. */
function visibleDevicesSignals({ container }: GpuInput): GpuSignal[] {
  if (!Array.isArray(container.env)) return [];
  // The kubelet uses the last definition of a name.
  const entry = [...container.env].reverse().find((e) => asObject(e)?.name === 'NVIDIA_VISIBLE_DEVICES') as Plain | undefined;
  const value = entry?.value;
  if (typeof value !== 'string') return [];
  const v = value.trim();
  return v === '' || v === 'void' || v === 'none' ? [] : [withMig({ signal: 'visibleDevices', detail: `NVIDIA_VISIBLE_DEVICES=${v}` }, namesMigDevice(v))];
}

/** The value the kubelet gives an env var: its last literal definition (a `valueFrom` is not known here). */
function literalEnv(container: Plain, name: string): string | undefined {
  if (!Array.isArray(container.env)) return undefined;
  const entry = [...container.env].reverse().find((e) => asObject(e)?.name === name) as Plain | undefined;
  return typeof entry?.value === 'string' ? entry.value : undefined;
}

/**
 * A CUDA device list: indices (`0`, `0,1`) or device UUIDs (`GPU-…`, `MIG-…`),
 * as CUDA reads CUDA_VISIBLE_DEVICES. Empty, `-1`, `none`, `void`,
 * `NoDevFiles` or anything else hide the devices (CUDA stops at the first
 * entry it cannot read), so they are no signal.
 */
const CUDA_DEVICE = /^(\d+|GPU-[0-9A-Fa-f-]+|MIG-[0-9A-Za-z/-]+)$/;

export function isCudaDeviceList(value: string): boolean {
  const entries = value.trim().split(',').map((e) => e.trim());
  return entries.length > 0 && entries.every((e) => CUDA_DEVICE.test(e));
}

/**
 * Where the cluster's default container runtime is NVIDIA's, every container
 * sees the GPUs with no resource asked for; a container that names the CUDA
 * devices it uses means to run on them. AMD's HIP reads the same variable, so
 * it counts only when the container asks for no other vendor's accelerator.
 */
function cudaVisibleDevicesSignals(input: GpuInput): GpuSignal[] {
  const value = literalEnv(input.container, 'CUDA_VISIBLE_DEVICES');
  if (value === undefined || !isCudaDeviceList(value) || otherAccelerators(input.container, false).length) return [];
  return [withMig({ signal: 'cudaVisibleDevices', detail: `CUDA_VISIBLE_DEVICES=${value.trim()}` }, namesMigDevice(value))];
}

/** Accelerators of other vendors, by resource name: what a skip reason names instead of "no GPU". */
const OTHER_ACCELERATORS: readonly { test: (name: string) => boolean; what: string }[] = [
  { test: (n) => n === 'amd.com/gpu', what: 'AMD GPU' },
  { test: (n) => n.startsWith('gpu.intel.com/'), what: 'Intel GPU' },
  { test: (n) => n.startsWith('habana.ai/'), what: 'Intel Gaudi' },
  { test: (n) => n === 'google.com/tpu', what: 'Google TPU' },
  { test: (n) => n.startsWith('aws.amazon.com/neuron'), what: 'AWS Neuron' },
  // vllm-ascend's samples ask for huawei.com/Ascend910 (and Ascend310P, …) from Huawei's device plugin.
  { test: (n) => n.startsWith('huawei.com/ascend'), what: 'Huawei Ascend NPU' },
  { test: (n) => n.startsWith('cambricon.com/'), what: 'Cambricon MLU' },
  { test: (n) => n.startsWith('hygon.com/'), what: 'Hygon DCU' },
  { test: (n) => n.startsWith('metax-tech.com/'), what: 'MetaX GPU' },
  { test: (n) => n.startsWith('iluvatar.ai/'), what: 'Iluvatar GPU' },
  { test: (n) => n.startsWith('enflame.com/'), what: 'Enflame GCU' },
  { test: (n) => n.startsWith('mthreads.com/'), what: 'Moore Threads GPU' },
];

/** Extended resources that are no accelerator: a vLLM container may ask for them beside one. */
function isPlainResource(name: string): boolean {
  return !name.includes('/') || name.startsWith('hugepages-') || name.startsWith('kubernetes.io/') || name.includes('.kubernetes.io/') || name.startsWith('rdma/') || name.startsWith('nvidia.com/');
}

/**
 * The other vendors' accelerators a container asks for, e.g. `Google TPU (google.com/tpu=4)`;
 * with `anyDevice`, also a device of a vendor the table does not name (`the device x.com/y=1`).
 */
export function otherAccelerators(container: Plain, anyDevice = true): string[] {
  const resources = asObject(container.resources);
  const found = new Map<string, string>();
  for (const list of [resources?.requests, resources?.limits]) {
    for (const [name, value] of Object.entries(asObject(list) ?? {})) {
      if (quantity(value) <= 0) continue;
      const row = OTHER_ACCELERATORS.find((r) => r.test(name.toLowerCase()));
      // A vendor's device this table does not name is still a device: named as what it is.
      if (row) found.set(name, `${row.what} (${name}=${quantity(value)})`);
      else if (anyDevice && !isPlainResource(name)) found.set(name, `the device ${name}=${quantity(value)}`);
    }
  }
  return [...found.values()];
}

function draFindings({ container, podSpec, claims }: GpuInput): GpuFindings {
  const used = asObject(container.resources)?.claims;
  const findings: GpuFindings = { signals: [], unknownClaims: [] };
  if (!Array.isArray(used)) return findings;
  const podClaims = Array.isArray(podSpec.resourceClaims) ? (podSpec.resourceClaims as unknown[]).map(asObject) : [];
  for (const use of used) {
    const name = asObject(use)?.name;
    if (typeof name !== 'string') continue;
    const podClaim = podClaims.find((c) => c?.name === name);
    // Kubernetes 1.31+ puts the reference at the top; 1.26-1.30 under `source`.
    const ref = { ...asObject(podClaim?.source), ...podClaim };
    const templateName = ref.resourceClaimTemplateName;
    const claimName = ref.resourceClaimName;
    const classes =
      typeof templateName === 'string' ? claims.templates.get(templateName) : typeof claimName === 'string' ? claims.claims.get(claimName) : undefined;
    const label = typeof templateName === 'string' ? `ResourceClaimTemplate ${templateName}` : typeof claimName === 'string' ? `ResourceClaim ${claimName}` : `claim ${name}`;
    if (classes === undefined) {
      findings.unknownClaims.push(`${label} (claim "${name}")`);
      continue;
    }
    const nvidia = classes.filter((c) => NVIDIA_DEVICE_CLASSES.includes(c));
    if (nvidia.length) findings.signals.push(withMig({ signal: 'dra', detail: `DRA ${label} → ${[...new Set(nvidia)].join(', ')}` }, nvidia.every((c) => c === MIG_DEVICE_CLASS)));
  }
  return findings;
}

/** The GPU signal table: each row reads one way a container gets an NVIDIA GPU. */
const SIGNALS: readonly ((input: GpuInput) => GpuSignal[])[] = [resourceSignals, runtimeClassSignals, visibleDevicesSignals, cudaVisibleDevicesSignals];

/** What was checked, for a skip reason. */
export const SIGNALS_CHECKED = 'nvidia.com/gpu* or nvidia.com/mig-* resources, an NVIDIA runtimeClassName, NVIDIA_VISIBLE_DEVICES, a CUDA_VISIBLE_DEVICES device list, DRA claims of an NVIDIA device class';

export function nvidiaGpuSignals(input: GpuInput): GpuFindings {
  const dra = draFindings(input);
  return { signals: [...SIGNALS.flatMap((row) => row(input)), ...dra.signals], unknownClaims: dra.unknownClaims };
}
