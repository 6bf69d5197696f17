// The bench saga's reply handler (loaded in the consume worker threads): the orchestrator's side of the replies.
import { sagaReplyHandler } from '@postbox/engine/saga';
import { benchOrchestrator } from './saga-flow.ts';

export default sagaReplyHandler(benchOrchestrator);
