/**
 * The check after every edit: the edited text, read as the cluster reads it,
 * must equal the original with exactly the intended containers' `command` and
 * `args` replaced. YAML lets one piece of text mean several things (anchors,
 * aliases, `<<` merge keys), so a correct-looking edit of one container can
 * change another, or leave an alias without its anchor. Such an edit is
 * never emitted: the container is refused with the path that would change.
 */
import { firstDifference, formatPath, withStarts, type IntendedStart, type ValuePath } from '../values.js';
import { parseDocuments } from './fast-parse.js';

export { firstDifference, formatPath, type IntendedStart, type ValuePath };

export interface VerifyProblem {
  /** Index of the document within the chunk. */
  document: number;
  message: string;
  /** The path that changed, when the edit changed something it should not have. */
  path?: ValuePath;
}

/**
 * Checks an edited chunk against the original documents' values and the
 * starts intended for each document (by index in the chunk).
 */
export function verifyEditedChunk(editedText: string, originals: readonly unknown[], intended: readonly (readonly IntendedStart[])[], fast = true): VerifyProblem | undefined {
  const list = parseDocuments(editedText, fast);
  if (list.length !== originals.length) return { document: 0, message: `the edit would split or merge documents (${originals.length} before, ${list.length} after)` };
  for (const [i, doc] of list.entries()) {
    const error = doc.errors[0];
    if (error) return { document: i, message: `the edited document would not be valid YAML: ${error.message.split('\n')[0]}` };
    let actual: unknown;
    try {
      actual = doc.toJS();
    } catch (e) {
      return { document: i, message: `the edited document would not be readable: ${(e as Error).message}` };
    }
    const expected = withStarts(originals[i], intended[i] ?? []);
    const path = firstDifference(expected, actual);
    if (path) return { document: i, path, message: `the edit would also change ${formatPath(path)}` };
  }
  return undefined;
}
