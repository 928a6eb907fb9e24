/**
 * Where the Kubernetes API is and how to authenticate to it (a Connection),
 * found the way kubectl (client-go's loading rules) finds it, for a command
 * a person or CI runs (loadConnection):
 *
 * 1. `--kubeconfig FILE`: that file only;
 * 2. `$KUBECONFIG`: its files (`:`-separated; files that do not exist are
 *    skipped), merged: the first file that names a cluster, user or context
 *    gives all of it, and the first that sets `current-context` gives that;
 * 3. `~/.kube/config`, when it exists;
 * 4. in a pod: `KUBERNETES_SERVICE_HOST`/`KUBERNETES_SERVICE_PORT` and the
 *    service account's `token` and `ca.crt`
 *    (/var/run/secrets/kubernetes.io/serviceaccount, or another directory
 *    given explicitly, which also asks for this way and no other).
 *
 * A kubeconfig that holds nothing (`KUBECONFIG=/dev/null`, files that are
 * all missing or empty) means in-cluster where that is possible, as
 * client-go's deferred loading does, and an error that says so elsewhere.
 *
 * A server process (the webhook) finds it as controller-runtime's
 * GetConfig does (loadServerConnection): `--kubeconfig`; else `$KUBECONFIG`
 * when set; else in-cluster, when the pod has its service account; else
 * `~/.kube/config`; else none (the webhook then reads no DRA claims). An
 * explicit API server URL with a credentials directory (the webhook's
 * `--kubernetes-api`) comes first.
 *
 * From a kubeconfig: the current context (or the one asked for), its
 * cluster's server, CA (`certificate-authority` file or `-data`),
 * `insecure-skip-tls-verify` and `tls-server-name`; its user's client
 * certificate and key (files or `-data`), `token`, `tokenFile`, exec
 * credential plugin (client.authentication.k8s.io/v1 and v1beta1: EKS's
 * `aws eks get-token`, GKE's `gke-gcloud-auth-plugin`, kubelogin) and
 * impersonation (`as`, `as-groups`, `as-uid`). Relative paths are read from
 * the directory of the file that holds them. What this client cannot do is
 * refused by name (an `auth-provider`, basic auth, `proxy-url`), never
 * ignored: a connection that quietly drops a setting reaches another cluster
 * or another identity. So is what kubectl refuses: `insecure-skip-tls-verify`
 * together with a CA (the CA would be ignored and the credentials sent to a
 * server nobody verified). A URL quoted in a message never shows a password
 * (redactUserinfo).
 *
 * Nothing here reads the network; files are read through the caller's `readFile`.
 */
import { parse as parseYaml } from 'yaml';
import { asObject, type Plain, PreflightError, redactUserinfo } from '../core/index.js';

/** Where a pod's service account credentials are mounted. */
export const SERVICE_ACCOUNT_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';

/** The exec credential API versions this client speaks (v1alpha1 was removed in Kubernetes 1.24). */
export const EXEC_API_VERSIONS: readonly string[] = ['client.authentication.k8s.io/v1', 'client.authentication.k8s.io/v1beta1'];

export interface ExecPlugin {
  apiVersion: string;
  /** As written; resolved against `dir` when it is a relative path with a slash. */
  command: string;
  args: string[];
  env: { name: string; value: string }[];
  installHint?: string;
  interactiveMode: 'Never' | 'IfAvailable' | 'Always';
  /** The directory of the kubeconfig that names it. */
  dir: string;
  /** The cluster as KUBERNETES_EXEC_INFO describes it, when `provideClusterInfo` is true. */
  cluster?: Record<string, unknown>;
}

export interface Connection {
  /** https://host:port, with the path prefix the kubeconfig gives, without a trailing slash. */
  server: string;
  /** PEM certificates to trust; absent: Node's own roots. */
  ca?: string;
  /** A CA file read again for each request (the service account's ca.crt, which the kubelet updates); it wins over `ca`. */
  caFile?: string;
  insecureSkipTlsVerify: boolean;
  /** The name the server's certificate is checked against, when not the server's host. */
  tlsServerName?: string;
  clientCertificate?: string;
  clientKey?: string;
  token?: string;
  /** Read again for each request (the kubelet rotates a projected token). */
  tokenFile?: string;
  exec?: ExecPlugin;
  impersonate?: { user?: string; uid?: string; groups: string[] };
  /** Where the connection came from, for messages: `kubeconfig FILE, context NAME` or `in-cluster service account (DIR)`. */
  origin: string;
  /** The kubeconfig context used; absent in a pod. */
  context?: string;
}

