// The payments service of the demo saga: a participant handler module that charges the order, or declines it for
// a share of orders (POSTBOX_DEMO_REFUSED_PAYMENTS, carried in this module's URL) — then the saga compensates.
import { participant } from '@postbox/engine/saga';
import { settingsOf } from './settings.ts';
import { inShare } from './share.ts';
import { chargePayment, declinePayment, refundPayment } from './sql/payment.ts';

interface PaymentCommand {
  orderId: string;
  amountCents: number;
}

const { refusedPayments } = settingsOf(import.meta.url);

export default participant({
  name: 'payments',
  apply: async (command, tx) => {
    const { orderId, amountCents } = command.data as PaymentCommand;
    // By the order, not by chance: the same order is declined however often it is asked.
    if (inShare(`refuse:${orderId}`, refusedPayments)) {
      await declinePayment(tx, orderId, amountCents);
      return { applied: false, type: 'payments.declined', data: { orderId, reason: 'card declined (demo)' } };
    }
    await chargePayment(tx, orderId, amountCents);
    return { applied: true, type: 'payments.charged', data: { orderId } };
  },
  compensate: async (command, tx) => {
    await refundPayment(tx, (command.data as PaymentCommand).orderId);
    return 'compensated';
  },
});
