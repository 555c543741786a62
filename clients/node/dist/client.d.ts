import type { Forced, Grant, Released, Request, Run, Status, WatchEvent } from "./api.js";
import { Hold, type HoldOptions } from "./hold.js";
/** What an acquire or a hold asks for: the API's request body, as it names its fields. */
export type Claim = Request;
/** Options of a call that may wait. */
export interface CallOptions {
    /** Aborting it hangs up: a waiter is withdrawn, and the call rejects with the signal's reason. */
    signal?: AbortSignal;
}
/** The client of one sidecar. */
export declare class Client {
    #private;
    /** The sidecar's socket. */
    readonly socket: string;
    /** A client of the sidecar serving socket (default: as the baton command finds it, socketPath()). */
    constructor(options?: {
        socket?: string;
    });
    /**
     * Take the lock: granted, or a BatonError (already_running naming the
     * holder; wait_timeout after claim.wait). The lock is held until
     * released, or until its ttl unless extended.
     */
    acquire(key: string, claim?: Claim, options?: CallOptions): Promise<Grant>;
    /** Release the owner's lock. */
    release(key: string, owner: string): Promise<Released>;
    /** Move the owner's deadline to now + ttl (default: the lock's). */
    extend(key: string, owner: string, ttl?: string): Promise<Grant>;
    /** A run-once holder records its outcome and lets the lock go. */
    done(key: string, owner: string, ok: boolean, result?: string): Promise<Run>;
    /** The lock's holder(s), fence and waiters. */
    status(key: string): Promise<Status>;
    /** Every lock under prefix. */
    list(prefix?: string): Promise<Status[]>;
    /** Free the lock whoever holds it (only if fence is still the holder's, when given): for operators. */
    forceRelease(key: string, options?: {
        fence?: number;
        by?: string;
    }): Promise<Forced>;
    /**
     * Take the lock through a hold stream, waiting claim.wait (absent: try
     * once; "forever" as it says), and return the Hold once granted. The
     * sidecar renews it until hold.release(); hold.signal aborts the moment
     * it may be lost. Rejects with a BatonError when refused. options.signal
     * withdraws the wait when it aborts, and, once granted, releases the
     * lock.
     */
    hold(key: string, claim?: Claim, options?: HoldOptions & CallOptions): Promise<Hold>;
    /**
     * Campaign in election name, as long as it takes unless claim.wait says
     * otherwise (claim.value is what the leader announces), and return the
     * Hold of the leadership once elected: hold.signal aborts the moment it
     * may be lost, hold.release() resigns.
     */
    lead(name: string, claim?: Claim, options?: HoldOptions & CallOptions): Promise<Hold>;
    /** Who leads election name: a status whose holder is the leader (with its value) when held. */
    leader(name: string): Promise<Status>;
    /** The leader (owner) of election name announces value instead; its fence stays. */
    proclaim(name: string, owner: string, value: string): Promise<Grant>;
    /** End owner's leadership of election name, or its candidacy. */
    resign(name: string, owner: string): Promise<Released>;
    /**
     * Follow election name, or every election under options.prefix: its
     * state, then each new leader (granted), each end, each value proclaimed;
     * never a leader older than one told.
     */
    observe(name?: string, options?: {
        prefix?: string;
    } & CallOptions): AsyncGenerator<WatchEvent>;
    /**
     * Run fn under the lock, held through a hold stream for as long as fn
     * runs, and release it after. fn gets the Hold: pass lock.signal to what
     * it does, and lock.fence to what it writes. Rejects with the LockLost
     * when the lock may have been lost while fn ran, even if fn resolved.
     */
    withLock<T>(key: string, claim: Claim, fn: (lock: Hold) => Promise<T> | T, options?: HoldOptions & CallOptions): Promise<T>;
    /**
     * Follow a lock (key), or every lock under options.prefix: its state,
     * synced, then each change, until the signal aborts or the loop breaks.
     */
    watch(key?: string, options?: {
        prefix?: string;
    } & CallOptions): AsyncGenerator<WatchEvent>;
}
