// @postbox/engine/verify, for `postbox verify` and the tests: check the pipeline's invariants end to end.
export { verify } from './verify/verify.ts';
export { collect, type VerifyConsumer } from './verify/collect.ts';
export { check } from './verify/check.ts';
export type { CheckOptions } from './verify/options.ts';
export { formatReport, totals, type VerifyReport } from './verify/report.ts';
export type { EffectSource } from './verify/effect-source.ts';
export type { TopicReader, LogBounds } from './ports/topic-reader.ts';
export type { BrokerOffsets, PartitionPosition, TopicRetention } from './ports/offsets.ts';
