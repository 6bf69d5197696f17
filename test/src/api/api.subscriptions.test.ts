import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { startTestApi, type TestApi } from '../support/api.ts';
import { freshDatabase, type TestDatabase } from '../support/database.ts';
import { waitFor } from '../support/processes.ts';

// Subscriptions over server-sent events are authorized when they are made, not at each event: an anonymous
// subscriber is refused before the backlog report ever runs for it. Open subscriptions are capped per token and in
// all, and a closed one gives its slot back.

let db: TestDatabase;

before(async () => {
  db = await freshDatabase();
});

after(async () => {
  await db.drop();
});

const BACKLOG = 'subscription { backlog(intervalMs: 1000) { at outbox { pending } } }';

interface SseEvent {
  event: string;
  data: any;
}

/** Every subscription a test opened, hung up in its `finally` whatever failed. */
const opened = new Set<() => void>();

function hangUpAll(): void {
  for (const close of opened) close();
  opened.clear();
}

/** An SSE subscription over real HTTP: its events one at a time, and a way to hang up. */
async function subscribe(url: string, token: string | null, query = BACKLOG) {
  const controller = new AbortController();
  const close = () => {
    controller.abort();
    opened.delete(close);
  };
  opened.add(close);
  const res = await fetch(url, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      accept: 'text/event-stream',
      ...(token ? { authorization: `Bearer ${token}` } : {}),
    },
    body: JSON.stringify({ query }),
    signal: controller.signal,
  });
  const reader = res.body!.getReader();
  let buffer = '';
  const next = async (): Promise<SseEvent | null> => {
    for (;;) {
      const i = buffer.indexOf('\n\n');
      if (i >= 0) {
        const chunk = buffer.slice(0, i);
        buffer = buffer.slice(i + 2);
        const event = chunk.split('\n').find((l) => l.startsWith('event:'));
        if (!event) continue; // a keep-alive comment
        const data = chunk.split('\n').find((l) => l.startsWith('data:'));
        return { event: event.slice(6).trim(), data: data && data.length > 5 ? JSON.parse(data.slice(5)) : null };
      }
      const { value, done } = await reader.read();
      if (done) return null;
      buffer += Buffer.from(value).toString();
    }
  };
  return {
    status: res.status,
    next,
    close,
  };
}

/** Counts the backlog reports the control plane runs from now on (its own background sampler stopped first). */
async function countReports(api: TestApi): Promise<() => number> {
  const backlog = api.resources.deps.backlog;
  await backlog.stop();
  const report = backlog.report.bind(backlog);
  let n = 0;
  backlog.report = () => {
    n++;
    return report();
  };
  return () => n;
}

test('an anonymous subscription is refused when it is made; the backlog report never runs for it', async () => {
  const api = await startTestApi(db.url);
  try {
    const reports = await countReports(api);
    const sub = await subscribe(api.url, null);
    const first = await sub.next();
    assert.equal(reports(), 0, 'no backlog report ran for an anonymous subscriber');
    assert.equal(first?.data?.errors?.[0]?.extensions?.code, 'FORBIDDEN', JSON.stringify(first));
    assert.equal((await sub.next())?.event, 'complete', 'the stream ends with the refusal');
    assert.equal(await sub.next(), null);
    assert.equal(reports(), 0);
    sub.close();

    const viewer = await subscribe(api.url, api.tokens.viewer);
    const data = await viewer.next();
    assert.equal(typeof data?.data?.data?.backlog?.at, 'string', JSON.stringify(data));
    assert.equal(reports(), 1, 'a viewer gets its report');
    viewer.close();
  } finally {
    hangUpAll();
    await api.close();
  }
});

test('open subscriptions are capped per token and in total; closing one frees its slot', async () => {
  const api = await startTestApi(db.url, { config: { subscriptionsPerToken: 2, subscriptionsTotal: 3 } });
  const open: Array<Awaited<ReturnType<typeof subscribe>>> = [];
  const start = async (token: string) => {
    const sub = await subscribe(api.url, token);
    const first = await sub.next();
    open.push(sub);
    return { sub, first };
  };
  try {
    for (let i = 0; i < 2; i++) {
      const { first } = await start(api.tokens.viewer);
      assert.equal(first?.data?.errors, undefined, `viewer subscription ${i + 1} runs: ${JSON.stringify(first)}`);
    }
    const third = await start(api.tokens.viewer);
    assert.equal(third.first?.data?.errors?.[0]?.extensions?.code, 'SUBSCRIPTION_LIMIT', JSON.stringify(third.first));
    assert.match(third.first.data.errors[0].message, /2 open subscriptions per token/);
    assert.equal((await third.sub.next())?.event, 'complete');

    const admin = await start(api.tokens.admin);
    assert.equal(admin.first?.data?.errors, undefined, 'another token has slots of its own');
    const overTotal = await start(api.tokens.operator);
    assert.equal(overTotal.first?.data?.errors?.[0]?.extensions?.code, 'SUBSCRIPTION_LIMIT');
    assert.match(overTotal.first.data.errors[0].message, /3 open subscriptions in all/);

    // Hanging up the first viewer subscription gives its slot back (the server learns of it asynchronously).
    open[0]!.close();
    const again = await waitFor(
      'the slot to be freed',
      async () => {
        const { sub, first } = await start(api.tokens.viewer);
        if (first?.data?.errors) {
          sub.close();
          return undefined;
        }
        return first;
      },
      10_000,
      100,
    );
    assert.equal(typeof again!.data.data.backlog.at, 'string');
  } finally {
    hangUpAll();
    await api.close();
  }
});
