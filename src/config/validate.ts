/**
 * Schema validation of options. The validator is ajv's standalone code for
 * config.schema.json, generated at development time (scripts/generate-validator.mjs)
 * so that no schema is compiled at start-up; a test keeps it in step.
 */
// @ts-expect-error: generated JavaScript without type declarations
import { KNOWN_KEYS, validate } from './validate.generated.js';
import { closest } from './suggest.js';

export interface SchemaError {
  /** JSON pointer of the offending value, e.g. `/timeoutSeconds`. */
  path: string;
  message: string;
  /** Whether the message reads right after the value given (`is "abc", must be integer`). */
  quoteValue: boolean;
  /** What was probably meant (`did you mean timeoutSeconds?`). */
  suggestion?: string;
}

/** The keys an object of the schema takes, by pointer with `*` for array indexes. */
const knownKeys = KNOWN_KEYS as Readonly<Record<string, readonly string[]>>;

interface AjvError {
  instancePath: string;
  schemaPath: string;
  keyword: string;
  message?: string;
  params: Record<string, unknown>;
}

/**
 * What a `oneOf` of the schema asks for, in words, by pointer with `*` for
 * array indexes: ajv reports each branch's own failure (two `required`, two
 * `not`), which reads as a contradiction; one sentence says what to write.
 */
const ONE_OF: Readonly<Record<string, { neither: string; both: string }>> = {
  '/contextMiB': { neither: 'must be "auto" or an integer from 0 to 65536', both: 'must be "auto" or an integer from 0 to 65536' },
  '/images/*': {
    neither: 'needs entrypoint (the image\'s start, with cmd when containers give no args) or like (a built-in table row to borrow)',
    both: 'gives like together with entrypoint or cmd: like borrows a whole table row, so give one or the other',
  },
};

export function validateConfig(value: unknown): SchemaError[] {
  if ((validate as (v: unknown) => boolean)(value)) return [];
  const all = ((validate as { errors?: AjvError[] }).errors ?? []) as AjvError[];
  // The branches' own failures under a oneOf are said by the oneOf's one sentence.
  const oneOfs = all.filter((e) => e.keyword === 'oneOf');
  const errors = all.filter((e) => !oneOfs.some((o) => e !== o && e.instancePath === o.instancePath && e.schemaPath.startsWith(o.schemaPath.replace(/\/oneOf$/, '/oneOf/'))));
  return errors.map((error) => {
    if (error.keyword === 'oneOf') {
      const words = ONE_OF[error.instancePath.replace(/\/\d+(?=\/|$)/g, '/*')];
      const branchesMissing = all.some((e) => e.keyword === 'required' && e.instancePath === error.instancePath && e.schemaPath.startsWith(error.schemaPath.replace(/\/oneOf$/, '/oneOf/')));
      if (words) return { path: error.instancePath, message: branchesMissing ? words.neither : words.both, quoteValue: false };
    }
    if (error.keyword === 'additionalProperties') {
      const key = String(error.params.additionalProperty);
      const close = closest(key, knownKeys[error.instancePath.replace(/\/\d+(?=\/|$)/g, '/*')] ?? []);
      const where = error.instancePath === '' ? '' : `${error.instancePath.slice(1).replace(/\//g, '.')}.`;
      return {
        path: error.instancePath,
        message: `has an unknown key "${key}"`,
        quoteValue: false,
        suggestion: close.length ? `"${where}${key}": did you mean ${close.map((c) => `"${where}${c}"`).join(' or ')}?` : undefined,
      };
    }
    if (error.keyword === 'enum') {
      return { path: error.instancePath, message: `must be one of ${(error.params.allowedValues as unknown[]).map((v) => JSON.stringify(v)).join(', ')}`, quoteValue: true };
    }
    return { path: error.instancePath, message: error.message ?? error.keyword, quoteValue: error.keyword !== 'required' };
  });
}
