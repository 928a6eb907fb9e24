#!/usr/bin/env node
// Reads what an Argo CD Application hands the vram-preflight CMP and turns it
// into plain records for generate.sh. Nothing here is ever given to a shell.
//
//   node params.cjs WORKDIR        (cwd = the Application's source path)
//
// Inputs (environment, set by argocd-cmp-server):
//   ARGOCD_APP_PARAMETERS          JSON list of {name, string|array|map}
//                                  (spec.source.plugin.parameters). The PARAM_*
//                                  variables carry the same data; this file is
//                                  the one source of truth.
//   ARGOCD_ENV_VRAM_PREFLIGHT_<X>  spec.source.plugin.env entries named
//                                  VRAM_PREFLIGHT_<X>; Argo CD adds ARGOCD_ENV_.
//
// Output on stdout: NUL-terminated pairs KEY\0VALUE\0, where KEY is one of
//   release-name, namespace, values-file (absolute path, in helm's order),
//   skip-crds, skip-tests, skip-schema-validation (true|false),
//   env (NAME=VALUE for vram-preflight).
// Inline values are written to WORKDIR/inline-values.yaml and listed last.
// Any problem: a message on stderr, exit 1, nothing useful on stdout.
'use strict';

const fs = require('node:fs');
const path = require('node:path');

/** Tool options a user may set, by parameter-map key; env = VRAM_PREFLIGHT_<UPPER_SNAKE>. */
const TOOL_OPTIONS = [
  'timeout-seconds',
  'poll-interval-seconds',
  'log-interval-seconds',
  'headroom-mib',
  'context-mib',
  'default-utilization',
  'on-nvidia-smi-unavailable',
  'nvidia-smi-timeout-seconds',
  'container-names',
  'registry-lookup',
  'registry-platform',
  'registry-timeout-seconds',
  'registry-insecure',
  'fast-parse',
  'config', // a file inside the source path
];
// Not offered: diagnostics-file and report-file (writes to any path of the
// sidecar; under Argo CD, stderr already reaches the Application's
// ComparisonError), cache-dir and registry-ca-file (the sidecar's own
// settings: its cache volume, the CAs its admin trusts).
const envNameOf = (key) => `VRAM_PREFLIGHT_${key.toUpperCase().replace(/-/g, '_')}`;

const PARAMETERS = {
  'values-files': 'array',
  values: 'string',
  'release-name': 'string',
  namespace: 'string',
  'skip-crds': 'string',
  'skip-tests': 'string',
  'skip-schema-validation': 'string',
  'preflight-options': 'map',
};
const BOOLEAN_PARAMETERS = ['skip-crds', 'skip-tests', 'skip-schema-validation'];

class UsageError extends Error {}
const fail = (msg) => {
  throw new UsageError(msg);
};

/** Resolves a user-given path; it must name an existing regular file inside the source path. */
function fileInsideSource(what, given) {
  if (typeof given !== 'string' || given.trim() === '') fail(`${what}: empty path`);
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(given)) fail(`${what} "${given}": remote files are not supported; put the file in the source path`);
  if (path.isAbsolute(given)) fail(`${what} "${given}": absolute paths are not allowed; give a path relative to the source path`);
  const root = fs.realpathSync(process.cwd());
  const lexical = path.resolve(root, given);
  const inside = (p) => p === root || p.startsWith(root + path.sep);
  if (!inside(lexical)) fail(`${what} "${given}": leaves the source path`);
  let real;
  try {
    real = fs.realpathSync(lexical);
  } catch {
    fail(`${what} "${given}": no such file in the source path`);
  }
  if (!inside(real)) fail(`${what} "${given}": resolves (through a symbolic link) outside the source path`);
  if (!fs.statSync(real).isFile()) fail(`${what} "${given}": not a regular file`);
  return real;
}

