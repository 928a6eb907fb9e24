// vram-preflight: the Node.js check of the Helm 4 plugin. ES5 only, so that
// any Node.js can parse it: it must run where the bundle cannot.
//
// plugin.yaml runs   node -r <this file> <plugin>/dist/vram-preflight.cjs ARGS
// (-r loads this file before node resolves or parses the bundle, in the same
// process: it costs no extra start of node), and its install/update hook runs
// node -e "require(<this file>)" plugin-install-check.
//
// It stops the run when the Node.js is older than 20 or when the bundle (the
// launcher dist/vram-preflight.cjs or the application it loads,
// dist/vram-preflight.app.js) is missing (a plugin installed from a git URL or
// an unbuilt checkout has no dist/). Helm 4 throws away a post-renderer's
// stderr and prints only 'plugin "vram-preflight" exited with error', so under Helm 4
// (HELM_PLUGIN_NAME=vram-preflight) the message also goes to stdout as a YAML
// document that is not a mapping, and the exit status is 0: Helm 4 then
// fails with "error parsing YAML: wrong node kind: expected MappingNode but
// got ScalarNode: node contents:" followed by the message (no manifests can
// come out of it). Anywhere else: stderr and exit status 1.
'use strict';

var fs = require('fs');
var path = require('path');

var MIN_MAJOR = 20;
var pluginDir = path.resolve(__dirname, '..');
var bundle = path.join(pluginDir, 'dist', 'vram-preflight.cjs');

function pluginVersion() {
  try {
    var m = /^version:[ \t]*["']?([^"'#\s]+)/m.exec(fs.readFileSync(path.join(pluginDir, 'plugin.yaml'), 'utf8'));
    return m ? m[1] : '<version>';
  } catch (e) {
    return '<version>';
  }
}

function problems(bundle) {
  var out = [];
  var major = parseInt(String(process.versions.node).split('.')[0], 10);
  if (!(major >= MIN_MAJOR)) {
    out.push(
      'Node.js ' + MIN_MAJOR + ' or newer is needed; the node on the PATH helm runs with is ' + process.version + ' (' + process.execPath + ').',
      'Install Node.js ' + MIN_MAJOR + '+ or put it first on that PATH; nothing else needs to change.'
    );
  }
  // The application the launcher loads: its name with .app.js for .cjs (scripts/build.mjs appFileName).
  var app = bundle && bundle.replace(/\.c?js$/, '') + '.app.js';
  var missing = !bundle ? undefined : !fs.existsSync(bundle) ? bundle : !fs.existsSync(app) ? app : undefined;
  if (missing) {
    out.push(
      'the plugin has no bundle (' + missing + '): it was installed from a git URL or an unbuilt checkout.',
      'Install the release archive instead: helm plugin uninstall vram-preflight, then helm plugin install <release URL or file>/vram-preflight-' + pluginVersion() + '.tgz',
      '(signed: its .prov next to it is verified by default); or build the checkout (npm ci && npm run build). See docs/install.md.'
    );
  }
  return out;
}

if (process.argv[1] === 'plugin-install-check') {
  // helm plugin install / update: helm shows a hook's stdout and stderr.
  var found = problems(bundle);
  if (found.length) {
    for (var i = 0; i < found.length; i++) process.stderr.write('vram-preflight: ' + found[i] + '\n');
    process.stderr.write('vram-preflight: the plugin is installed but cannot run until this is fixed.\n');
    process.exit(1);
  }
} else {
  var main = process.argv[1] ? path.resolve(process.argv[1]) : undefined;
  var found2 = problems(main);
  if (found2.length) {
    for (var j = 0; j < found2.length; j++) process.stderr.write('vram-preflight: ' + found2[j] + '\n');
    if (process.env.HELM_PLUGIN_NAME === 'vram-preflight') {
      var yaml = '';
      for (var k = 0; k < found2.length; k++) yaml += '# vram-preflight: ' + found2[k] + '\n';
      process.stdout.write(yaml + 'vram-preflight-did-not-run\n');
      process.exit(0);
    }
    process.exit(1);
  }
}
