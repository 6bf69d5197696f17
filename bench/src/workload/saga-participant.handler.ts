// A bench saga participant (loaded in the consume worker threads, once per role: the role is this module's URL
// query, ?role=reserve|charge|ship): applies every command with one row in bench_saga_effect, in the consumer's
// transaction, through participant() — the step record and the reply written with it.
import { participant } from '@postbox/engine/saga';

const role = new URL(import.meta.url).searchParams.get('role');
if (!role) throw new Error(`${import.meta.url}: load it with ?role=reserve|charge|ship`);

export default participant({
  name: `bench-${role}`,
  apply: async (cmd, tx) => {
    await tx`INSERT INTO bench_saga_effect (role, order_id) VALUES (${role}, ${(cmd.data as { orderId: string }).orderId})`;
    return { applied: true, type: `${role}.done` };
  },
});
