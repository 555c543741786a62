// One replica of a scheduler that must run on one replica at a time, with
// Baton's Node client: it campaigns in the election "scheduler", announcing
// its address, stands by while another replica leads, and runs the
// schedule's rounds only while it leads, each with the leadership's fence.
// release() resigns, and the next replica leads at once; after a loss it
// hangs up.
import { setTimeout as sleep } from "node:timers/promises";

import { Client, LockLost } from "@baton-dev/client";

const client = new Client(); // $BATON_SOCKET, or the pod's socket
const address = process.env.ADDRESS ?? "10.0.0.5:8080"; // what this replica announces

const now = await client.leader("scheduler");
if (now.held) {
  console.log(`standby: ${now.holder.value ?? ""} leads with fence ${now.fence}`);
}
const leadership = await client.lead("scheduler", { value: address });
try {
  console.log(`${address} leads scheduler with fence ${leadership.fence}`);
  for (let round = 0; round < 10; round++) {
    await sleep(200, undefined, { signal: leadership.signal }); // a round of the schedule, writing with leadership.fence
  }
} catch (err) {
  if (!(leadership.signal.reason instanceof LockLost)) {
    throw err;
  }
} finally {
  await leadership.release(); // resign; after a loss, hang up
}
// leadership.lost: another replica may lead, and the rounds stopped.
console.log(leadership.lost ? `${address} lost the leadership: ${leadership.lost.reason}` : `${address} resigned`);
