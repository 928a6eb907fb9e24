/**
 * One HTTP(S) exchange with a hard deadline, through an HTTP proxy when the
 * environment names one (CONNECT tunnel for HTTPS, absolute-form request for
 * plain HTTP), honouring NO_PROXY. Node built-ins only, loaded on first use so
 * that the CLI pays nothing when no lookup is needed.
 */
import type { IncomingHttpHeaders, IncomingMessage, ClientRequest } from 'node:http';
import { BlockList, isIP, type Socket } from 'node:net';
import { isPublicAddress, publicOnlyLookup } from './allow.js';

export type Env = Readonly<Record<string, string | undefined>>;

export interface HttpRequest {
  method: 'GET' | 'HEAD' | 'POST';
  url: URL;
  headers: Record<string, string>;
  body?: string;
  /** Connect + answer + body, all together. */
  timeoutMs: number;
  env: Env;
  /** Extra CA certificates (PEM), trusted next to Node's own roots. */
  ca?: readonly string[];
  /** Skip certificate verification (insecure registries only, as Docker does). */
  insecureTls?: boolean;
  /** Connect only to public addresses, checked on the resolved address (./allow.ts); the proxy, when one is used, is the operator's. */
  publicOnly?: boolean;
  maxBytes: number;
}

export interface HttpResponse {
  status: number;
  headers: IncomingHttpHeaders;
  body: Buffer;
  /** The URL that answered (after redirects). */
  url: URL;
}

export type NetworkErrorKind = 'timeout' | 'tls' | 'network' | 'proxy';

/** The exchange did not produce an HTTP answer. */
export class NetworkError extends Error {
  constructor(readonly kind: NetworkErrorKind, message: string) {
    super(message);
  }
}

interface Modules {
  http: typeof import('node:http');
  https: typeof import('node:https');
  tls: typeof import('node:tls');
  net: typeof import('node:net');
}
let modules: Promise<Modules> | undefined;
function load(): Promise<Modules> {
  modules ??= Promise.all([import('node:http'), import('node:https'), import('node:tls'), import('node:net')]).then(([http, https, tls, net]) => ({ http, https, tls, net }));
  return modules;
}

export function isLoopbackHost(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '').toLowerCase();
  return h === 'localhost' || h.endsWith('.localhost') || /^127\.\d+\.\d+\.\d+$/.test(h) || h === '::1';
}

function defaultPort(protocol: string): string {
  return protocol === 'https:' ? '443' : '80';
}

/**
 * NO_PROXY as curl and Go read it: comma- or space-separated entries; `*`
 * matches everything; `example.com` matches it and its subdomains,
 * `.example.com` only its subdomains; `host:port` only that port; IP
 * addresses and IPv4/IPv6 CIDR blocks match addresses.
 */
export function noProxyMatches(noProxy: string | undefined, host: string, port: string): boolean {
  if (!noProxy) return false;
  const h = host.replace(/^\[|\]$/g, '').toLowerCase();
  for (let entry of noProxy.split(/[\s,]+/)) {
    entry = entry.trim().toLowerCase();
    if (entry === '') continue;
    if (entry === '*') return true;
    let entryPort: string | undefined;
    const bracket = /^\[([^\]]+)\](?::(\d+))?$/.exec(entry);
    if (bracket) {
      entry = bracket[1]!;
      entryPort = bracket[2];
    } else {
      const m = /^([^:]+):(\d+)$/.exec(entry);
      if (m) {
        entry = m[1]!;
        entryPort = m[2];
      }
    }
    if (entryPort !== undefined && entryPort !== port) continue;
    if (entry.includes('/')) {
      if (cidrContains(entry, h)) return true;
      continue;
    }
    if (entry.startsWith('*.')) entry = entry.slice(1);
    if (entry.startsWith('.')) {
      if (h.endsWith(entry)) return true;
      continue;
    }
    if (h === entry || h.endsWith(`.${entry}`)) return true;
  }
  return false;
}

