/**
 * A container's shell script (`bash -c '<script>' arg0 args…`), read as far
 * as deciding what the container runs needs: the script's simple commands in
 * order, each as its words with the quotes removed, and whether `&` leaves it
 * in the background. This is not a shell: nothing is expanded except the
 * positional parameters a command passes on (`$0`, `$@`, `"$@"`, `$*`), and
 * a construct it does not follow (a function, `case`) yields at worst a
 * command cut where the shell would not cut it. What it does follow is what
 * decides: a word inside quotes, a comment or a here-document is never a
 * command, and `echo python -m x` runs `echo`.
 *
 * Plain scans, no regexes: a render's fresh process pays a regex's
 * compilation on its first runs, for every container.
 */

/** One simple command: its words (quotes removed, `$VAR` kept as written) and whether `&` runs it in the background. */
export interface ShellCommand {
  words: string[];
  background: boolean;
  /** Per word: it is one of the container's items after the script, passed on by `$@`/`$0` (the kubelet's, not the shell's). */
  passed?: boolean[];
}

/** A shell's `-c` script and the items after it: `$0` first, then `$1`… (what `$@` expands to). */
export interface ShellScript {
  script: string;
  positional: readonly string[];
}

/**
 * The script of a shell's argv (`start[0]` is the shell: `sh`, `bash`, …) when it runs one
 * with `-c` (alone or in a cluster: `-ec`, `-lc`, `-euxc`), after its other options
 * (`-o pipefail`, `--norc`) and an optional `--`; undefined for a script file or no `-c`.
 */
export function shellScriptOf(start: readonly string[]): ShellScript | undefined {
  let command = false;
  let i = 1;
  for (; i < start.length; i++) {
    const item = start[i]!;
    if (item === '--') {
      i++;
      break;
    }
    // Long options (`--login`, `--norc`) take no argument that matters here, and their letters are no cluster.
    if (item.startsWith('--')) continue;
    if (item.length < 2 || (item[0] !== '-' && item[0] !== '+')) break;
    if (item[0] === '-' && item.includes('c')) command = true;
    // `-o NAME` / `-euo NAME`: the next item is the option's name, not the script.
    if (item.endsWith('o')) i++;
  }
  if (!command || i >= start.length) return undefined;
  return { script: start[i]!, positional: start.slice(i + 1) };
}

/** The index just past a `$(…)`, `${…}` or `` `…` `` that starts at `from` (its `$` or backquote), nested ones included. */
function endOfSubstitution(script: string, from: number): number {
  if (script[from] === '`') {
    let j = from + 1;
    while (j < script.length && script[j] !== '`') j += script[j] === '\\' ? 2 : 1;
    return Math.min(j + 1, script.length);
  }
  const open = script[from + 1]!;
  const close = open === '(' ? ')' : '}';
  let depth = 0;
  let j = from + 1;
  while (j < script.length) {
    const c = script[j]!;
    if (c === '\\') j++;
    else if (c === "'") j = script.indexOf("'", j + 1) === -1 ? script.length : script.indexOf("'", j + 1);
    else if (c === open) depth++;
    else if (c === close && --depth === 0) return j + 1;
    j++;
  }
  return script.length;
}

/** A here-document's delimiter from the word after `<<` / `<<-` (quotes removed), or undefined. */
function hereDocumentDelimiter(word: string): { delimiter: string; tabs: boolean } | undefined {
  if (!word.startsWith('<<') || word.startsWith('<<<')) return undefined;
  const tabs = word[2] === '-';
  const delimiter = word.slice(tabs ? 3 : 2);
  return { delimiter, tabs };
}

