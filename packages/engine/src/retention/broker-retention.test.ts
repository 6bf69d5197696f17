import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { inboxWindowRefusal } from './broker-retention.ts';

const DAY = 86_400_000;

test('refused exactly when some topic keeps records longer than the inbox window; the reason names the longest', () => {
  fc.assert(
    fc.property(
      fc.option(fc.integer({ min: 1, max: 400 }), { nil: null }),
      fc.array(fc.option(fc.integer({ min: 0, max: 400 * DAY }), { nil: null }), { maxLength: 6 }),
      (inboxDays, retentions) => {
        const topics = retentions.map((retentionMs, i) => ({ topic: `t${i}`, retentionMs, source: 'test' }));
        const refusal = inboxWindowRefusal({ inboxDays }, topics);
        const window = inboxDays === null ? Infinity : inboxDays * DAY;
        const outlives = topics.filter((t) => (t.retentionMs ?? Infinity) > window);
        assert.equal(refusal !== null, outlives.length > 0);
        if (refusal) {
          const longest = Math.max(...outlives.map((t) => t.retentionMs ?? Infinity));
          assert.equal(refusal.retentionMs ?? Infinity, longest);
          assert.match(refusal.reason, new RegExp(`topic ${refusal.topic}: records kept`));
        }
      },
    ),
  );
});

test('the reason says what to set', () => {
  const r = inboxWindowRefusal({ inboxDays: 3 }, [
    { topic: 'orders', retentionMs: 14 * DAY, source: 'retention.ms 604800000 + segment.ms 604800000' },
  ]);
  assert.equal(
    r?.reason,
    'inbox window 3 d < topic orders: records kept 14 d (retention.ms 604800000 + segment.ms 604800000); a redelivery ' +
      'after its inbox row is gone would be applied again. Set POSTBOX_INBOX_RETENTION_DAYS ≥ 14 or shorten the ' +
      "topic's retention",
  );
});
