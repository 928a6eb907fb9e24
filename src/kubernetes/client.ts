/**
 * A small Kubernetes API client: GET one object, LIST a collection page by
 * page (`limit`/`continue`, as kubectl's --chunk-size), over HTTPS with the
 * connection's CA, client certificate, bearer token (`token`, a `tokenFile`
 * read again for each request, or an exec plugin's credential, run again
 * when it expires or the API server answers 401) and impersonation headers.
 *
 * An API error keeps the API server's own Status message (a 403 names the
 * verb, resource and identity that RBAC refused), with the HTTP status and
 * reason as values (KubernetesApiError) for the caller to decide on.
 */
import { readFileSync } from 'node:fs';
import { Agent, request } from 'node:https';
import { PreflightError } from '../core/errors.js';
import { asObject, type Plain } from '../core/values.js';
import { runExecPlugin, type ExecCredential } from './exec.js';
import type { Connection } from './kubeconfig.js';


/** An answer of the API server that is not 2xx. */
export class KubernetesApiError extends Error {
  constructor(
    readonly status: number,
    /** The Status object's reason (Forbidden, NotFound, Expired, …), when it has one. */
    readonly reason: string | undefined,
    readonly path: string,
    message: string,
  ) {
    super(message);
    this.name = 'KubernetesApiError';
  }
}

/** TLS options and headers of a request made outside the client (KubernetesClient.authentication). */
export interface RequestAuthentication {
  tls: { ca?: string; cert?: string; key?: string; rejectUnauthorized: boolean; servername?: string };
  headers: Record<string, string | string[]>;
  /** Whether a 401 may be answered by running the exec credential plugin again. */
  canRefresh: boolean;
}

export interface ClientSettings {
  /** Per request: connect, answer and body. */
  requestTimeoutMs: number;
  /** The exec plugin's environment. */
  env: Readonly<Record<string, string | undefined>>;
  /** Largest body read (a page of a list). */
  maxBodyBytes?: number;
}

const DEFAULT_MAX_BODY = 256 << 20;

const itemsOf = (list: Plain): Plain[] => (Array.isArray(list.items) ? list.items : []).map((item) => asObject(item) ?? {});

/** Why a connection failed, in words, for the Node error codes an operator meets. */
export const CONNECT_WHY: Record<string, string> = {
  ECONNREFUSED: 'nothing listens there',
  ENOTFOUND: 'the host name does not resolve',
  EAI_AGAIN: 'the host name does not resolve (DNS unavailable)',
  ETIMEDOUT: 'the connection timed out',
  EHOSTUNREACH: 'the host is unreachable',
  ECONNRESET: 'the connection was reset',
  DEPTH_ZERO_SELF_SIGNED_CERT: "the server's certificate is self-signed and not trusted: give the cluster's CA (certificate-authority-data)",
  SELF_SIGNED_CERT_IN_CHAIN: "the server's certificate chain ends in a CA that is not trusted: give the cluster's CA (certificate-authority-data)",
  UNABLE_TO_VERIFY_LEAF_SIGNATURE: "the server's certificate is not signed by a trusted CA: give the cluster's CA (certificate-authority-data)",
  UNABLE_TO_GET_ISSUER_CERT_LOCALLY: "the server's certificate is not signed by a trusted CA: give the cluster's CA (certificate-authority-data)",
  ERR_TLS_CERT_ALTNAME_INVALID: "the server's certificate is not for this host name (tls-server-name names another)",
  CERT_HAS_EXPIRED: "the server's certificate has expired",
};

export class KubernetesClient {
  private agent: Agent | undefined;
  private agentKey = '';
  private credential: ExecCredential | undefined;

  constructor(
    readonly connection: Connection,
    private readonly settings: ClientSettings,
  ) {}

  /** GET of one object (or a List). */
  async get(path: string): Promise<Plain> {
    return this.request(path, false);
  }