/** Whether an address lies in a CIDR block (IPv4 or IPv6), by Node's own BlockList. */
function cidrContains(cidr: string, host: string): boolean {
  const slash = cidr.lastIndexOf('/');
  const base = cidr.slice(0, slash);
  const bitsText = cidr.slice(slash + 1);
  const family = isIP(base);
  if (family === 0 || isIP(host) !== family || !/^\d{1,3}$/.test(bitsText) || Number(bitsText) > (family === 4 ? 32 : 128)) return false;
  const type = family === 4 ? 'ipv4' : 'ipv6';
  const block = new BlockList();
  block.addSubnet(base, Number(bitsText), type);
  return block.check(host, type);
}

/** The proxy for this URL, or undefined for a direct connection (loopback is never proxied, as in Go). */
export function proxyFor(url: URL, env: Env): URL | undefined {
  const host = url.hostname;
  if (isLoopbackHost(host)) return undefined;
  const raw = url.protocol === 'https:' ? env.HTTPS_PROXY ?? env.https_proxy : env.HTTP_PROXY ?? env.http_proxy;
  if (!raw) return undefined;
  if (noProxyMatches(env.NO_PROXY ?? env.no_proxy, host, url.port || defaultPort(url.protocol))) return undefined;
  try {
    return new URL(raw.includes('://') ? raw : `http://${raw}`);
  } catch {
    throw new NetworkError('proxy', `proxy setting ${JSON.stringify(raw)} is not a URL`);
  }
}

function proxyAuthorization(proxy: URL): Record<string, string> {
  if (!proxy.username) return {};
  const user = decodeURIComponent(proxy.username);
  const pass = decodeURIComponent(proxy.password);
  return { 'Proxy-Authorization': `Basic ${Buffer.from(`${user}:${pass}`).toString('base64')}` };
}

function describe(err: unknown): { kind: NetworkErrorKind; text: string } {
  const e = err as NodeJS.ErrnoException;
  const code = e?.code ?? '';
  const text = e?.message ?? String(err);
  if (/^ERR_SSL|^ERR_TLS|CERT|EPROTO|SELF_SIGNED|UNABLE_TO_VERIFY|HOSTNAME_MISMATCH|ALTNAME/i.test(code) || /SSL|TLS|certificate/i.test(text)) return { kind: 'tls', text };
  return { kind: 'network', text };
}

/** One request, redirects followed (Authorization is kept only on the same host). */
export async function httpRequest(request: HttpRequest): Promise<HttpResponse> {
  const deadline = Date.now() + request.timeoutMs;
  let url = request.url;
  let headers = request.headers;
  let insecureTls = request.insecureTls;
  for (let hop = 0; hop < 6; hop++) {
    const remaining = deadline - Date.now();
    if (remaining <= 0) throw new NetworkError('timeout', `no answer within ${seconds(request.timeoutMs)}`);
    const res = await once({ ...request, url, headers, insecureTls, timeoutMs: remaining }, request.timeoutMs);
    const location = res.headers.location;
    if ([301, 302, 303, 307, 308].includes(res.status) && location && request.method !== 'POST') {
      const next = new URL(location, url);
      if (next.host !== url.host) {
        // Blob downloads are redirected to storage hosts: they get no credentials and full TLS checks.
        headers = Object.fromEntries(Object.entries(headers).filter(([k]) => k.toLowerCase() !== 'authorization'));
        insecureTls = false;
      }
      url = next;
      continue;
    }
    return res;
  }
  throw new NetworkError('network', `too many redirects from ${request.url.host}`);
}

export function seconds(ms: number): string {
  return `${Math.round(ms / 100) / 10} s`;
}

