// A workflow phase that "resume" clicks may start twice, with Baton's Node
// client: one click runs the phase, the others answer 409 with the running
// execution's id, and the phase's work is aborted the moment its lock may be
// lost.
import { setTimeout as sleep } from "node:timers/promises";

import { BatonError, Client, LockLost } from "@baton-dev/client";

const client = new Client(); // $BATON_SOCKET, or the pod's socket

async function runPhase(flow, phase, execution) {
  try {
    return await client.withLock(`${flow}/${phase}`, { owner: execution, ttl: "10m" }, async (lock) => {
      console.log(`${execution} runs ${flow}/${phase} with fence ${lock.fence}`);
      for (let step = 0; step < 5; step++) {
        await sleep(100, undefined, { signal: lock.signal }); // a step of the phase, writing with lock.fence
      }
      return [200, { execution_id: execution }];
    });
  } catch (err) {
    if (err instanceof LockLost) {
      return [503, { error: err.message }]; // the lock may be someone else's: the phase stopped
    }
    if (err instanceof BatonError && err.code === "already_running") {
      return [409, { running_execution_id: err.holder.owner }]; // the webhook pattern
    }
    throw err;
  }
}

const clicks = [0, 1, 2].map((n) => runPhase("flow-123", "readiness", `exec-${n}`));
for (const [status, body] of await Promise.all(clicks)) {
  console.log(status, JSON.stringify(body));
}
