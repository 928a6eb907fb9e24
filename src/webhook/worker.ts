/**
 * Large bodies are parsed and decided off the event loop, in a worker
 * thread: JSON.parse of a 3 MiB pod of many keys or list items takes
 * 150-300 ms on one core, and on the one thread that answers every other
 * admission it would hold them all that long (a 2 MB pod of 15,000 vLLM
 * containers held 0.3.0 for 5-7 s). Bodies up to SMALL_BODY (every pod a
 * controller makes) are decided inline, where they cost no hop.
 *
 * The worker runs the same admit() as the main thread; what admit() needs
 * from the process (registry answers, DRA claims, metrics) it asks the main
 * thread for, which owns the caches and the connections. Right after the
 * envelope is read the worker sends the answer to give should the decision
 * not finish by the request's deadline (the pod admitted unchanged, with the
 * reason); at the deadline the worker is ended and a new one started, so no
 * decision can hold the webhook longer than that. Its heap has a limit of its
 * own: a body that exhausts it ends the worker, not the process.
 */
import { isUtf8 } from 'node:buffer';
import { constants, setPriority } from 'node:os';
import { Worker, type MessagePort } from 'node:worker_threads';
import type { Options, RegistryAnswers } from '../core/index.js';
import { admit, DECISION_LATE, type AdmissionDependencies } from './admission.js';
import { invalidAnswer, type Admission } from './answers.js';
import type { ClaimReadResult, ClaimReference } from './claims.js';
import type { Log } from './reload.js';

/** workerData.role of an admission worker (the webhook bundle is its script: src/webhook/main.ts starts the loop). */
export const ADMISSION_WORKER = 'vram-preflight-admission-worker';

type ToWorker =
  | { type: 'admit'; id: number; body: Uint8Array; options: Options; lookups: boolean; claims: boolean }
  | { type: 'reply'; call: number; value: unknown };

type FromWorker =
  | { type: 'started'; id: number; fallback: Admission }
  | { type: 'done'; id: number; admission: Admission }
  | { type: 'lookup'; id: number; call: number; images: string[] }
  | { type: 'claims'; id: number; call: number; namespace: string; references: ClaimReference[] }
  | { type: 'limit'; id: number; limit: Parameters<NonNullable<AdmissionDependencies['limitHit']>>[0] };

/** A call of the worker's to the main thread, before it is numbered. */
type CallRequest = Extract<FromWorker, { call: number }> extends infer C ? (C extends { call: number } ? Omit<C, 'call'> : never) : never;

/**
 * The worker thread gives way to the main thread: it parses and decides
 * large bodies, up to a second of CPU each, and on a two-core node (a hostile
 * client's own encryption taking the other) it would get half of the core
 * that the thread answering every other admission needs. On Linux the nice
 * value belongs to a thread (setpriority(2) on the calling thread: NOTES), so
 * this one runs at +10: where both want the core, the main thread gets ~90 %
 * of it (CFS weights 1024 and 110), and where it is idle the worker has it
 * all. Elsewhere the value is the whole process's: left alone.
 */
export function yieldToMainThread(): boolean {
  if (process.platform !== 'linux') return false;
  try {
    setPriority(constants.priority.PRIORITY_BELOW_NORMAL);
    return true;
  } catch {
    // Not allowed (a seccomp profile that refuses setpriority): the worker runs at the process's priority.
    return false;
  }
}

/** The worker's loop: one admission per message, its calls to the main thread answered by `reply`. */
export function serveAdmissions(port: MessagePort): void {
  yieldToMainThread();
  let nextCall = 1;
  const calls = new Map<number, (value: unknown) => void>();
  const ask = <T>(message: CallRequest): Promise<T> =>
    new Promise((resolve) => {
      const call = nextCall++;
      calls.set(call, resolve as (value: unknown) => void);
      port.postMessage({ ...message, call });
    });
  port.on('message', (message: ToWorker) => {
    if (message.type === 'reply') {
      calls.get(message.call)?.(message.value);
      calls.delete(message.call);
      return;
    }
    const { id } = message;
    const bytes = Buffer.from(message.body.buffer, message.body.byteOffset, message.body.byteLength);
    const decided = !isUtf8(bytes)
      ? Promise.resolve(invalidAnswer('the body is not UTF-8'))
      : admit(bytes.toString('utf8'), {
          options: message.options,
          lookup: message.lookups ? (images) => ask<[string, unknown][]>({ type: 'lookup', id, images: [...images] }).then((entries) => new Map(entries) as RegistryAnswers) : undefined,
          readClaims: message.claims ? (namespace, references) => ask<ClaimReadResult>({ type: 'claims', id, namespace, references: [...references] }) : undefined,
          limitHit: (limit) => port.postMessage({ type: 'limit', id, limit }),
          onReview: (late) => port.postMessage({ type: 'started', id, fallback: late() }),
        });
    void decided.then((admission) => port.postMessage({ type: 'done', id, admission }));
  });
}