async function once(request: HttpRequest, nominalTimeoutMs: number): Promise<HttpResponse> {
  const { http, https, tls, net } = await load();
  const { url } = request;
  const isHttps = url.protocol === 'https:';
  const port = Number(url.port || defaultPort(url.protocol));
  const proxy = proxyFor(url, request.env);
  const ca = request.ca && request.ca.length > 0 ? [...tls.rootCertificates, ...request.ca] : undefined;
  const servername = /^[\d.]+$|:/.test(url.hostname) ? undefined : url.hostname;
  const path = `${url.pathname}${url.search}`;
  const headers: Record<string, string> = { 'User-Agent': 'vram-preflight', ...request.headers };
  if (request.body !== undefined) headers['Content-Length'] = String(Buffer.byteLength(request.body));

  return new Promise<HttpResponse>((resolve, reject) => {
    let settled = false;
    const sockets: Socket[] = [];
    const requests: ClientRequest[] = [];
    const finish = (err: Error | undefined, res?: HttpResponse) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      for (const r of requests) r.destroy();
      for (const s of sockets) s.destroy();
      if (err) reject(err);
      else resolve(res!);
    };
    const fail = (where: string) => (err: unknown) => {
      if (err instanceof NetworkError) return finish(err);
      const { kind, text } = describe(err);
      finish(new NetworkError(kind, `${where}: ${text}`));
    };
    const timer = setTimeout(() => finish(new NetworkError('timeout', `no answer within ${seconds(nominalTimeoutMs)}`)), request.timeoutMs);

    const onResponse = (res: IncomingMessage) => {
      const chunks: Buffer[] = [];
      let size = 0;
      res.on('data', (chunk: Buffer) => {
        size += chunk.length;
        if (size > request.maxBytes) return finish(new NetworkError('network', `${url.host}: answer larger than ${request.maxBytes} bytes`));
        chunks.push(chunk);
      });
      res.on('end', () => finish(undefined, { status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks), url }));
      res.on('error', fail(url.host));
    };

    const send = (req: ClientRequest) => {
      requests.push(req);
      req.on('response', onResponse);
      req.on('error', fail(url.host));
      req.on('socket', (s) => sockets.push(s));
      req.end(request.body);
    };

    if (!proxy) {
      const host = url.hostname.replace(/^\[|\]$/g, '');
      // An address written as such is never looked up: check it here; a name is checked on what it resolves to.
      if (request.publicOnly && net.isIP(host) !== 0 && !isPublicAddress(host)) return finish(new NetworkError('network', `${url.host}: not a public address`));
      const options = { host, port, path, method: request.method, headers, agent: false as const, ...(request.publicOnly ? { lookup: publicOnlyLookup } : {}) };
      send(isHttps ? https.request({ ...options, ca, servername, rejectUnauthorized: !request.insecureTls }) : http.request(options));
      return;
    }
    const proxyPort = Number(proxy.port || defaultPort(proxy.protocol));
    const proxyWhere = `proxy ${proxy.host}`;
    if (!isHttps) {
      // Plain HTTP through a proxy: absolute-form request line.
      send(http.request({ host: proxy.hostname, port: proxyPort, path: url.href, method: request.method, headers: { ...headers, Host: url.host, ...proxyAuthorization(proxy) }, agent: false }));
      return;
    }
    const connect = http.request({ host: proxy.hostname, port: proxyPort, method: 'CONNECT', path: `${url.hostname}:${port}`, headers: { Host: `${url.hostname}:${port}`, ...proxyAuthorization(proxy) }, agent: false });
    requests.push(connect);
    connect.on('socket', (s) => sockets.push(s));
    connect.on('error', fail(proxyWhere));
    connect.on('connect', (res: IncomingMessage, socket: Socket) => {
      sockets.push(socket);
      if (res.statusCode !== 200) return finish(new NetworkError('proxy', `${proxyWhere} refused CONNECT to ${url.hostname}:${port}: ${res.statusCode} ${res.statusMessage ?? ''}`.trim()));
      const secure = tls.connect({ socket, servername, ca, rejectUnauthorized: !request.insecureTls });
      sockets.push(secure);
      secure.on('error', fail(url.host));
      send(http.request({ host: url.hostname, port, path, method: request.method, headers: { ...headers, Host: url.host }, createConnection: () => secure }));
    });
    connect.end();
  });
}
