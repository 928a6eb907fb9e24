/**
 * Which pods a MutatingWebhookConfiguration's webhook is sent, as the API
 * server decides it before it calls: its rules (Pod CREATE), its
 * namespaceSelector against the namespace's labels, its objectSelector
 * against the pod's labels (Kubernetes label selectors: matchLabels and
 * matchExpressions In, NotIn, Exists, DoesNotExist, all of them ANDed; an
 * empty or absent selector selects everything). A requirement that does not
 * hold is returned as a value, with the label change that would make it hold.
 */
import { asObject, type Plain } from '../core/index.js';

type Labels = Readonly<Record<string, string>>;

export interface Requirement {
  key: string;
  operator: 'In' | 'NotIn' | 'Exists' | 'DoesNotExist';
  values: string[];
}

/** The requirements of a label selector, matchLabels first (each is `key In [value]`). */
export function requirementsOf(selector: unknown): Requirement[] {
  const s = asObject(selector);
  if (!s) return [];
  const fromLabels = Object.entries(asObject(s.matchLabels) ?? {}).map(([key, value]): Requirement => ({ key, operator: 'In', values: [String(value)] }));
  const fromExpressions = (Array.isArray(s.matchExpressions) ? s.matchExpressions : []).flatMap((item): Requirement[] => {
    const e = asObject(item);
    if (!e || typeof e.key !== 'string') return [];
    const operator = e.operator;
    if (operator !== 'In' && operator !== 'NotIn' && operator !== 'Exists' && operator !== 'DoesNotExist') return [];
    return [{ key: e.key, operator, values: Array.isArray(e.values) ? e.values.map(String) : [] }];
  });
  return [...fromLabels, ...fromExpressions];
}

export function holds(requirement: Requirement, labels: Labels): boolean {
  const has = Object.prototype.hasOwnProperty.call(labels, requirement.key);
  const value = has ? labels[requirement.key] : undefined;
  switch (requirement.operator) {
    case 'In':
      return has && requirement.values.includes(value!);
    case 'NotIn':
      return !has || !requirement.values.includes(value!);
    case 'Exists':
      return has;
    case 'DoesNotExist':
      return !has;
  }
}

/** The first requirement of `selector` that `labels` do not meet; undefined: selected. */
export function unmet(selector: unknown, labels: Labels): Requirement | undefined {
  return requirementsOf(selector).find((r) => !holds(r, labels));
}

export function describeRequirement(r: Requirement): string {
  switch (r.operator) {
    case 'In':
      return r.values.length === 1 ? `${r.key}=${r.values[0]}` : `${r.key} in (${r.values.join(', ')})`;
    case 'NotIn':
      return `${r.key} not in (${r.values.join(', ')})`;
    case 'Exists':
      return `${r.key} set`;
    case 'DoesNotExist':
      return `${r.key} not set`;
  }
}

/** The `kubectl label` arguments that make `labels` meet `r`: `KEY=VALUE` or `KEY-`. */
export function labelChange(r: Requirement, labels: Labels): string | undefined {
  if (r.operator === 'In') return r.values[0] === undefined ? undefined : `${r.key}=${r.values[0]}${r.key in labels ? ' --overwrite' : ''}`;
  if (r.operator === 'NotIn' || r.operator === 'DoesNotExist') return `${r.key}-`;
  return `${r.key}=true`;
}

/** Whether one of the webhook's rules covers a Pod CREATE (core group, v1, namespaced). */
export function rulesCoverPodCreate(rules: unknown): boolean {
  const list = Array.isArray(rules) ? rules.map(asObject) : [];
  const anyOf = (value: unknown, wanted: readonly string[]): boolean => Array.isArray(value) && value.some((v) => wanted.includes(String(v)));
  return list.some(
    (rule: Plain | undefined) =>
      rule !== undefined &&
      anyOf(rule.operations, ['CREATE', '*']) &&
      anyOf(rule.apiGroups, ['', '*']) &&
      anyOf(rule.apiVersions, ['v1', '*']) &&
      anyOf(rule.resources, ['pods', '*', '*/*']) &&
      (rule.scope === undefined || rule.scope === '*' || rule.scope === 'Namespaced'),
  );
}

export function labelsOf(object: unknown): Record<string, string> {
  const labels = asObject(asObject(asObject(object)?.metadata)?.labels) ?? {};
  return Object.fromEntries(Object.entries(labels).map(([k, v]) => [k, String(v)]));
}