function readParameters() {
  const raw = process.env.ARGOCD_APP_PARAMETERS;
  if (raw === undefined || raw.trim() === '') return new Map();
  let list;
  try {
    list = JSON.parse(raw);
  } catch (e) {
    fail(`ARGOCD_APP_PARAMETERS is not JSON: ${e.message}`);
  }
  if (list === null) return new Map();
  if (!Array.isArray(list)) fail('ARGOCD_APP_PARAMETERS is not a JSON list');
  const byName = new Map();
  for (const p of list) {
    if (p === null || typeof p !== 'object' || typeof p.name !== 'string' || p.name === '') {
      fail('ARGOCD_APP_PARAMETERS: every parameter needs a name');
    }
    const want = PARAMETERS[p.name];
    if (!want) {
      fail(`unknown parameter "${p.name}"; known: ${Object.keys(PARAMETERS).join(', ')}`);
    }
    if (byName.has(p.name)) fail(`parameter "${p.name}" is given twice`);
    const given = ['string', 'array', 'map'].filter((k) => p[k] !== undefined);
    if (given.length !== 1 || given[0] !== want) {
      fail(`parameter "${p.name}" takes ${want === 'string' ? 'a string' : `an ${want}`} (got ${given.join(' and ') || 'no value'})`);
    }
    const v = p[want];
    const ok =
      want === 'string'
        ? typeof v === 'string'
        : want === 'array'
          ? Array.isArray(v) && v.every((x) => typeof x === 'string')
          : v !== null && typeof v === 'object' && !Array.isArray(v) && Object.values(v).every((x) => typeof x === 'string');
    if (!ok) fail(`parameter "${p.name}": malformed ${want}`);
    byName.set(p.name, v);
  }
  return byName;
}

function main() {
  const workdir = process.argv[2];
  if (!workdir) fail('usage: params.cjs WORKDIR');
  const params = readParameters();
  const out = [];
  const emit = (k, v) => {
    if (v.includes('\0')) fail(`${k}: a value may not contain a NUL character`);
    out.push(k, v);
  };

  for (const name of ['release-name', 'namespace']) {
    if (params.has(name)) {
      const v = params.get(name).trim();
      if (v === '') fail(`parameter "${name}" is empty`);
      emit(name, v);
    }
  }
  for (const name of BOOLEAN_PARAMETERS) {
    if (params.has(name)) {
      const v = params.get(name).trim().toLowerCase();
      if (v !== 'true' && v !== 'false') fail(`parameter "${name}" must be "true" or "false", not "${params.get(name)}"`);
      emit(name, v);
    }
  }
  for (const f of params.get('values-files') ?? []) {
    emit('values-file', fileInsideSource('values file', f));
  }
  const inline = params.get('values');
  if (inline !== undefined && inline.trim() !== '') {
    const file = path.join(workdir, 'inline-values.yaml');
    fs.writeFileSync(file, inline, { mode: 0o600 });
    emit('values-file', file);
  }

  // Tool options: the sidecar's own VRAM_PREFLIGHT_* stay as they are; then
  // plugin.env (ARGOCD_ENV_VRAM_PREFLIGHT_*); then the preflight-options map.
  const tool = new Map();
  const setOption = (key, value, where) => {
    tool.set(envNameOf(key), key === 'config' ? fileInsideSource(`${where} config`, value) : value);
  };
  const byEnvName = new Map(TOOL_OPTIONS.map((k) => [envNameOf(k), k]));
  for (const [name, value] of Object.entries(process.env).sort(([a], [b]) => (a < b ? -1 : 1))) {
    if (!name.startsWith('ARGOCD_ENV_VRAM_PREFLIGHT_')) continue;
    const envName = name.slice('ARGOCD_ENV_'.length);
    const key = byEnvName.get(envName);
    if (!key) {
      fail(`plugin env ${envName} is not an option this plugin passes on; known: ${[...byEnvName.keys()].join(', ')}`);
    }
    setOption(key, value, `plugin env ${envName}`);
  }
  for (const [key, value] of Object.entries(params.get('preflight-options') ?? {})) {
    if (!TOOL_OPTIONS.includes(key)) {
      fail(`preflight-options: unknown key "${key}"; known: ${TOOL_OPTIONS.join(', ')}`);
    }
    setOption(key, value, 'preflight-options');
  }
  for (const [name, value] of tool) emit('env', `${name}=${value}`);

  process.stdout.write(out.map((s) => `${s}\0`).join(''));
}

try {
  main();
} catch (e) {
  process.stderr.write(`vram-preflight-cmp: ${e instanceof UsageError ? e.message : (e && e.stack) || e}\n`);
  process.exit(1);
}
