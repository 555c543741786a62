import { BatonError } from "./errors.js";
import { Hold } from "./hold.js";
import { call, electionPath, lockPath, open, parse, query, socketPath } from "./wire.js";
/** The client of one sidecar. */
export class Client {
    /** The sidecar's socket. */
    socket;
    /** A client of the sidecar serving socket (default: as the baton command finds it, socketPath()). */
    constructor(options = {}) {
        this.socket = socketPath(options.socket);
    }
    /**
     * Take the lock: granted, or a BatonError (already_running naming the
     * holder; wait_timeout after claim.wait). The lock is held until
     * released, or until its ttl unless extended.
     */
    acquire(key, claim = {}, options = {}) {
        return call(this.socket, "POST", lockPath(key), claim, options.signal);
    }
    /** Release the owner's lock. */
    release(key, owner) {
        return call(this.socket, "DELETE", lockPath(key) + query({ owner }));
    }
    /** Move the owner's deadline to now + ttl (default: the lock's). */
    extend(key, owner, ttl) {
        return call(this.socket, "POST", lockPath(key, "extend"), ttl === undefined ? { owner } : { owner, ttl });
    }
    /** A run-once holder records its outcome and lets the lock go. */
    done(key, owner, ok, result) {
        return call(this.socket, "POST", lockPath(key, "done"), result === undefined ? { owner, ok } : { owner, ok, result });
    }
    /** The lock's holder(s), fence and waiters. */
    status(key) {
        return call(this.socket, "GET", lockPath(key));
    }
    /** Every lock under prefix. */
    async list(prefix = "") {
        return (await call(this.socket, "GET", "/v1/locks" + query({ prefix }))).locks;
    }
    /** Free the lock whoever holds it (only if fence is still the holder's, when given): for operators. */
    forceRelease(key, options = {}) {
        return call(this.socket, "DELETE", lockPath(key) + query({ force: true, fence: options.fence, by: options.by }));
    }
    /**
     * Take the lock through a hold stream, waiting claim.wait (absent: try
     * once; "forever" as it says), and return the Hold once granted. The
     * sidecar renews it until hold.release(); hold.signal aborts the moment
     * it may be lost. Rejects with a BatonError when refused. options.signal
     * withdraws the wait when it aborts, and, once granted, releases the
     * lock.
     */
    hold(key, claim = {}, options = {}) {
        return this.#stream(lockPath, "hold", key, claim, options);
    }
    /**
     * Campaign in election name, as long as it takes unless claim.wait says
     * otherwise (claim.value is what the leader announces), and return the
     * Hold of the leadership once elected: hold.signal aborts the moment it
     * may be lost, hold.release() resigns.
     */
    lead(name, claim = {}, options = {}) {
        return this.#stream(electionPath, "campaign", name, claim, options);
    }
    /** Who leads election name: a status whose holder is the leader (with its value) when held. */
    leader(name) {
        return call(this.socket, "GET", electionPath(name));
    }
    /** The leader (owner) of election name announces value instead; its fence stays. */
    proclaim(name, owner, value) {
        return call(this.socket, "POST", electionPath(name, "proclaim"), { owner, value });
    }
    /** End owner's leadership of election name, or its candidacy. */
    resign(name, owner) {
        return call(this.socket, "DELETE", electionPath(name) + query({ owner }));
    }
    /**
     * Follow election name, or every election under options.prefix: its
     * state, then each new leader (granted), each end, each value proclaimed;
     * never a leader older than one told.
     */
    observe(name, options = {}) {
        return this.#follow(name ? electionPath(name, "observe") : "/v1/elections:observe" + query({ prefix: options.prefix }), options);
    }
    /** The stream of a lock's hold (path lockPath) or an election's campaign (electionPath), until the grant. */
    async #stream(path, verb, key, claim, options) {
        const { signal } = options;
        const answer = await open(this.socket, "POST", path(key, verb), claim, signal);
        const onAbort = () => answer.close();
        signal?.addEventListener("abort", onAbort, { once: true });
        try {
            if (signal?.aborted) {
                onAbort();
            }
            for (let line = await answer.next(); line !== undefined; line = await answer.next()) {
                if (line === "") {
                    continue;
                }
                const event = parse(line);
                if (event.event === "refused" || event.event === "error") {
                    const code = event.code ?? "unexpected";
                    throw new BatonError(code, event.message || `lock ${JSON.stringify(key)} not granted: ${code}`, 0, {
                        ...event,
                        message: event.message ?? "",
                    });
                }
                if (event.event !== "granted") {
                    continue;
                }
                if (signal?.aborted) {
                    // Granted as the caller gave up: let it go by its owner's DELETE
                    // (hanging up alone would be a loss, held back by a lock delay).
                    await call(this.socket, "DELETE", path(key) + query({ owner: event.owner })).catch(() => undefined);
                    break;
                }
                const lock = new Hold(this.socket, key, event, answer, options, (k) => path(k));
                if (signal) {
                    const release = () => void lock.release().catch(() => undefined);
                    signal.addEventListener("abort", release, { once: true });
                    lock.signal.addEventListener("abort", () => signal.removeEventListener("abort", release), { once: true });
                }
                return lock;
            }
            signal?.throwIfAborted();
            throw new BatonError("stream_ended", `lock ${JSON.stringify(key)}: the sidecar's stream ended before a grant`);
        }
        catch (err) {
            answer.close(); // withdraws a waiter
            signal?.throwIfAborted();
            throw err;
        }
        finally {
            signal?.removeEventListener("abort", onAbort);
        }
    }
    /**
     * Run fn under the lock, held through a hold stream for as long as fn
     * runs, and release it after. fn gets the Hold: pass lock.signal to what
     * it does, and lock.fence to what it writes. Rejects with the LockLost
     * when the lock may have been lost while fn ran, even if fn resolved.
     */
    async withLock(key, claim, fn, options = {}) {
        const lock = await this.hold(key, claim, options);
        let result;
        try {
            result = await fn(lock);
        }
        catch (err) {
            await lock.release().catch(() => undefined); // fn's error, or the loss, says more
            throw lock.lost ?? err;
        }
        await lock.release();
        if (lock.lost) {
            throw lock.lost;
        }
        return result;
    }
    /**
     * Follow a lock (key), or every lock under options.prefix: its state,
     * synced, then each change, until the signal aborts or the loop breaks.
     */
    watch(key, options = {}) {
        return this.#follow(key ? lockPath(key, "watch") : "/v1/locks:watch" + query({ prefix: options.prefix }), options);
    }
    /** The events of a watch at path, until the signal aborts or the loop breaks. */
    async *#follow(path, options) {
        const answer = await open(this.socket, "GET", path, undefined, options.signal);
        const onAbort = () => answer.close();
        options.signal?.addEventListener("abort", onAbort, { once: true });
        try {
            if (options.signal?.aborted) {
                onAbort();
            }
            for (let line = await answer.next(); line !== undefined; line = await answer.next()) {
                options.signal?.throwIfAborted();
                if (line !== "") {
                    yield parse(line);
                }
            }
            options.signal?.throwIfAborted();
        }
        finally {
            options.signal?.removeEventListener("abort", onAbort);
            answer.close();
        }
    }
}
