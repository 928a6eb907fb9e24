/**
 * Notices when files change, the way Kubernetes changes mounted files: a
 * Secret or ConfigMap volume swaps a `..data` symlink to a new directory, so
 * the files' own inodes never change and an inotify watch on a file sees
 * nothing. Two ways, either suffices: a watch on each file's directory
 * (quick, where inotify works), and a poll of what the paths resolve to
 * (stat follows symlinks) every few seconds (always). Changes are
 * coalesced: one call per burst.
 */
import { statSync, watch, type FSWatcher } from 'node:fs';
import { dirname } from 'node:path';

export interface FileWatch {
  close(): void;
}

function signature(paths: readonly string[]): string {
  return paths
    .map((path) => {
      try {
        const s = statSync(path);
        return `${s.dev}:${s.ino}:${s.size}:${s.mtimeMs}`;
      } catch (error) {
        return (error as NodeJS.ErrnoException).code ?? 'error';
      }
    })
    .join('|');
}

export function watchFiles(paths: readonly string[], onChange: () => void, pollMs = 2000, settleMs = 100): FileWatch {
  let last = signature(paths);
  let timer: NodeJS.Timeout | undefined;
  const check = (): void => {
    timer = undefined;
    const now = signature(paths);
    if (now === last) return;
    last = now;
    onChange();
  };
  // A burst of events (the symlink swap is several renames) becomes one check once it settles.
  const soon = (): void => {
    if (timer === undefined) timer = setTimeout(check, settleMs).unref();
  };
  const watchers: FSWatcher[] = [];
  for (const dir of new Set(paths.map((p) => dirname(p)))) {
    try {
      const watcher = watch(dir, { persistent: false }, soon);
      watcher.on('error', () => watcher.close());
      watchers.push(watcher);
    } catch {
      // no inotify (or the directory is gone): the poll still sees the change
    }
  }
  const poll = setInterval(check, pollMs).unref();
  return {
    close(): void {
      clearInterval(poll);
      if (timer !== undefined) clearTimeout(timer);
      for (const w of watchers) w.close();
    },
  };
}