/** The simple commands of a script, in order (see the file's comment for what is followed). */
export function shellCommands(script: string): ShellCommand[] {
  const commands: ShellCommand[] = [];
  let words: string[] = [];
  let word: string | undefined;
  // Here-documents opened on the current line: their bodies follow the line's end.
  const pending: { delimiter: string; tabs: boolean }[] = [];
  let awaitingDelimiter: { tabs: boolean } | undefined;

  const endWord = (): void => {
    if (word === undefined) return;
    if (awaitingDelimiter) {
      pending.push({ delimiter: word, tabs: awaitingDelimiter.tabs });
      awaitingDelimiter = undefined;
    } else {
      const here = hereDocumentDelimiter(word);
      if (here && here.delimiter === '') awaitingDelimiter = { tabs: here.tabs };
      else if (here) pending.push(here);
      else words.push(word);
    }
    word = undefined;
  };
  const endCommand = (background: boolean): void => {
    endWord();
    if (words.length) commands.push({ words, background });
    words = [];
  };

  let i = 0;
  while (i < script.length) {
    const c = script[i]!;
    if (c === ' ' || c === '\t' || c === '\r') {
      endWord();
      i++;
    } else if (c === '\n') {
      endCommand(false);
      i++;
      // Skip the bodies of the line's here-documents: their lines are text, not commands.
      for (const { delimiter, tabs } of pending.splice(0)) {
        while (i < script.length) {
          const eol = script.indexOf('\n', i) === -1 ? script.length : script.indexOf('\n', i);
          let line = script.slice(i, eol);
          if (tabs) while (line.startsWith('\t')) line = line.slice(1);
          i = eol + 1;
          if (line === delimiter) break;
        }
      }
    } else if (c === ';') {
      endCommand(false);
      i += script[i + 1] === ';' ? 2 : 1;
    } else if (c === '#' && word === undefined) {
      const eol = script.indexOf('\n', i);
      i = eol === -1 ? script.length : eol;
    } else if (c === '&') {
      if (script[i + 1] === '&') {
        endCommand(false);
        i += 2;
      } else if (script[i + 1] === '>' || (word !== undefined && (word.endsWith('>') || word.endsWith('<')))) {
        // A redirection (`&>file`, `2>&1`), not the background operator.
        word = (word ?? '') + c;
        i++;
      } else {
        endCommand(true);
        i++;
      }
    } else if (c === '|') {
      endCommand(false);
      i += script[i + 1] === '|' ? 2 : 1;
    } else if (c === '(' || c === ')') {
      endCommand(false);
      i++;
    } else if (c === "'") {
      const end = script.indexOf("'", i + 1) === -1 ? script.length : script.indexOf("'", i + 1);
      word = (word ?? '') + script.slice(i + 1, end);
      i = end + 1;
    } else if (c === '"') {
      let text = '';
      let j = i + 1;
      while (j < script.length && script[j] !== '"') {
        const d = script[j]!;
        if (d === '\\' && '"\\$`\n'.includes(script[j + 1] ?? '')) {
          if (script[j + 1] !== '\n') text += script[j + 1];
          j += 2;
        } else if ((d === '$' && (script[j + 1] === '(' || script[j + 1] === '{')) || d === '`') {
          const end = endOfSubstitution(script, j);
          text += script.slice(j, end);
          j = end;
        } else {
          text += d;
          j++;
        }
      }
      word = (word ?? '') + text;
      i = j + 1;
    } else if (c === '\\') {
      // A backslash before a line break joins the lines; before anything else it quotes that character.
      if (script[i + 1] !== '\n') word = (word ?? '') + (script[i + 1] ?? '');
      i += 2;
    } else if ((c === '$' && (script[i + 1] === '(' || script[i + 1] === '{')) || c === '`') {
      const end = endOfSubstitution(script, i);
      word = (word ?? '') + script.slice(i, end);
      i = end;
    } else {
      word = (word ?? '') + c;
      i++;
    }
  }
  endCommand(false);
  return commands;
}

/** Words before a command's program that only set up how it runs: reserved words, and `exec`, `command`, `nohup`, `env` (they run the rest as the command). */
const PREFIX_WORDS = new Set(['!', '{', '}', 'if', 'then', 'else', 'elif', 'while', 'until', 'do', 'time', 'exec', 'command', 'nohup', 'env']);
/** Builtins whose words after them are assignments (or names) the script sets. */
const DECLARING_WORDS = new Set(['export', 'local', 'readonly', 'declare', 'typeset']);
/** `eval` in a script read inside an `eval` inside …: deeper than this is not followed. */
const MAX_EVAL_DEPTH = 4;

