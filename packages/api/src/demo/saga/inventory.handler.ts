// The inventory service of the demo saga: a participant handler module (consumers load it by URL) that reserves
// one unit per order and releases it when the saga compensates, in the consumer's transaction.
import { participant } from '@postbox/engine/saga';
import { releaseStock, reserveStock } from './sql/stock-reservation.ts';

interface StockCommand {
  orderId: string;
  quantity?: number;
}

export default participant({
  name: 'inventory',
  apply: async (command, tx) => {
    const { orderId, quantity = 1 } = command.data as StockCommand;
    await reserveStock(tx, orderId, quantity);
    return { applied: true, type: 'inventory.reserved', data: { orderId } };
  },
  // Called only for a reservation this participant applied (participant() keeps the step record), so there is
  // always one to release.
  compensate: async (command, tx) => {
    await releaseStock(tx, (command.data as StockCommand).orderId);
    return 'compensated';
  },
});