export interface ConnectionRequest {
  /** `--kubeconfig`. */
  kubeconfig?: string;
  /** `--context`. */
  context?: string;
  /** Service account credentials directory given explicitly: in-cluster, and nothing else. */
  credentialsDir?: string;
  /** https://HOST:PORT of the API server, given explicitly (the webhook's --kubernetes-api): with the credentials directory's token and CA. */
  apiServer?: string;
  env: Readonly<Record<string, string | undefined>>;
  readFile(path: string): string;
  exists(path: string): boolean;
  /** The user's home directory (~/.kube/config). */
  home?: string;
}


function configError(message: string, fix: string): PreflightError {
  return new PreflightError('KUBECONFIG', message, { fix });
}

/** `dir` + `path` unless `path` is absolute. */
function resolvePath(dir: string, path: string): string {
  return path.startsWith('/') ? path : `${dir.replace(/\/+$/, '')}/${path}`;
}

function dirOf(file: string): string {
  const slash = file.lastIndexOf('/');
  return slash === -1 ? '.' : slash === 0 ? '/' : file.slice(0, slash);
}

/** The API server's address in a pod, or undefined outside one. */
export function inClusterServer(env: Readonly<Record<string, string | undefined>>): string | undefined {
  const host = env.KUBERNETES_SERVICE_HOST;
  const port = env.KUBERNETES_SERVICE_PORT;
  if (!host || !port) return undefined;
  return `https://${host.includes(':') ? `[${host}]` : host}:${port}`;
}

/** The connection in a pod: the service account's token and CA (both read again for each request). */
export function inClusterConnection(request: ConnectionRequest): Connection {
  const dir = request.credentialsDir ?? SERVICE_ACCOUNT_DIR;
  const server = request.apiServer !== undefined ? explicitServer(request.apiServer) : inClusterServer(request.env);
  if (!server) {
    throw configError('in-cluster credentials need KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT, which the kubelet sets in every pod; they are not set', 'run it in a pod, or give a kubeconfig (--kubeconfig, KUBECONFIG)');
  }
  let ca: string;
  try {
    ca = request.readFile(`${dir}/ca.crt`);
  } catch (error) {
    throw configError(`cannot read the service account's CA ${dir}/ca.crt: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`, 'mount the service account token (automountServiceAccountToken: true), or name its directory with --kubernetes-credentials-dir');
  }
  if (!request.exists(`${dir}/token`)) {
    throw configError(`no service account token at ${dir}/token`, 'mount the service account token (automountServiceAccountToken: true), or name its directory with --kubernetes-credentials-dir');
  }
  const origin = request.apiServer !== undefined ? `--kubernetes-api with the service account credentials in ${dir}` : `in-cluster service account (${dir})`;
  return { server, ca, caFile: `${dir}/ca.crt`, insecureSkipTlsVerify: false, tokenFile: `${dir}/token`, origin };
}

/** An API server URL given on the command line: https, without a path's trailing slash. */
function explicitServer(text: string): string {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new PreflightError('USAGE', `--kubernetes-api ${JSON.stringify(redactUserinfo(text))} is not a URL`, { fix: 'give https://HOST:PORT of the Kubernetes API' });
  }
  if (url.protocol !== 'https:') throw new PreflightError('USAGE', `--kubernetes-api ${redactUserinfo(text)} is not https`, { fix: 'the Kubernetes API is served over HTTPS; give https://HOST:PORT' });
  return `${url.origin}${url.pathname.replace(/\/+$/, '')}`;
}

interface Loaded {
  clusters: Map<string, { value: Plain; dir: string }>;
  users: Map<string, { value: Plain; dir: string }>;
  contexts: Map<string, Plain>;
  currentContext?: string;
  /** Files that held a kubeconfig. */
  files: string[];
  /** Files read that held nothing (empty, or only a comment): /dev/null. */
  emptyFiles: string[];
}