interface Job {
  deps: AdmissionDependencies;
  fallback?: Admission;
  finish(admission: Admission): void;
}

/** The main thread's side: one worker, started on the first large body, ended and replaced when a decision overruns. */
export class AdmissionWorker {
  private worker: Worker | undefined;
  private readonly jobs = new Map<number, Job>();
  private nextId = 1;

  constructor(
    /** The script that runs serveAdmissions for workerData.role ADMISSION_WORKER (the webhook bundle). */
    private readonly script: string,
    /** The worker's own heap limit, MiB. */
    private readonly heapMiB: number,
    private readonly log: Log,
  ) {}

  /** Decides one body in the worker; by `deadline` (epoch ms) at the latest, with the fallback answer when the decision overran. */
  admit(body: Buffer, deps: AdmissionDependencies, deadline: number): Promise<Admission> {
    const worker = this.start();
    const id = this.nextId++;
    return new Promise<Admission>((resolve) => {
      const job: Job = {
        deps,
        finish: (admission) => {
          clearTimeout(timer);
          this.jobs.delete(id);
          resolve(admission);
        },
      };
      const timer = setTimeout(() => this.restart(`a decision ran past its deadline`), Math.max(0, deadline - Date.now()));
      this.jobs.set(id, job);
      // The body's bytes move to the worker (no copy) when the Buffer owns its whole ArrayBuffer, as a large body's does.
      const owned = body.byteOffset === 0 && body.byteLength === body.buffer.byteLength;
      const bytes = owned ? new Uint8Array(body.buffer) : new Uint8Array(body);
      const message: ToWorker = { type: 'admit', id, body: bytes, options: deps.options, lookups: deps.lookup !== undefined, claims: deps.readClaims !== undefined };
      worker.postMessage(message, [bytes.buffer as ArrayBuffer]);
    });
  }

  private start(): Worker {
    if (this.worker) return this.worker;
    const worker = new Worker(this.script, { workerData: { role: ADMISSION_WORKER }, resourceLimits: { maxOldGenerationSizeMb: this.heapMiB }, stdout: false, stderr: false });
    worker.unref();
    worker.on('message', (message: FromWorker) => this.receive(worker, message));
    worker.on('error', (error) => this.restart(`the admission worker failed: ${error.message}`));
    worker.on('exit', (code) => {
      if (this.worker === worker) this.restart(`the admission worker exited (${code})`);
    });
    this.worker = worker;
    return worker;
  }

  private receive(worker: Worker, message: FromWorker): void {
    const job = this.jobs.get(message.id);
    if (!job) return;
    const reply = (call: number, value: unknown): void => {
      if (this.worker === worker) worker.postMessage({ type: 'reply', call, value } satisfies ToWorker);
    };
    switch (message.type) {
      case 'started':
        job.fallback = message.fallback;
        return;
      case 'done':
        job.finish(message.admission);
        return;
      case 'limit':
        job.deps.limitHit?.(message.limit);
        return;
      case 'lookup':
        void job.deps.lookup!(message.images).then((answers) => reply(message.call, [...answers]));
        return;
      case 'claims':
        void job.deps.readClaims!(message.namespace, message.references).then((result) => reply(message.call, result));
        return;
    }
  }

  /** Ends the worker; every decision in it gets its fallback (or, with none, a 503: the envelope was never read). */
  private restart(why: string): void {
    const worker = this.worker;
    this.worker = undefined;
    if (this.jobs.size > 0) this.log({ level: 'warn', msg: 'admission worker restarted', reason: why, unfinished: this.jobs.size });
    for (const job of [...this.jobs.values()]) job.finish(job.fallback ?? invalidAnswer(`the body could not be read in time (${DECISION_LATE})`, 503));
    void worker?.terminate();
  }

  close(): void {
    const worker = this.worker;
    this.worker = undefined;
    void worker?.terminate();
  }
}
