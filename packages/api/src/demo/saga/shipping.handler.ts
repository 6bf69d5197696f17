// The shipping service of the demo saga: a participant handler module that ships the order. Shipping is the
// saga's pivot: once a parcel has left nothing is undone, so there is no compensation.
import { randomUUID } from 'node:crypto';
import { participant } from '@postbox/engine/saga';
import { shipOrder } from './sql/shipment.ts';

export default participant({
  name: 'shipping',
  apply: async (command, tx) => {
    const { orderId } = command.data as { orderId: string };
    const trackingId = `trk-${randomUUID().slice(0, 8)}`;
    await shipOrder(tx, orderId, trackingId);
    return { applied: true, type: 'shipping.shipped', data: { orderId, trackingId } };
  },
});
