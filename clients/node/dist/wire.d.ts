import type { Event } from "./api.js";
/** The socket of a pod's sidecar, where the injector mounts it. */
export declare const DEFAULT_SOCKET = "/var/run/baton/baton.sock";
/**
 * The sidecar's socket as the baton command finds it: path if given, else
 * $BATON_SOCKET, else $BATON_SOCKET_PATH, else the pod's socket.
 */
export declare function socketPath(path?: string): string;
/** The path of a lock's resource, or of an action on it (KEY:hold). */
export declare function lockPath(key: string, action?: string): string;
/** The path of election name, with a custom method (campaign, proclaim, observe) after a colon. */
export declare function electionPath(name: string, action?: string): string;
/** A query string of the parameters that are set. */
export declare function query(params: Record<string, string | number | boolean | undefined>): string;
/**
 * How many milliseconds from now the lock stays certainly the holder's on
 * the word of a granted or heartbeat event: its valid_for_seconds counted
 * from its at, when the sidecar sent it, not from when it was read.
 * undefined when the event says nothing of it.
 */
export declare function validFor(event: Event, now?: number): number | undefined;
/** An answer of 200 whose body is still to read. */
export interface Answer {
    /** The body's next line; undefined at its end. A broken stream rejects with a BatonError (stream_ended). */
    next(): Promise<string | undefined>;
    /** Hang up. */
    close(): void;
}
/** The JSON of an answer's line or body; a BatonError (unexpected) when it is not JSON. */
export declare function parse<T>(text: string): T;
/**
 * Send a request to the sidecar and return its answer once it is 200;
 * otherwise reject with its BatonError. The signal, when it aborts before
 * the answer, hangs up (a waiter is withdrawn) and rejects with its reason.
 */
export declare function open(socket: string, method: string, path: string, body?: unknown, signal?: AbortSignal): Promise<Answer>;
/** Send a request and return its JSON answer. */
export declare function call<T>(socket: string, method: string, path: string, body?: unknown, signal?: AbortSignal): Promise<T>;
