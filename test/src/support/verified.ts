import { setTimeout as sleep } from 'node:timers/promises';
import type { Sql } from '@postbox/engine';
import { KafkaOffsets, KafkaTopicReader } from '@postbox/engine/kafka';
import {
  formatReport,
  verify,
  type BrokerOffsets,
  type CheckOptions,
  type TopicReader,
  type VerifyReport,
} from '@postbox/engine/verify';

/**
 * The verifier as tests use it: over the recording handler's consumer, with its effect log (test_applied) as the
 * effect source, so loss, double effects and order are checked from what the handler really did; `settle` waits
 * for a final check to hold and `assertVerified` fails with the whole report.
 */

export const TEST_EFFECTS = {
  kind: 'log' as const,
  query:
    'SELECT event_id, aggregate_id, version AS aggregate_version FROM test_applied WHERE consumer = $1 ORDER BY seq',
};

/** The broker side of a verification: its log reader and positions (closed after the verification). */
export interface VerifyBroker {
  reader: TopicReader;
  offsets: BrokerOffsets;
}

/**
 * The verifier over one consumer of the recording handler (group `postbox.<name>`, effects in test_applied), on
 * Kafka (`brokers`, comma-separated) or on another broker's reader and offsets.
 */
export async function verifyTestConsumer(
  sql: Sql,
  broker: string | VerifyBroker,
  consumer: string,
  topics: string[],
  options: Partial<CheckOptions> = {},
): Promise<VerifyReport> {
  const { reader, offsets } = typeof broker === 'string' ? kafkaVerifier(broker) : broker;
  try {
    return await verify(
      { sql, reader, offsets },
      [{ name: consumer, groupId: `postbox.${consumer}`, topics, effects: TEST_EFFECTS }],
      options,
    );
  } finally {
    await offsets.close();
    await reader.close();
  }
}

function kafkaVerifier(brokers: string): VerifyBroker {
  const kafka = { brokers: brokers.split(','), clientId: 'postbox-test-verify' };
  return { reader: new KafkaTopicReader({ ...kafka, timeoutMs: 60_000 }), offsets: new KafkaOffsets(kafka) };
}

/**
 * Waits until everything committed so far is settled (a final `verify()` holds), polling; throws with the last
 * report when it does not within `timeoutMs`, or at once on a violation that waiting cannot mend (not `final`).
 */
export async function settle(verify: () => Promise<VerifyReport>, timeoutMs: number): Promise<VerifyReport> {
  const deadline = Date.now() + timeoutMs;
  let last: VerifyReport | null = null;
  let lastError: unknown = null;
  for (;;) {
    try {
      last = await verify();
      lastError = null;
      if (last.ok) return last;
      // Only work not settled yet (in flight, unpublished, a retry not run) is worth waiting for.
      if (last.violations.some((v) => !v.final)) throw new VerifierViolation(last);
    } catch (cause) {
      if (cause instanceof VerifierViolation) throw cause;
      lastError = cause;
    }
    if (Date.now() > deadline) {
      throw new Error(
        `not settled within ${timeoutMs} ms:\n${last ? formatReport(last) : ''}${lastError ? `\nlast error: ${(lastError as Error).message}` : ''}`,
        { cause: lastError ?? undefined },
      );
    }
    await sleep(2000);
  }
}

class VerifierViolation extends Error {
  constructor(report: VerifyReport) {
    super(`the verifier found violations:\n${formatReport(report)}`);
  }
}

/** Fails with the verifier's whole report when any check does not hold. */
export function assertVerified(report: VerifyReport): void {
  if (!report.ok) throw new VerifierViolation(report);
}
