/** The outcome of a run-once holder's run. */
export interface Done {
    /** true: the run succeeded and is not run again; false: it failed and may be. */
    ok: boolean;
    owner: string;
    result?: string;
}
/** A Go duration string ("30s", "5m") or a number of seconds. */
export type Duration = string | number;
export interface ErrorBody {
    code: "already_running" | "wait_timeout" | "already_done" | "fence_mismatch" | "limit_mismatch" | "lock_delayed" | "not_held" | "not_owner" | "lock_lost" | "unavailable" | "etcd_permission_denied" | "etcd_rewound" | "etcd_no_space" | "etcd_corrupt" | "forbidden" | "too_many_waiters" | "invalid_key" | "invalid_owner" | "invalid_ttl" | "invalid_wait" | "invalid_max_hold" | "invalid_mode" | "invalid_limit" | "invalid_weight" | "invalid_lock_delay" | "invalid_value" | "invalid_json" | "invalid_request" | "body_too_large" | "body_timeout" | "not_found" | "method_not_allowed" | "internal";
    ended_at?: Time;
    fence?: number;
    granted?: false;
    holder?: Holder;
    /** already_running, wait_timeout: every holder of a semaphore or of a lock readers share, the first of them holder; absent for a lock held whole. */
    holders?: Holding[];
    key?: string;
    /** limit_mismatch: the limit in force on the lock; absent when it is not a semaphore. */
    limit?: number;
    message: string;
    reason?: "expired" | "lease_lost" | "force_released" | "shutdown" | "max_hold" | "etcd_rewound";
    /** lock_delayed: when the lock is free to take. */
    retry_at?: Time;
    /** already_done: the last finished run. */
    run?: Run;
}
export interface Event {
    acquired_at?: Time;
    at: Time;
    code?: string;
    event: "queued" | "granted" | "heartbeat" | "lost" | "released" | "refused" | "error";
    expires_at?: Time;
    fence?: number;
    holder?: Holder;
    key: string;
    /** granted: the TTL of the sidecar's etcd lease, renewed every third of it: how long the lock outlives the sidecar if it stops without releasing it. */
    lease_ttl_seconds?: number;
    max_hold_at?: Time;
    message?: string;
    owner?: string;
    /** queued: contenders ahead. */
    position?: number;
    reason?: "expired" | "lease_lost" | "force_released" | "shutdown" | "max_hold" | "etcd_rewound";
    /** refused lock_delayed: when the lock is free to take. */
    retry_at?: Time;
    /** refused already_done (a run-once stream): the last run. */
    run?: Run;
    /** granted and heartbeat: how many seconds after at the lock cannot be granted to anyone else even if the sidecar stopped right after sending the line (froze, or lost etcd). A holder that hears nothing more must have stopped its work by then: silence past it is a loss. */
    valid_for_seconds?: number;
    /** On a campaign's granted event: what the new leader announces. */
    value?: string;
}
export interface Forced {
    fence: number;
    forced: true;
    holder: Holder;
    key: string;
    released: true;
}
export interface Grant {
    acquired_at: Time;
    expires_at: Time;
    /** The fencing token: grows with every grant of the lock. */
    fence: number;
    granted: true;
    key: string;
    /** The semaphore's units. */
    limit?: number;
    /** Granted as a reader. */
    mode?: "read";
    owner: string;
    /** An election's leader: what it announces. */
    value?: string;
    /** The units this grant holds. */
    weight?: number;
}
export interface Health {
    status: "ok" | "ready";
}
export interface Holder {
    acquired_at?: Time;
    /** The holder's Kubernetes cluster (its sidecar's --cluster-name), when clusters share one etcd. */
    cluster?: string;
    expires_at?: Time;
    /** A holder that is not Baton (etcdctl lock). */
    foreign?: boolean;
    /** A reader of a read/write lock. */
    mode?: "read";
    namespace?: string;
    node?: string;
    owner: string;
    pod?: string;
    /** Its local process, when it holds or waits through the answering sidecar (a status of one lock only). */
    process?: Process;
    /** An election's leader: what it announces (its campaign's or its last proclaim's value); a leader that is not Baton's, its whole value in etcd. */
    value?: string;
    /** The units of a semaphore this holder has. */
    weight?: number;
}
/** One holder of a lock that may have several, with its fence. */
export interface Holding {
    acquired_at?: Time;
    /** The holder's Kubernetes cluster (its sidecar's --cluster-name), when clusters share one etcd. */
    cluster?: string;
    expires_at?: Time;
    fence: number;
    /** A holder that is not Baton (etcdctl lock). */
    foreign?: boolean;
    /** A reader of a read/write lock. */
    mode?: "read";
    namespace?: string;
    node?: string;
    owner: string;
    pod?: string;
    /** Its local process, when it holds or waits through the answering sidecar (a status of one lock only). */
    process?: Process;
    /** The units of a semaphore this holder has. */
    weight?: number;
}
export interface List {
    locks: Status[];
    truncated?: boolean;
}
/** A local process of the answering sidecar's pod holding or waiting for a lock: its pid from the unix socket's peer credentials when it asked, its command from /proc when the status is read. */
export interface Process {
    /** Its command line, its arguments joined by spaces (at most 1024 bytes). */
    command?: string;
    /** It is gone: the lock outlives it until its ttl, a release, or the sidecar's end. */
    exited?: boolean;
    /** Its process id, in the sidecar's process namespace. */
    pid?: number;
    /** Why the sidecar cannot see it: it is not in the sidecar's process namespace (a pod without shareProcessNamespace). */
    unseen?: string;
}
/** A caller of the answering sidecar queued for a lock behind that sidecar's own contender. */
export interface Queued {
    owner: string;
    /** Its local process. */
    process?: Process;
    /** When it queued. */
    since?: Time;
}
/** A release by the owner, or a force release. */
export type ReleaseAnswer = Released | Forced;
export interface Released {
    fence: number;
    held_for: string;
    held_for_seconds: number;
    key: string;
    owner: string;
    released: true;
}
export interface Request {
    /** With once: after a success, skip (the default) answers already_done, rerun runs again. */
    if_done?: "skip" | "rerun";
    /** With once: after a failure, retry (the default) runs again, skip answers already_done. */
    if_failed?: "retry" | "skip";
    /** Makes the lock a semaphore of this many units; every caller gives the same limit (409 limit_mismatch otherwise). 1 is the plain lock. */
    limit?: number;
    /** For a lock held whole: if the holder loses it other than by its release, nobody gets it for this long after (409 lock_delayed meanwhile); at most the sidecar's --max-lock-delay. */
    lock_delay?: Duration;
    /** Hold only: the most a hold stream's lock is held however often it is renewed. */
    max_hold?: Duration;
    /** read shares the lock with other readers; write (the default) holds it alone. A queued writer blocks later readers. */
    mode?: "read" | "write";
    /** A run-once call: granted only when the lock's work is to run; 409 already_done when a run already succeeded (within the sidecar's --once-retention). The holder reports the outcome with POST KEY:done. */
    once?: boolean;
    /** The caller's execution id; the sidecar makes one when absent. */
    owner?: string;
    /** How long the lock may be held (default: the sidecar's). */
    ttl?: Duration;
    /** Elections only: what the candidate announces once leader (an address, a name), at most 4 KiB of UTF-8. */
    value?: string;
    /** How long to wait in line; absent or 0 tries once. A hold stream may wait longer than the sidecar's --max-wait, or forever. */
    wait?: Duration | "forever";
    /** The units of the semaphore taken (default 1, at most limit). */
    weight?: number;
}
/** The record of a run-once lock's last finished run. */
export interface Run {
    /** The holder's Kubernetes cluster (its sidecar's --cluster-name), when clusters share one etcd. */
    cluster?: string;
    expires_at: Time;
    fence: number;
    finished_at: Time;
    key: string;
    namespace?: string;
    node?: string;
    owner: string;
    pod?: string;
    result?: string;
    started_at: Time;
    status: "succeeded" | "failed";
}
export interface Status {
    expires_at?: Time;
    fence?: number;
    held: boolean;
    /** The units of the semaphore held. */
    held_units?: number;
    holder?: Holder;
    /** Every holder, the first first, when the lock may have several (a semaphore, readers). */
    holders?: Holding[];
    key: string;
    /** A semaphore's units. */
    limit?: number;
    /** The answering sidecar's callers queued behind its own contender (the holder, or a waiter in waiting, whose queued counts them), first first: only that sidecar knows them (a status of one lock only). */
    queued_here?: Queued[];
    waiters: number;
    /** The contenders waiting for the lock, first in line first: one per sidecar that queues callers for it, its first caller, and how many more wait behind it (queued). */
    waiting?: Waiter[];
}
export type Time = string;
/** A contender waiting for a lock: the first caller its sidecar queued, and how many more of that sidecar's callers wait behind it. */
export interface Waiter {
    cluster?: string;
    /** A contender that is not Baton (etcdctl lock). */
    foreign?: boolean;
    /** A reader of a read/write lock. */
    mode?: "read";
    namespace?: string;
    node?: string;
    owner: string;
    pod?: string;
    /** Its local process, when it holds or waits through the answering sidecar (a status of one lock only). */
    process?: Process;
    /** How many more callers of its sidecar wait behind it. */
    queued?: number;
    /** When it queued. */
    since?: Time;
    /** The units of a semaphore it asks for. */
    weight?: number;
}
/** One line of a watch. */
export interface WatchEvent {
    at: Time;
    event: "state" | "synced" | "granted" | "released" | "expired" | "lost" | "queued" | "proclaimed" | "heartbeat";
    /** The fence of the holder the event is about. */
    fence?: number;
    holder?: Holder;
    key?: string;
    /** The lock's status after the change. */
    lock?: Status;
    /** Found by reading again after a gap in the watch. */
    resynced?: true;
    /** etcd's revision of the change (of the read, for state and synced). */
    revision: number;
}
/** Every error code of the API: the code of a BatonError. */
export declare const Codes: readonly ["already_running", "wait_timeout", "already_done", "fence_mismatch", "limit_mismatch", "lock_delayed", "not_held", "not_owner", "lock_lost", "unavailable", "etcd_permission_denied", "etcd_rewound", "etcd_no_space", "etcd_corrupt", "forbidden", "too_many_waiters", "invalid_key", "invalid_owner", "invalid_ttl", "invalid_wait", "invalid_max_hold", "invalid_mode", "invalid_limit", "invalid_weight", "invalid_lock_delay", "invalid_value", "invalid_json", "invalid_request", "body_too_large", "body_timeout", "not_found", "method_not_allowed", "internal"];
/** The events of a hold stream. */
export declare const HoldEvents: readonly ["queued", "granted", "heartbeat", "lost", "released", "refused", "error"];
/** Why a held lock was lost, as a lost event says. */
export declare const LostReasons: readonly ["expired", "lease_lost", "force_released", "shutdown", "max_hold", "etcd_rewound"];
