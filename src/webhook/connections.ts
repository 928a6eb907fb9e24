/**
 * The cap on a port's open connections, one rule for both of the webhook's
 * ports (the HTTPS port, ./transport.ts; the plain-HTTP metrics port,
 * ./metrics-port.ts): at the cap, the connection idle the longest is closed
 * to make room (a client that keeps its connections busy, as the API server
 * and a scraper do, keeps them; an idle flood goes first), and a new one is
 * refused only when none is idle. A connection that has sent nothing yet is
 * idle since it opened.
 */
import type { Socket } from 'node:net';

/** One connection's books: requests (or HTTP/2 streams) open on it, and since when it is idle. */
export interface Connection {
  busy: number;
  idleSince: number;
  close(): void;
}

export class ConnectionCap {
  private readonly sockets = new Set<Socket>();

  constructor(
    readonly max: number,
    /** The connections that may be closed to make room (those the port keeps books of). */
    private readonly open: () => Iterable<Connection>,
    /** Counts the cap when it bites: a connection closed to make room, or a new one refused. */
    private readonly hit: (what: 'idle-closed' | 'refused') => void,
  ) {}

  /** Takes a new connection, closing the longest idle one at the cap; false (and the socket destroyed) when none is idle. */
  admit(socket: Socket): boolean {
    if (this.sockets.size >= this.max) {
      let oldest: Connection | undefined;
      for (const c of this.open()) if (c.busy === 0 && (!oldest || c.idleSince < oldest.idleSince)) oldest = c;
      if (!oldest) {
        socket.destroy();
        this.hit('refused');
        return false;
      }
      oldest.close();
      this.hit('idle-closed');
    }
    this.sockets.add(socket);
    socket.on('close', () => this.sockets.delete(socket));
    return true;
  }

  /** Connections open now. */
  get size(): number {
    return this.sockets.size;
  }

  /** Closes every connection at once. */
  destroyAll(): void {
    for (const socket of this.sockets) socket.destroy();
  }
}