  /**
   * A collection's items, `limit` at a time, page by page (so that a caller
   * holds one page, not the whole cluster). A continue token that expired
   * while the pages were read (410 Expired: the list changed beyond what etcd
   * keeps) is followed by one full list, as client-go's pager does: items of
   * the pages before come again in it (tell them apart by metadata.uid).
   */
  async *pages(path: string, limit: number): AsyncGenerator<Plain[]> {
    let next: string | undefined;
    for (;;) {
      const query = new URLSearchParams({ limit: String(limit), ...(next !== undefined && { continue: next }) });
      let page: Plain;
      try {
        page = await this.get(`${path}${path.includes('?') ? '&' : '?'}${query}`);
      } catch (error) {
        if (next !== undefined && error instanceof KubernetesApiError && error.status === 410) {
          yield itemsOf(await this.get(path));
          return;
        }
        throw error;
      }
      yield itemsOf(page);
      const token = asObject(page.metadata)?.continue;
      if (typeof token !== 'string' || token === '') return;
      next = token;
    }
  }

  /** Every item of a collection (for small ones: webhook configurations, namespaces). */
  async list(path: string, limit: number): Promise<Plain[]> {
    const items: Plain[] = [];
    const seen = new Set<string>();
    for await (const page of this.pages(path, limit)) {
      for (const item of page) {
        const uid = asObject(item.metadata)?.uid;
        if (typeof uid === 'string' && seen.has(uid)) continue;
        if (typeof uid === 'string') seen.add(uid);
        items.push(item);
      }
    }
    return items;
  }

  private async credentialNow(refresh: boolean): Promise<ExecCredential | undefined> {
    const exec = this.connection.exec;
    if (!exec) return undefined;
    if (refresh || !this.credential || (this.credential.expires !== undefined && this.credential.expires <= Date.now() + 10_000)) {
      this.credential = await runExecPlugin(exec, this.settings.env);
    }
    return this.credential;
  }

  /** The TLS agent for this certificate and key; a new one when an exec plugin hands out another pair. */
  private agentFor(cert: string | undefined, key: string | undefined): Agent {
    const agentKey = `${cert ?? ''}\n${key ?? ''}`;
    if (!this.agent || agentKey !== this.agentKey) {
      this.agent?.destroy();
      const c = this.connection;
      this.agent = new Agent({ keepAlive: true, maxSockets: 4, ca: c.ca, cert, key, rejectUnauthorized: !c.insecureSkipTlsVerify, servername: c.tlsServerName });
      this.agentKey = agentKey;
    }
    return this.agent;
  }

  private bearer(credential: ExecCredential | undefined): string | undefined {
    if (credential?.token !== undefined) return credential.token;
    const c = this.connection;
    if (c.tokenFile !== undefined) {
      try {
        return readFileSync(c.tokenFile, 'utf8').trim();
      } catch (error) {
        throw new PreflightError('KUBECONFIG', `cannot read the token file ${c.tokenFile}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`, { fix: `check the tokenFile of ${c.origin}` });
      }
    }
    return c.token;
  }

  private async request(path: string, retried: boolean): Promise<Plain> {
    const c = this.connection;
    const credential = await this.credentialNow(retried);
    const agent = this.agentFor(credential?.clientCertificate ?? c.clientCertificate, credential?.clientKey ?? c.clientKey);
    const headers: Record<string, string | string[]> = { Accept: 'application/json', 'User-Agent': 'vram-preflight-audit' };
    const token = this.bearer(credential);
    if (token) headers.Authorization = `Bearer ${token}`;
    if (c.impersonate?.user) headers['Impersonate-User'] = c.impersonate.user;
    if (c.impersonate?.uid) headers['Impersonate-Uid'] = c.impersonate.uid;
    if (c.impersonate?.groups.length) headers['Impersonate-Group'] = c.impersonate.groups;
    const url = new URL(`${c.server}${path}`);
    try {
      return await this.send(url, agent, headers, path);
    } catch (error) {
      // An exec credential the API server no longer takes: run the plugin again, once (client-go does the same).
      if (!retried && c.exec && error instanceof KubernetesApiError && error.status === 401) return this.request(path, true);
      throw error;
    }
  }

