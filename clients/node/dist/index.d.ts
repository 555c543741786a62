/**
 * Baton's Node client: the sidecar's socket API over its unix socket, with
 * no dependency.
 *
 *     import { Client } from "@baton-dev/client";
 *
 *     const client = new Client(); // $BATON_SOCKET, or the pod's socket
 *     await client.withLock("nightly-report", { owner: "exec-1", wait: "1m" }, async (lock) => {
 *       await work({ signal: lock.signal, fence: lock.fence });
 *     });
 *
 * lock.signal aborts the moment the lock may be lost, and withLock rejects
 * with a LockLost saying why. Every error of the API is a BatonError
 * carrying its code. docs/node.md says more.
 */
export * from "./api.js";
export { Client, type CallOptions, type Claim } from "./client.js";
export { BatonError, LockLost, SidecarUnreachable, SILENT, STREAM_ENDED } from "./errors.js";
export { Hold, type HoldOptions } from "./hold.js";
export { DEFAULT_SOCKET, socketPath } from "./wire.js";
