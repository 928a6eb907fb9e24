/**
 * The audit's pure parts: label selectors as the API server evaluates them,
 * the rules that send a Pod CREATE, and the webhook's not-wrapped annotation
 * read back per container.
 */
import { describe, expect, it } from 'vitest';
import { notWrappedReason } from '../../src/audit/classify.js';
import { imageEntryFix } from '../../src/core/index.js';
import { NOT_WRAPPED_LIMIT, notWrappedAnnotation } from '../../src/webhook/admission.js';
import { describeRequirement, labelChange, rulesCoverPodCreate, unmet } from '../../src/audit/selection.js';

describe('label selectors', () => {
  const selector = {
    matchLabels: { team: 'ml' },
    matchExpressions: [
      { key: 'vram-preflight.io/inject', operator: 'In', values: ['enabled'] },
      { key: 'kubernetes.io/metadata.name', operator: 'NotIn', values: ['kube-system'] },
      { key: 'gpu', operator: 'Exists' },
      { key: 'legacy', operator: 'DoesNotExist' },
    ],
  };
  const ok = { team: 'ml', 'vram-preflight.io/inject': 'enabled', 'kubernetes.io/metadata.name': 'models', gpu: '' };

  it('selects when every requirement holds; an empty or absent selector selects everything', () => {
    expect(unmet(selector, ok)).toBeUndefined();
    expect(unmet({}, {})).toBeUndefined();
    expect(unmet(undefined, {})).toBeUndefined();
    expect(unmet({ matchExpressions: [] }, { a: 'b' })).toBeUndefined();
  });

  it('names the first requirement that fails, matchLabels first, and the label change that meets it', () => {
    const cases: [Record<string, string>, string, string][] = [
      [{ ...ok, team: 'web' }, 'team=ml', 'team=ml --overwrite'],
      [{ ...ok, 'vram-preflight.io/inject': 'disabled' }, 'vram-preflight.io/inject=enabled', 'vram-preflight.io/inject=enabled --overwrite'],
      [{ ...ok, 'kubernetes.io/metadata.name': 'kube-system' }, 'kubernetes.io/metadata.name not in (kube-system)', 'kubernetes.io/metadata.name-'],
      [Object.fromEntries(Object.entries(ok).filter(([k]) => k !== 'gpu')), 'gpu set', 'gpu=true'],
      [{ ...ok, legacy: 'yes' }, 'legacy not set', 'legacy-'],
    ];
    for (const [labels, described, change] of cases) {
      const r = unmet(selector, labels);
      expect(r && describeRequirement(r)).toBe(described);
      expect(r && labelChange(r, labels)).toBe(change);
    }
    // NotIn holds where the label is absent; In does not.
    expect(unmet({ matchExpressions: [{ key: 'x', operator: 'NotIn', values: ['a'] }] }, {})).toBeUndefined();
    expect(unmet({ matchExpressions: [{ key: 'x', operator: 'In', values: ['a'] }] }, {})).toMatchObject({ key: 'x' });
  });
});

describe('webhook rules', () => {
  const rule = { apiGroups: [''], apiVersions: ['v1'], resources: ['pods'], operations: ['CREATE'], scope: 'Namespaced' };
  it('a Pod CREATE is sent by the chart\'s rule and by wildcards, not by rules for other things', () => {
    expect(rulesCoverPodCreate([rule])).toBe(true);
    expect(rulesCoverPodCreate([{ apiGroups: ['*'], apiVersions: ['*'], resources: ['*'], operations: ['*'] }])).toBe(true);
    expect(rulesCoverPodCreate([{ ...rule, operations: ['UPDATE'] }])).toBe(false);
    expect(rulesCoverPodCreate([{ ...rule, resources: ['pods/ephemeralcontainers'] }])).toBe(false);
    expect(rulesCoverPodCreate([{ ...rule, apiGroups: ['apps'] }])).toBe(false);
    expect(rulesCoverPodCreate([{ ...rule, scope: 'Cluster' }])).toBe(false);
    expect(rulesCoverPodCreate([{ ...rule, operations: ['UPDATE'] }, rule])).toBe(true);
    expect(rulesCoverPodCreate(undefined)).toBe(false);
  });
});

describe('the not-wrapped annotation, per container', () => {
  const names = ['prefill', 'decode', 'sidecar'];
  it('reads what the webhook writes (0.4.0: a block per container, its fix indented under it)', () => {
    const annotation = notWrappedAnnotation([
      { container: 'prefill', reason: 'the container gives no command, so it runs the image\'s ENTRYPOINT, which is not known for sure; really', fix: { entry: imageEntryFix('registry.example.com/ml/vllm:team-7', true, false) } },
      { container: 'decode', reason: 'DRA ResourceClaimTemplate gpu: HTTP 403; so it cannot tell', fix: { text: 'grant get on resourceclaimtemplates' } },
    ]);
    expect(annotation.split('\n').length).toBeGreaterThan(4);
    expect(notWrappedReason(annotation, 'prefill', names)).toBe("the container gives no command, so it runs the image's ENTRYPOINT, which is not known for sure; really");
    expect(notWrappedReason(annotation, 'decode', names)).toBe('DRA ResourceClaimTemplate gpu: HTTP 403; so it cannot tell');
    expect(notWrappedReason(annotation, 'sidecar', names)).toBeUndefined();
  });

  it('a container past the annotation\'s limit: its reason is in the webhook\'s log, and it is said so', () => {
    const many = Array.from({ length: 40 }, (_, i) => ({ container: `c${i}`, reason: `reason ${i} ${'x'.repeat(150)}` }));
    const annotation = notWrappedAnnotation(many);
    expect(annotation.length).toBeLessThanOrEqual(NOT_WRAPPED_LIMIT);
    const all = many.map((m) => m.container);
    expect(notWrappedReason(annotation, 'c0', all)).toBe(`reason 0 ${'x'.repeat(150)}`);
    expect(notWrappedReason(annotation, 'c39', all)).toBe("its reason did not fit in the annotation (the webhook's log has it)");
  });

  it('0.3.0\'s one line: cuts at the pod\'s container names, whatever "; " a reason holds', () => {
    const annotation = 'prefill: DRA ResourceClaimTemplate gpu: HTTP 403; DRA ResourceClaim x: not found, so it cannot tell; decode: the start of its image is known only to its registry';
    expect(notWrappedReason(annotation, 'prefill', names)).toBe('DRA ResourceClaimTemplate gpu: HTTP 403; DRA ResourceClaim x: not found, so it cannot tell');
    expect(notWrappedReason(annotation, 'decode', names)).toBe('the start of its image is known only to its registry');
    expect(notWrappedReason(annotation, 'sidecar', names)).toBeUndefined();
  });

  it('`*` (an internal error) is every container\'s reason; no annotation, none', () => {
    expect(notWrappedReason('*: internal error in vram-preflight (see its log)', 'decode', names)).toBe('internal error in vram-preflight (see its log)');
    expect(notWrappedReason(undefined, 'decode', names)).toBeUndefined();
    expect(notWrappedReason('', 'decode', names)).toBeUndefined();
  });

  it('a container name that also ends another one is not taken for it', () => {
    expect(notWrappedReason('model: refused; big-model: fine reason', 'model', ['model', 'big-model'])).toBe('refused');
    expect(notWrappedReason('big-model: only this one', 'model', ['model', 'big-model'])).toBeUndefined();
  });
});
