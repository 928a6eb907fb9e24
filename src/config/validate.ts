/**
 * Schema validation of options. The validator is ajv's standalone code for
 * config.schema.json, generated at development time (scripts/generate-validator.mjs)
 * so that no schema is compiled at start-up; a test keeps it in step.
 */
// @ts-expect-error: generated JavaScript without type declarations
import { validate } from './validate.generated.js';

export interface SchemaError {
  /** JSON pointer of the offending value, e.g. `/timeoutSeconds`. */
  path: string;
  message: string;
}

interface AjvError {
  instancePath: string;
  keyword: string;
  message?: string;
  params: Record<string, unknown>;
}

export function validateConfig(value: unknown): SchemaError[] {
  if ((validate as (v: unknown) => boolean)(value)) return [];
  const all = ((validate as { errors?: AjvError[] }).errors ?? []) as AjvError[];
  // A oneOf's own "must match exactly one schema" says nothing its branches' errors do not.
  const errors = all.filter((e) => e.keyword !== 'oneOf' || !all.some((o) => o !== e && o.instancePath === e.instancePath));
  return errors.map((error) => {
    if (error.keyword === 'const') {
      return { path: error.instancePath, message: `must be ${JSON.stringify(error.params.allowedValue)}` };
    }
    if (error.keyword === 'additionalProperties') {
      return { path: error.instancePath, message: `has an unknown key "${String(error.params.additionalProperty)}"` };
    }
    if (error.keyword === 'enum') {
      return { path: error.instancePath, message: `must be one of ${(error.params.allowedValues as unknown[]).map((v) => JSON.stringify(v)).join(', ')}` };
    }
    return { path: error.instancePath, message: error.message ?? error.keyword };
  });
}
