/**
 * Exec credential plugins (client.authentication.k8s.io/v1 and v1beta1), as
 * client-go runs them: the command with its args, our environment plus the
 * plugin's `env`, and KUBERNETES_EXEC_INFO holding an ExecCredential whose
 * spec says whether it may talk to a terminal (never, here: the audit runs in
 * cron jobs and CI) and, when asked for, the cluster. The plugin prints an
 * ExecCredential whose status holds a token or a client certificate and key,
 * and maybe when it expires; it is run again after that, or when the API
 * server refuses the credential (401).
 *
 * A plugin that fails says why on its stderr ("the SSO session has expired"):
 * its last lines are kept in the error, cut, with what could be a credential
 * taken out (the values of the plugin's own `env`, tokens, passwords, keys,
 * JWTs, a URL's password), since the error lands in CI logs.
 */
import { execFile } from 'node:child_process';
import { asObject, PreflightError, redactUserinfo } from '../core/index.js';
import type { ExecPlugin } from './kubeconfig.js';

export interface ExecCredential {
  token?: string;
  clientCertificate?: string;
  clientKey?: string;
  /** Epoch ms; absent: valid for the whole run. */
  expires?: number;
}

/** How long a plugin may take (it may fetch a token over the network). */
export const EXEC_TIMEOUT_MS = 60_000;

/** How much of each of the last lines of a failing plugin's stderr its error keeps. */
const STDERR_LINE_KEPT = 160;

/**
 * A plugin's stderr as its error may quote it: its last three lines, each cut
 * to STDERR_LINE_KEPT characters, without what could be a credential (taken
 * out before the cut, so that no part of one is left). Values of the
 * plugin's `env` (an AWS key, a client secret) go whole; then anything that
 * reads as one: a bearer or basic credential, a JWT, `…token`, `…secret`,
 * `…password`, `…key`, `authorization`, `credentials` followed by a value,
 * the user and password of a URL.
 */
export function redactStderr(stderr: string, secrets: readonly string[]): string {
  const lines = stderr.trim().split('\n').slice(-3);
  return lines
    .map((line) => {
      let text = line.trim();
      for (const secret of secrets) if (secret.length >= 6) text = text.split(secret).join('[redacted]');
      text = redactUserinfo(text)
        .replace(/\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}/gi, '$1 [redacted]')
        .replace(/\beyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]{5,}\.?[A-Za-z0-9_-]*/g, '[redacted]')
        .replace(/(["']?\b[a-z_-]*(?:token|password|passwd|secret|key|authorization|credentials?)["']?\s*[:=]\s*)(["']?)[^\s"',;}]+\2/gi, '$1$2[redacted]$2');
      return text.length > STDERR_LINE_KEPT ? `${text.slice(0, STDERR_LINE_KEPT)}…` : text;
    })
    .filter((text) => text !== '')
    .join(' | ');
}

function execError(plugin: ExecPlugin, message: string, fix: string): PreflightError {
  return new PreflightError('KUBECONFIG', `exec credential plugin ${plugin.command}: ${message}`, { fix });
}

/** Runs the plugin once (at most `timeoutMs`, and never over EXEC_TIMEOUT_MS) and reads its ExecCredential. */
export function runExecPlugin(plugin: ExecPlugin, env: Readonly<Record<string, string | undefined>>, timeoutMs = EXEC_TIMEOUT_MS): Promise<ExecCredential> {
  const timeout = Math.max(1, Math.min(EXEC_TIMEOUT_MS, timeoutMs));
  if (plugin.interactiveMode === 'Always') {
    return Promise.reject(execError(plugin, 'it asks for a terminal (interactiveMode: Always), which the audit never gives it', 'log in once with kubectl so that the plugin has a cached credential, and set interactiveMode: IfAvailable; or use a service account token'));
  }
  const command = plugin.command.includes('/') && !plugin.command.startsWith('/') ? `${plugin.dir}/${plugin.command}` : plugin.command;
  const info = { apiVersion: plugin.apiVersion, kind: 'ExecCredential', spec: { interactive: false, ...(plugin.cluster && { cluster: plugin.cluster }) } };
  const childEnv: Record<string, string> = {};
  for (const [name, value] of Object.entries(env)) if (value !== undefined) childEnv[name] = value;
  for (const { name, value } of plugin.env) childEnv[name] = value;
  childEnv.KUBERNETES_EXEC_INFO = JSON.stringify(info);
  return new Promise((resolve, reject) => {
    const child = execFile(command, plugin.args, { env: childEnv, timeout, maxBuffer: 4 << 20, encoding: 'utf8' }, (error, stdout, stderr) => {
      const said = redactStderr(stderr, plugin.env.map((e) => e.value));
      if (error) {
        const code = (error as NodeJS.ErrnoException).code;
        if (code === 'ENOENT' || code === 'EACCES') {
          reject(execError(plugin, `cannot run it (${code})`, plugin.installHint?.trim() || 'install the plugin and put it on PATH, as for kubectl'));
          return;
        }
        const why = error.killed ? `it did not finish within ${Math.round(timeout / 100) / 10} s` : `it exited ${String(error.code ?? error.signal)}`;
        reject(execError(plugin, `${why}${said ? `: ${said}` : ''}`, 'run the same kubectl command to see what the plugin needs (a login, a network)'));
        return;
      }
      try {
        resolve(readCredential(plugin, stdout));
      } catch (failure) {
        reject(failure);
      }
    });
    child.stdin?.end();
  });
}

function readCredential(plugin: ExecPlugin, stdout: string): ExecCredential {
  let value: unknown;
  try {
    value = JSON.parse(stdout);
  } catch {
    throw execError(plugin, 'it printed no JSON ExecCredential', 'check the plugin with: KUBERNETES_EXEC_INFO=\'{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","spec":{"interactive":false}}\' PLUGIN ARGS');
  }
  const credential = asObject(value);
  if (credential?.kind !== 'ExecCredential' || credential.apiVersion !== plugin.apiVersion) {
    throw execError(plugin, `it printed ${String(credential?.apiVersion)} ${String(credential?.kind)}, not an ExecCredential of ${plugin.apiVersion}`, 'match the apiVersion in the kubeconfig to the one the plugin prints');
  }
  const status = asObject(credential.status) ?? {};
  const token = typeof status.token === 'string' && status.token !== '' ? status.token : undefined;
  const clientCertificate = typeof status.clientCertificateData === 'string' && status.clientCertificateData !== '' ? status.clientCertificateData : undefined;
  const clientKey = typeof status.clientKeyData === 'string' && status.clientKeyData !== '' ? status.clientKeyData : undefined;
  if ((clientCertificate === undefined) !== (clientKey === undefined)) throw execError(plugin, 'its ExecCredential has only one of clientCertificateData and clientKeyData', 'the plugin must give both, or a token');
  if (token === undefined && clientCertificate === undefined) throw execError(plugin, 'its ExecCredential holds neither a token nor a client certificate', 'check the plugin');
  const expires = typeof status.expirationTimestamp === 'string' ? Date.parse(status.expirationTimestamp) : Number.NaN;
  return { token, clientCertificate, clientKey, expires: Number.isFinite(expires) ? expires : undefined };
}
