import type { ErrorBody, Holder, Run } from "./api.js";
/** A loss only a client sees: the hold stream ended without a last line. */
export declare const STREAM_ENDED = "stream_ended";
/** A loss only a client sees: nothing heard past the lock's valid_for_seconds. */
export declare const SILENT = "silent";
/**
 * An error answer of the sidecar: its code (one of the API's, `Codes`) and
 * a message a person can act on. `status` is the answer's HTTP status, 0
 * when the refusal came as a hold stream's refused or error event. `body`
 * is the whole error body: holder, fence, retry_at, run... as the code has
 * them.
 */
export declare class BatonError extends Error {
    readonly code: string;
    readonly status: number;
    readonly body: Partial<ErrorBody>;
    constructor(code: string, message: string, status?: number, body?: Partial<ErrorBody>, options?: ErrorOptions);
    /** Who holds the lock, on a refusal (already_running, wait_timeout, lock_delayed). */
    get holder(): Holder | undefined;
    /** The holder's fence, on a refusal. */
    get fence(): number | undefined;
    /** The last finished run, on already_done. */
    get run(): Run | undefined;
}
/** The sidecar's socket could not be reached: the message names it. */
export declare class SidecarUnreachable extends BatonError {
    readonly socketPath: string;
    constructor(socketPath: string, cause: unknown);
}
/**
 * A held lock ended without its holder's release: the work done under it
 * must stop, another holder may have the lock already. `reason` is the
 * API's lost reason (expired, lease_lost, force_released, shutdown,
 * max_hold, etcd_rewound), or stream_ended (the stream ended without a last
 * line: the sidecar stopped or crashed, the connection broke), silent
 * (nothing heard from the sidecar past the lock's valid_for_seconds: it
 * froze, or lost etcd), or released (another caller released it with its
 * owner).
 */
export declare class LockLost extends BatonError {
    readonly key: string;
    readonly reason: string;
    readonly lostFence: number;
    constructor(key: string, fence: number, reason: string, message: string);
}
/** The BatonError of an answer that is not 200. */
export declare function errorOf(status: number, data: string): BatonError;