/** `NAME=value` before a command's program: an assignment for that command, not the program. */
function isAssignment(word: string): boolean {
  const eq = word.indexOf('=');
  return eq > 0 && isShellName(word.slice(0, eq));
}

/** A shell variable's name: `[A-Za-z_][A-Za-z0-9_]*`. */
export function isShellName(text: string): boolean {
  if (text === '') return false;
  for (let k = 0; k < text.length; k++) {
    const code = text.charCodeAt(k);
    const letter = (code >= 65 && code <= 90) || (code >= 97 && code <= 122) || code === 95;
    if (!letter && !(k > 0 && code >= 48 && code <= 57)) return false;
  }
  return true;
}

/** The positional parameters a word passes on: `$0` → the item after the script, `$@`/`$*` → every one after that. */
function expandPositional(word: string, positional: readonly string[]): readonly string[] | undefined {
  if (word === '$0' || word === '${0}') return positional.slice(0, 1);
  if (word === '$@' || word === '${@}' || word === '$*' || word === '${*}') return positional.slice(1);
  return undefined;
}

/** A script's commands, read as far as deciding needs, and the variables it sets itself. */
export interface ScriptReading {
  /** Each command from its program on, `eval`'s string read as the script it is. */
  commands: ShellCommand[];
  /** Variables the script sets (`X=…`, `export X=…`, `for X in`, `read X`), with the values it writes for them as they are written (`$…` where the script reads them). */
  assigned: Map<string, string[]>;
}

/**
 * The commands of a shell's `-c` script (`start[0]` is the shell), each from its program on
 * (`exec`, `then`, `FOO=1` before it dropped), the string an `eval` runs read as the script it
 * is, and the positional parameters a command passes on replaced by the container's items
 * after the script (marked in `passed`); undefined when the argv runs no `-c` script.
 * The one reader of a container's shell script: what it starts (src/core/decide/detect.ts)
 * and the utilization it passes vLLM (./utilization.ts) are both read from it.
 */
export function readScript(start: readonly string[]): ScriptReading | undefined {
  const shell = shellScriptOf(start);
  if (!shell) return undefined;
  const reading: ScriptReading = { commands: [], assigned: new Map() };
  const assign = (name: string, value: string): void => {
    const values = reading.assigned.get(name);
    if (values) values.push(value);
    else reading.assigned.set(name, [value]);
  };
  const read = (script: string, depth: number): void => {
    for (const { words, background } of shellCommands(script)) {
      let first = 0;
      while (first < words.length && (PREFIX_WORDS.has(words[first]!) || isAssignment(words[first]!))) {
        const word = words[first]!;
        if (isAssignment(word)) assign(word.slice(0, word.indexOf('=')), word.slice(word.indexOf('=') + 1));
        first++;
      }
      if (first === words.length) continue;
      const program = words[first]!;
      if (DECLARING_WORDS.has(program)) {
        for (const word of words.slice(first + 1)) if (isAssignment(word)) assign(word.slice(0, word.indexOf('=')), word.slice(word.indexOf('=') + 1));
      } else if (program === 'for' && isShellName(words[first + 1] ?? '')) assign(words[first + 1]!, '$');
      else if (program === 'read') for (const word of words.slice(first + 1)) if (isShellName(word)) assign(word, '$');
      if (program === 'eval' && depth < MAX_EVAL_DEPTH) {
        // eval joins its words with spaces and runs them as a script: read that script.
        read(words.slice(first + 1).join(' '), depth + 1);
        continue;
      }
      const out: string[] = [];
      const passed: boolean[] = [];
      for (const word of words.slice(first)) {
        const items = expandPositional(word, shell.positional);
        if (items) for (const item of items) (out.push(item), passed.push(true));
        else (out.push(word), passed.push(false));
      }
      if (out.length) reading.commands.push({ words: out, background, passed });
    }
  };
  read(shell.script, 0);
  return reading;
}

/** The commands of a shell's `-c` script (see readScript); [] when the argv runs no `-c` script. */
export function scriptCommands(start: readonly string[]): ShellCommand[] {
  return readScript(start)?.commands ?? [];
}
