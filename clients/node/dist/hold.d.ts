import type { Event } from "./api.js";
import { LockLost } from "./errors.js";
import { type Answer } from "./wire.js";
/** What a hold is told of, and by whom it is released. */
export interface HoldOptions {
    /** Called once with the loss, as the signal aborts. An error it throws is ignored. */
    onLost?: (lost: LockLost) => void;
}
/**
 * A lock held through a hold stream (Client.hold): the sidecar renews it
 * for as long as the hold lasts. `signal` aborts, with a LockLost as its
 * reason, the moment the lock may be lost: a lost line, the stream's end
 * without a last line (stream_ended), or no line before the last one's
 * valid_for_seconds ran out, counted from its at (silent). Pass it to
 * whatever the work does (fetch, timers, child processes, database
 * queries), and check it before each write.
 */
export declare class Hold {
    #private;
    /** The lock's key. */
    readonly key: string;
    /** The stream's granted event. */
    readonly grant: Event;
    /** Aborts with a LockLost when the lock may be lost. */
    readonly signal: AbortSignal;
    /** The loss, once the lock may be lost; undefined while held or once released. */
    lost: LockLost | undefined;
    /** @internal Client.hold makes holds. */
    constructor(socket: string, key: string, grant: Event, answer: Answer, options?: HoldOptions);
    /** The lock's fencing token: pass it to what the work writes. */
    get fence(): number;
    /** The holder's owner (execution id). */
    get owner(): string;
    /** Whether the lock is still held: neither lost nor released. */
    held(): boolean;
    /** Throw the LockLost if the lock may be lost: call it before each step that writes. */
    check(): void;
    /**
     * Release the lock (one DELETE, however often called) and close the
     * stream. A lock that is gone (lost, or taken from its owner) is recorded
     * in lost rather than thrown.
     */
    release(): Promise<void>;
    /** `await using lock = await client.hold(...)`: released at the block's end; throws the loss if lost. */
    [Symbol.asyncDispose](): Promise<void>;
}
