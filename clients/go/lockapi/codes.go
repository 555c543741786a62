// Package lockapi is the contract of the sidecar's socket API: the bodies
// of requests and answers, the events of a hold stream, and the error codes,
// as the server writes them and the Go client and baton run read them. It
// imports nothing but the standard library, so that any Go program can use
// it; it comes with the Go client (go get github.com/baton-dev/baton/clients/go).
package lockapi

// Error codes of the socket API: the "code" field of every error body.
// docs/api.md's error table lists each of them (a test in the server compares
// the two).
const (
	CodeAlreadyRunning = "already_running"
	CodeWaitTimeout    = "wait_timeout"
	// CodeLockDelayed: the lock is free but held back until retry_at by
	// the lock delay of a holder that was lost (holder, fence).
	CodeLockDelayed = "lock_delayed"
	// CodeAlreadyDone: a run-once call found the work done (or failed,
	// with if_failed skip); run says by whom, when, and its result.
	CodeAlreadyDone   = "already_done"
	CodeFenceMismatch = "fence_mismatch"
	// CodeLimitMismatch: the caller's limit (or mode) does not agree with
	// the lock's: every caller of a semaphore gives the same limit, and a
	// semaphore is not a lock nor a read/write lock.
	CodeLimitMismatch = "limit_mismatch"
	CodeNotHeld       = "not_held"
	CodeNotOwner      = "not_owner"
	CodeLockLost      = "lock_lost"
	CodeUnavailable   = "unavailable"
	// CodeEtcdPermissionDenied: etcd's authentication is on and the
	// sidecar's etcd user may not read or write its scope's keys.
	CodeEtcdPermissionDenied = "etcd_permission_denied"
	// CodeEtcdRewound: etcd went back in time (restored from an older
	// snapshot, its data lost): its revision is below the highest fence
	// granted, so no lock is granted until it passes it; the message says
	// what happened and how to bump etcd's revision.
	CodeEtcdRewound = "etcd_rewound"
	// CodeEtcdNoSpace: etcd's NOSPACE alarm is raised (its database
	// reached its quota): no lock is granted until room is made and the
	// alarm disarmed, while the locks held go on (extend and release
	// work).
	CodeEtcdNoSpace = "etcd_no_space"
	// CodeEtcdCorrupt: etcd's CORRUPT alarm is raised (a member's data
	// differs from the others'): etcd serves nothing until an operator
	// restores it.
	CodeEtcdCorrupt = "etcd_corrupt"
	// CodeForbidden: the namespace's lock policy does not let this pod's
	// ServiceAccount take the key, or force release; the message names
	// the policies and rules in force.
	CodeForbidden        = "forbidden"
	CodeTooManyWaiters   = "too_many_waiters"
	CodeInvalidKey       = "invalid_key"
	CodeInvalidOwner     = "invalid_owner"
	CodeInvalidTTL       = "invalid_ttl"
	CodeInvalidWait      = "invalid_wait"
	CodeInvalidMaxHold   = "invalid_max_hold"
	CodeInvalidMode      = "invalid_mode"
	CodeInvalidLimit     = "invalid_limit"
	CodeInvalidWeight    = "invalid_weight"
	CodeInvalidLockDelay = "invalid_lock_delay"
	CodeInvalidValue     = "invalid_value"
	CodeInvalidJSON      = "invalid_json"
	CodeInvalidRequest   = "invalid_request"
	CodeBodyTooLarge     = "body_too_large"
	CodeBodyTimeout      = "body_timeout"
	CodeNotFound         = "not_found"
	CodeMethodNotAllowed = "method_not_allowed"
	CodeInternal         = "internal"
)

// Events of a hold stream, one JSON object a line.
const (
	EventQueued    = "queued"    // position: contenders ahead
	EventGranted   = "granted"   // fence, acquired_at, expires_at
	EventHeartbeat = "heartbeat" // the stream is alive; expires_at once granted
	EventLost      = "lost"      // reason: expired, lease_lost, force_released, shutdown, max_hold, etcd_rewound
	EventReleased  = "released"  // the owner released the lock by DELETE
	EventRefused   = "refused"   // code wait_timeout (or already_running), holder
	EventError     = "error"     // code, message: nothing was granted
)

// Events of a watch, one JSON object a line.
const (
	WatchState    = "state"    // a lock's status when the watch starts (lock)
	WatchSynced   = "synced"   // the states above are etcd's at revision; changes follow
	WatchGranted  = "granted"  // a contender became a holder (fence, holder)
	WatchReleased = "released" // a holder's key was deleted by its owner or by force
	WatchExpired  = "expired"  // a holder's key was deleted at its deadline
	WatchLost     = "lost"     // a holder's key went with its sidecar's lease
	WatchQueued   = "queued"   // the number of waiters changed (lock.waiters)
	// WatchProclaimed: an election's leader announced a new value
	// (holder.value), its fence the same.
	WatchProclaimed = "proclaimed"
	WatchHeartbeat  = "heartbeat" // the stream is alive
)