function readKubeconfig(file: string, request: ConnectionRequest, loaded: Loaded): void {
  let text: string;
  try {
    text = request.readFile(file);
  } catch (error) {
    throw configError(`cannot read kubeconfig ${file}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`, 'check the path given by --kubeconfig or KUBECONFIG');
  }
  let value: unknown;
  try {
    value = parseYaml(text);
  } catch (error) {
    throw configError(`kubeconfig ${file} is not valid YAML: ${(error as Error).message.split('\n')[0]}`, 'check the file (kubectl config view reads the same)');
  }
  if (value === null || value === undefined) {
    loaded.emptyFiles.push(file);
    return;
  }
  const config = asObject(value);
  if (!config) throw configError(`kubeconfig ${file} is not a mapping`, 'a kubeconfig is a mapping with clusters, users and contexts');
  loaded.files.push(file);
  const dir = dirOf(file);
  const named = (key: string): { name: string; value: Plain }[] => {
    const list = config[key];
    if (list === undefined || list === null) return [];
    if (!Array.isArray(list)) throw configError(`kubeconfig ${file}: ${key} is not a list`, 'check the file (kubectl config view reads the same)');
    return list.flatMap((item) => {
      const entry = asObject(item);
      const inner = asObject(entry?.[key.slice(0, -1)]);
      return entry && typeof entry.name === 'string' ? [{ name: entry.name, value: inner ?? {} }] : [];
    });
  };
  // The first file to name an entry gives all of it (client-go's merge).
  for (const { name, value: cluster } of named('clusters')) if (!loaded.clusters.has(name)) loaded.clusters.set(name, { value: cluster, dir });
  for (const { name, value: user } of named('users')) if (!loaded.users.has(name)) loaded.users.set(name, { value: user, dir });
  for (const { name, value: context } of named('contexts')) if (!loaded.contexts.has(name)) loaded.contexts.set(name, context);
  const current = config['current-context'];
  if (loaded.currentContext === undefined && typeof current === 'string' && current !== '') loaded.currentContext = current;
}

/** Text of a `*-data` field (base64) or of the file a path field names. */
function material(entry: { value: Plain; dir: string }, dataKey: string, fileKey: string, what: string, request: ConnectionRequest): string | undefined {
  const data = entry.value[dataKey];
  if (typeof data === 'string' && data !== '') {
    const text = Buffer.from(data, 'base64').toString('utf8');
    if (!text.includes('-----BEGIN')) throw configError(`${what} (${dataKey}) is not base64 of a PEM block`, `give ${dataKey} as base64 of the PEM text (base64 -w0 FILE)`);
    return text;
  }
  const file = entry.value[fileKey];
  if (typeof file === 'string' && file !== '') {
    const path = resolvePath(entry.dir, file);
    try {
      return request.readFile(path);
    } catch (error) {
      throw configError(`cannot read ${what} ${path} (${fileKey}): ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`, `check ${fileKey} in the kubeconfig (a relative path is read from the kubeconfig's directory)`);
    }
  }
  return undefined;
}

const stringList = (value: unknown): string[] => (Array.isArray(value) ? value.filter((v): v is string => typeof v === 'string') : []);

function execPlugin(exec: Plain, dir: string, cluster: Plain, user: string): ExecPlugin {
  const apiVersion = typeof exec.apiVersion === 'string' ? exec.apiVersion : '';
  if (!EXEC_API_VERSIONS.includes(apiVersion)) {
    throw configError(`user "${user}": the exec credential plugin's apiVersion is "${apiVersion}"; this client speaks ${EXEC_API_VERSIONS.join(' and ')}`, 'update the plugin and its kubeconfig entry (v1alpha1 was removed in Kubernetes 1.24)');
  }
  if (typeof exec.command !== 'string' || exec.command === '') throw configError(`user "${user}": the exec credential plugin has no command`, 'give exec.command in the kubeconfig');
  const mode = exec.interactiveMode ?? (apiVersion.endsWith('/v1') ? undefined : 'IfAvailable');
  if (mode !== 'Never' && mode !== 'IfAvailable' && mode !== 'Always') {
    throw configError(`user "${user}": the exec credential plugin's interactiveMode is ${JSON.stringify(mode)}`, 'client.authentication.k8s.io/v1 needs interactiveMode: Never, IfAvailable or Always');
  }
  const env = (Array.isArray(exec.env) ? exec.env : []).flatMap((item) => {
    const entry = asObject(item);
    return entry && typeof entry.name === 'string' ? [{ name: entry.name, value: String(entry.value ?? '') }] : [];
  });
  const plugin: ExecPlugin = { apiVersion, command: exec.command, args: stringList(exec.args), env, installHint: typeof exec.installHint === 'string' ? exec.installHint : undefined, interactiveMode: mode, dir };
  if (exec.provideClusterInfo === true) {
    // KUBERNETES_EXEC_INFO's spec.cluster: the cluster's fields as the plugin needs them, and its exec extension.
    const extensions = Array.isArray(cluster.extensions) ? cluster.extensions.map(asObject) : [];
    const extension = extensions.find((e) => e?.name === 'client.authentication.k8s.io/exec')?.extension;
    plugin.cluster = {
      server: cluster.server,
      ...(cluster['tls-server-name'] !== undefined && { 'tls-server-name': cluster['tls-server-name'] }),
      ...(cluster['insecure-skip-tls-verify'] === true && { 'insecure-skip-tls-verify': true }),
      ...(typeof cluster['certificate-authority-data'] === 'string' && { 'certificate-authority-data': cluster['certificate-authority-data'] }),
      ...(extension !== undefined && { config: extension }),
    };
  }
  return plugin;
}

