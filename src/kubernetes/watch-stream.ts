/**
 * A watch's answer (`?watch=1`) read as it streams in: the API server writes
 * one JSON object a line, `{"type": "ADDED"|"MODIFIED"|"DELETED"|"BOOKMARK"|
 * "ERROR", "object": {...}}`. Each line is parsed alone and handed out as it
 * completes; a line longer than the limit (an event is one object: etcd
 * keeps objects of at most 1.5 MiB by default) or one that is not an event
 * stops the read with the reason.
 */
import { asObject, type Plain } from '../core/index.js';

export interface WatchEvent {
  type: 'ADDED' | 'MODIFIED' | 'DELETED' | 'BOOKMARK' | 'ERROR';
  object: Plain;
}

const EVENT_TYPES: ReadonlySet<string> = new Set(['ADDED', 'MODIFIED', 'DELETED', 'BOOKMARK', 'ERROR']);

/** The answer is not a stream of events, or an event is over its limit. */
export class WatchStreamError extends Error {}

export class WatchScanner {
  private pending: Buffer = Buffer.alloc(0);

  constructor(private readonly maxEventBytes: number) {}

  /** The events the bytes complete, in order. */
  push(chunk: Buffer): WatchEvent[] {
    this.pending = this.pending.length === 0 ? chunk : Buffer.concat([this.pending, chunk]);
    const events: WatchEvent[] = [];
    for (let newline = this.pending.indexOf(10); newline !== -1; newline = this.pending.indexOf(10)) {
      const line = this.pending.subarray(0, newline);
      this.pending = this.pending.subarray(newline + 1);
      if (line.length > this.maxEventBytes) throw this.tooLarge();
      const text = line.toString('utf8').trim();
      if (text !== '') events.push(eventOf(text));
    }
    if (this.pending.length > this.maxEventBytes) throw this.tooLarge();
    return events;
  }

  private tooLarge(): WatchStreamError {
    return new WatchStreamError(`an event is larger than ${this.maxEventBytes} bytes`);
  }
}

function eventOf(line: string): WatchEvent {
  let event: Plain | undefined;
  try {
    event = asObject(JSON.parse(line));
  } catch {
    throw new WatchStreamError('a line is not JSON');
  }
  const object = asObject(event?.object);
  if (!event || typeof event.type !== 'string' || !EVENT_TYPES.has(event.type) || !object) throw new WatchStreamError('a line is not an event (type and object)');
  return { type: event.type as WatchEvent['type'], object };
}
