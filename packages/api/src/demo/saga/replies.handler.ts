// The order service's side of the demo saga: the reply consumer's handler module. It runs the orchestrator's
// reply handler, losing a share of replies (POSTBOX_DEMO_LOST_REPLIES, carried in this module's URL).
import { SagaOrchestrator, sagaReplyBatchHandler, sagaReplyHandler } from '@postbox/engine/saga';
import { fulfilmentSaga } from './fulfilment-saga.ts';
import { losingReplies, losingReplyBatches } from './lost-replies.ts';
import { settingsOf } from './settings.ts';

const settings = settingsOf(import.meta.url);
const orchestrator = new SagaOrchestrator([fulfilmentSaga(settings.prefix)]);

export default losingReplies(sagaReplyHandler(orchestrator), settings.lostReplies);

// A task's replies lock their sagas in id order first, so two tasks holding the same sagas never deadlock.
export const handleBatch = losingReplyBatches(sagaReplyBatchHandler(orchestrator), settings.lostReplies);