  private send(url: URL, agent: Agent, headers: Record<string, string | string[]>, path: string): Promise<Plain> {
    const limit = this.settings.maxBodyBytes ?? DEFAULT_MAX_BODY;
    const timeoutMs = this.settings.requestTimeoutMs;
    return new Promise((resolve, reject) => {
      const req = request(url, { agent, headers, timeout: timeoutMs }, (res) => {
        const chunks: Buffer[] = [];
        let size = 0;
        res.on('data', (chunk: Buffer) => {
          size += chunk.length;
          if (size > limit) req.destroy(new Error(`the answer is larger than ${limit >> 20} MiB`));
          else chunks.push(chunk);
        });
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          let body: Plain | undefined;
          try {
            body = asObject(JSON.parse(text));
          } catch {
            body = undefined;
          }
          const status = res.statusCode ?? 0;
          if (status >= 200 && status < 300 && body) resolve(body);
          else if (status >= 200 && status < 300) reject(new KubernetesApiError(status, undefined, path, `the answer to GET ${path} is not a JSON object`));
          else {
            const message = typeof body?.message === 'string' ? body.message : text.trim().slice(0, 200);
            const reason = typeof body?.reason === 'string' ? body.reason : undefined;
            reject(new KubernetesApiError(status, reason, path, `HTTP ${status}${reason ? ` ${reason}` : ''}: ${message || 'no message'}`));
          }
        });
        res.on('error', reject);
      });
      req.on('timeout', () => req.destroy(Object.assign(new Error(`no answer within ${timeoutMs / 1000} s`), { code: 'ETIMEDOUT' })));
      req.on('error', (error: NodeJS.ErrnoException) => {
        const why = error.code ? CONNECT_WHY[error.code] : undefined;
        // kubectl would go through a proxy named in the environment; this client connects directly.
        const env = this.settings.env;
        const proxy = env.HTTPS_PROXY || env.https_proxy ? '; HTTPS_PROXY is set, and vram-preflight audit connects directly, without a proxy' : '';
        reject(new PreflightError('KUBERNETES_API', `cannot reach the Kubernetes API at ${this.connection.server} (${this.connection.origin}): ${error.code ?? ''}${error.code ? ' ' : ''}${why ?? error.message}${proxy}`, {
          fix: 'check that the cluster is reachable from here with the same kubeconfig (kubectl get --raw /version)',
        }));
      });
      req.end();
    });
  }

  /**
   * What a request this client does not send itself (a POST, a watch, a log,
   * a WebSocket upgrade: ./requests.ts, ./websocket.ts) needs to be sent as
   * its own are: the TLS options and the headers that say who we are.
   * `refresh` runs an exec credential plugin again (after a 401).
   */
  async authentication(refresh = false): Promise<RequestAuthentication> {
    const c = this.connection;
    const credential = await this.credentialNow(refresh);
    const headers: Record<string, string | string[]> = {};
    const token = this.bearer(credential);
    if (token) headers.Authorization = `Bearer ${token}`;
    if (c.impersonate?.user) headers['Impersonate-User'] = c.impersonate.user;
    if (c.impersonate?.uid) headers['Impersonate-Uid'] = c.impersonate.uid;
    if (c.impersonate?.groups.length) headers['Impersonate-Group'] = c.impersonate.groups;
    return {
      tls: { ca: c.ca, cert: credential?.clientCertificate ?? c.clientCertificate, key: credential?.clientKey ?? c.clientKey, rejectUnauthorized: !c.insecureSkipTlsVerify, servername: c.tlsServerName },
      headers,
      canRefresh: c.exec !== undefined,
    };
  }

  close(): void {
    this.agent?.destroy();
    this.agent = undefined;
  }
}