/** The connection a kubeconfig's context describes. */
function fromKubeconfig(loaded: Loaded, request: ConnectionRequest): Connection {
  const files = loaded.files.join(', ');
  const contextName = request.context ?? loaded.currentContext;
  if (!contextName) {
    throw configError(`kubeconfig ${files} sets no current-context`, `name one with --context (contexts: ${[...loaded.contexts.keys()].join(', ') || 'none'}), or kubectl config use-context NAME`);
  }
  const context = loaded.contexts.get(contextName);
  if (!context) throw configError(`kubeconfig ${files} has no context "${contextName}"`, `use one of: ${[...loaded.contexts.keys()].join(', ') || '(none)'}`);
  const clusterName = typeof context.cluster === 'string' ? context.cluster : '';
  const cluster = loaded.clusters.get(clusterName);
  if (!cluster) throw configError(`context "${contextName}" names cluster "${clusterName}", which the kubeconfig (${files}) does not define`, 'check the context (kubectl config get-contexts)');
  const userName = typeof context.user === 'string' ? context.user : '';
  const user = userName === '' ? { value: {}, dir: cluster.dir } : loaded.users.get(userName);
  if (!user) throw configError(`context "${contextName}" names user "${userName}", which the kubeconfig (${files}) does not define`, 'check the context (kubectl config get-contexts)');

  const server = cluster.value.server;
  if (typeof server !== 'string' || server === '') throw configError(`cluster "${clusterName}" has no server`, 'give clusters[].cluster.server in the kubeconfig');
  let url: URL;
  try {
    url = new URL(server);
  } catch {
    throw configError(`cluster "${clusterName}": server "${redactUserinfo(server)}" is not a URL`, 'write it as https://HOST:PORT');
  }
  if (url.protocol !== 'https:') throw configError(`cluster "${clusterName}": server ${redactUserinfo(server)} is not https`, 'the Kubernetes API is served over HTTPS; write https://HOST:PORT');
  if (typeof cluster.value['proxy-url'] === 'string' && cluster.value['proxy-url'] !== '') {
    throw configError(`cluster "${clusterName}" is reached through proxy-url ${redactUserinfo(String(cluster.value['proxy-url']))}, which vram-preflight does not support`, 'run the audit where the API server is reachable directly (in the cluster, as the chart\'s CronJob), or through kubectl proxy with a kubeconfig of its own');
  }
  const hasCa = ['certificate-authority', 'certificate-authority-data'].some((key) => typeof cluster.value[key] === 'string' && cluster.value[key] !== '');
  if (cluster.value['insecure-skip-tls-verify'] === true && hasCa) {
    // client-go's TLSConfigFor: "specifying a root certificates file with the insecure flag is not allowed".
    throw configError(
      `cluster "${clusterName}" sets insecure-skip-tls-verify together with a certificate-authority, which kubectl refuses too ("specifying a root certificates file with the insecure flag is not allowed"): the CA would be ignored and the credentials sent to a server nobody verified`,
      'remove insecure-skip-tls-verify, so that the CA verifies the server; or remove the certificate-authority if the server is meant to go unverified',
    );
  }
  const u = user.value;
  const authProvider = asObject(u['auth-provider']);
  if (authProvider) {
    const name = String(authProvider.name);
    // gcp and azure left kubectl in Kubernetes 1.26 (kubernetes/kubernetes#102181); oidc remains in client-go, not here.
    const why = name === 'gcp' || name === 'azure' ? 'which kubectl itself no longer supports (removed in Kubernetes 1.26)' : 'which vram-preflight audit does not support (it runs exec credential plugins only)';
    throw configError(`user "${userName}" authenticates with the auth-provider "${name}", ${why}`, 'use its exec credential plugin: gke-gcloud-auth-plugin for GKE, kubelogin for Azure (kubelogin convert-kubeconfig), kubelogin (kubectl oidc-login) for OIDC, aws eks get-token for EKS');
  }
  if ((typeof u.username === 'string' && u.username !== '') || (typeof u.password === 'string' && u.password !== '')) {
    throw configError(`user "${userName}" authenticates with a username and password (basic auth), which the Kubernetes API server no longer accepts (removed in 1.19)`, 'use a client certificate, a token or an exec credential plugin');
  }
  const connection: Connection = {
    server: `${url.origin}${url.pathname.replace(/\/+$/, '')}`,
    ca: material(cluster, 'certificate-authority-data', 'certificate-authority', `cluster "${clusterName}"'s CA`, request),
    insecureSkipTlsVerify: cluster.value['insecure-skip-tls-verify'] === true,
    tlsServerName: typeof cluster.value['tls-server-name'] === 'string' && cluster.value['tls-server-name'] !== '' ? cluster.value['tls-server-name'] : undefined,
    clientCertificate: material(user, 'client-certificate-data', 'client-certificate', `user "${userName}"'s client certificate`, request),
    clientKey: material(user, 'client-key-data', 'client-key', `user "${userName}"'s client key`, request),
    token: typeof u.token === 'string' && u.token !== '' ? u.token : undefined,
    tokenFile: typeof u.tokenFile === 'string' && u.tokenFile !== '' ? resolvePath(user.dir, u.tokenFile) : undefined,
    origin: `kubeconfig ${files}, context "${contextName}"`,
    context: contextName,
  };
  if ((connection.clientCertificate === undefined) !== (connection.clientKey === undefined)) {
    throw configError(`user "${userName}" has a client ${connection.clientKey === undefined ? 'certificate but no key' : 'key but no certificate'}`, 'give both client-certificate(-data) and client-key(-data)');
  }
  const exec = asObject(u.exec);
  if (exec) connection.exec = execPlugin(exec, user.dir, cluster.value, userName);
  const groups = stringList(u['as-groups']);
  if (typeof u.as === 'string' || typeof u['as-uid'] === 'string' || groups.length > 0) {
    if (asObject(u['as-user-extra']) && Object.keys(asObject(u['as-user-extra'])!).length > 0) {
      throw configError(`user "${userName}" impersonates with as-user-extra, which vram-preflight audit does not support`, 'leave as-user-extra out, or run the audit as the impersonated identity');
    }
    connection.impersonate = { user: typeof u.as === 'string' && u.as !== '' ? u.as : undefined, uid: typeof u['as-uid'] === 'string' && u['as-uid'] !== '' ? u['as-uid'] : undefined, groups };
  }
  return connection;
}

