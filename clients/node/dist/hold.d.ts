import type { Event } from "./api.js";
import { LockLost } from "./errors.js";
import { type Answer } from "./wire.js";
/** What a hold is told of. */
export interface HoldOptions {
    /** Called once with the loss, as the signal aborts. An error it throws is ignored. */
    onLost?: (lost: LockLost) => void;
}
/**
 * A lock held through a hold stream (Client.hold): the sidecar renews it
 * for as long as the hold lasts. `signal` aborts, with a LockLost as its
 * reason, the moment the lock may be lost: a lost line, the stream's end
 * without a last line (stream_ended), no line before the last one's
 * valid_for_seconds ran out, counted from its at (silent), or a release by
 * another caller of the same owner (released). It aborts too, with a
 * BatonError (released), when release() begins. Pass it to whatever the
 * work does (fetch, timers, child processes, database queries), and check
 * it before each write.
 */
export declare class Hold {
    #private;
    /** The lock's key. */
    readonly key: string;
    /** The stream's granted event. */
    readonly grant: Event;
    /** Aborts with a LockLost when the lock may be lost, with a BatonError (released) once released. */
    readonly signal: AbortSignal;
    /** The loss, once the lock may be lost; undefined while held or once released by release(). */
    lost: LockLost | undefined;
    /** @internal Client.hold and Client.lead make holds; path is where the lock (or leadership) is let go. */
    constructor(socket: string, key: string, grant: Event, answer: Answer, options?: HoldOptions, path?: (key: string) => string);
    /** The lock's fencing token: pass it to what the work writes. */
    get fence(): number;
    /** The holder's owner (execution id). */
    get owner(): string;
    /** Whether the lock is still held: neither lost nor released. */
    held(): boolean;
    /** Throw the LockLost (or the release) once the lock may be lost or was released: call it before each step that writes. */
    check(): void;
    /**
     * Release the lock (at most one DELETE, however often called, and none
     * once the lock is gone) and close the stream. A lock found gone (lost,
     * or taken from its owner) is recorded in lost rather than thrown; any
     * other error of the DELETE rejects, after the stream is closed, which
     * lets the lock go.
     */
    release(): Promise<void>;
    /** Release it at the end of a block (`await using` in TypeScript); throws the LockLost if it was lost. */
    [Symbol.asyncDispose](): Promise<void>;
}