/** The kubeconfig files that the flags and environment name, read and merged; `which` says where they came from, for messages. */
function readKubeconfigs(request: ConnectionRequest): { loaded: Loaded; which: 'flag' | 'env' | 'home' | 'none'; named: string[] } {
  const loaded: Loaded = { clusters: new Map(), users: new Map(), contexts: new Map(), files: [], emptyFiles: [] };
  if (request.kubeconfig !== undefined) {
    readKubeconfig(request.kubeconfig, request, loaded);
    return { loaded, which: 'flag', named: [request.kubeconfig] };
  }
  if (request.env.KUBECONFIG) {
    const files = request.env.KUBECONFIG.split(':').filter((f) => f !== '');
    for (const file of files) if (request.exists(file)) readKubeconfig(file, request, loaded);
    return { loaded, which: 'env', named: files };
  }
  const home = request.home !== undefined ? `${request.home}/.kube/config` : undefined;
  if (home !== undefined && request.exists(home)) {
    readKubeconfig(home, request, loaded);
    return { loaded, which: 'home', named: [home] };
  }
  return { loaded, which: 'none', named: [] };
}

const holdsNothing = (loaded: Loaded): boolean => loaded.files.length === 0 || (loaded.clusters.size === 0 && loaded.users.size === 0 && loaded.contexts.size === 0 && loaded.currentContext === undefined);

/** Why the kubeconfig the rules found cannot be used, when it holds nothing. */
function emptyError(found: ReturnType<typeof readKubeconfigs>): PreflightError {
  const { loaded, which, named } = found;
  const inPod = ' and not in a pod (no KUBERNETES_SERVICE_HOST)';
  if (which === 'env') {
    const missing = named.filter((f) => !loaded.files.includes(f) && !loaded.emptyFiles.includes(f));
    const said = [
      ...(loaded.emptyFiles.length > 0 ? [`${loaded.emptyFiles.join(', ')} ${loaded.emptyFiles.length === 1 ? 'holds' : 'hold'} no kubeconfig (empty)`] : []),
      ...(missing.length > 0 ? [`${missing.join(', ')} ${missing.length === 1 ? 'does' : 'do'} not exist`] : []),
      ...(loaded.files.length > 0 ? [`${loaded.files.join(', ')} ${loaded.files.length === 1 ? 'names' : 'name'} no cluster, user or context`] : []),
    ];
    return configError(`KUBECONFIG names no usable kubeconfig: ${said.join('; ')};${inPod}`, 'set KUBECONFIG to a kubeconfig file (kubectl config view reads the same), unset it to use ~/.kube/config, or run in a pod');
  }
  return configError(`kubeconfig ${named.join(', ')} is empty (no cluster, user or context);${inPod}`, 'check the file (kubectl config view reads the same)');
}

/** The connection kubectl would use with the same flags and environment (see the top of this file). */
export function loadConnection(request: ConnectionRequest): Connection {
  if (request.credentialsDir !== undefined) {
    if (request.kubeconfig !== undefined || request.context !== undefined) {
      throw new PreflightError('USAGE', '--kubernetes-credentials-dir asks for in-cluster credentials, which --kubeconfig and --context contradict', { fix: 'give one or the other' });
    }
    return inClusterConnection(request);
  }
  const found = readKubeconfigs(request);
  const inPod = inClusterServer(request.env) !== undefined && request.context === undefined;
  if (found.which === 'none') {
    if (inPod) return inClusterConnection(request);
    throw configError('no kubeconfig (no --kubeconfig, no KUBECONFIG, no ~/.kube/config) and not in a pod (no KUBERNETES_SERVICE_HOST)', 'give --kubeconfig FILE or set KUBECONFIG, as for kubectl');
  }
  if (holdsNothing(found.loaded)) {
    // client-go's deferred loading: a kubeconfig that holds nothing means in-cluster, where a pod can.
    if (inPod) return inClusterConnection(request);
    throw emptyError(found);
  }
  return fromKubeconfig(found.loaded, request);
}

/**
 * The connection of a server process, as controller-runtime's GetConfig
 * finds it (see the top of this file); `none` says why there is none. An
 * explicit kubeconfig that cannot be used is an error; a pod without its
 * service account's files is not (the next way is tried, as there).
 */
export function loadServerConnection(request: ConnectionRequest): { connection: Connection } | { none: string } {
  if (request.apiServer !== undefined) {
    if (request.kubeconfig !== undefined) throw new PreflightError('USAGE', '--kubernetes-api and --kubeconfig name the API server twice', { fix: 'give one or the other' });
    return { connection: inClusterConnection(request) };
  }
  if (request.kubeconfig !== undefined || request.env.KUBECONFIG) {
    const found = readKubeconfigs(request);
    if (holdsNothing(found.loaded)) throw emptyError(found);
    return { connection: fromKubeconfig(found.loaded, request) };
  }
  let inPod: string | undefined;
  if (inClusterServer(request.env) !== undefined) {
    try {
      return { connection: inClusterConnection(request) };
    } catch (error) {
      if (!(error instanceof PreflightError)) throw error;
      // As controller-runtime: no usable in-cluster config, so ~/.kube/config, and else none.
      inPod = error.message;
    }
  }
  const found = readKubeconfigs(request);
  if (found.which === 'home' && !holdsNothing(found.loaded)) return { connection: fromKubeconfig(found.loaded, request) };
  return { none: inPod ?? 'no --kubeconfig, no KUBECONFIG, not in a pod (no KUBERNETES_SERVICE_HOST) and no ~/.kube/config' };
}
