package lockapi

import (
	"fmt"
	"time"
)

// Times in answers are RFC 3339 in UTC, with as many fractional digits as
// needed; an absent time is left out.

// Request is the body of an acquire (POST /v1/locks/KEY), a hold
// (KEY:hold) and an extend (KEY:extend). Durations are Go duration
// strings ("30s", "5m"); the server also takes a number of seconds.
// Absent fields take the sidecar's defaults.
type Request struct {
	Owner string `json:"owner,omitempty"`
	TTL   string `json:"ttl,omitempty"`
	// Wait is how long to queue for the lock: a duration, or WaitForever
	// (hold only) to wait as long as it takes.
	Wait string `json:"wait,omitempty"`
	// MaxHold caps a hold stream's lock however long it is renewed (hold
	// only).
	MaxHold string `json:"max_hold,omitempty"`
	// Mode is "read" for a reader of a read/write lock, "write" (the
	// default) for a writer or a mutex.
	Mode string `json:"mode,omitempty"`
	// Limit makes the lock a semaphore of Limit units, of which the caller
	// takes Weight (default 1).
	Limit  int `json:"limit,omitempty"`
	Weight int `json:"weight,omitempty"`
	// LockDelay holds the lock back from everyone for this long after the
	// caller loses it other than by its release (a Go duration or
	// seconds); at most the sidecar's --max-lock-delay.
	LockDelay string `json:"lock_delay,omitempty"`
	// Once makes the call a run-once call: granted only when the lock's
	// work is to run, answered already_done when it already succeeded.
	// IfDone ("skip", the default, or "rerun") and IfFailed ("retry", the
	// default, or "skip") say what to do after a success or a failure.
	Once     bool   `json:"once,omitempty"`
	IfDone   string `json:"if_done,omitempty"`
	IfFailed string `json:"if_failed,omitempty"`
	// Value is what a candidate of an election announces once leader
	// (POST /v1/elections/NAME:campaign and :proclaim), at most 4 KiB.
	Value string `json:"value,omitempty"`
}

// Done is the body of POST /v1/locks/KEY:done: the outcome of a run-once
// holder's run, recorded as it lets the lock go.
type Done struct {
	Owner string `json:"owner"`
	// OK says the run succeeded; a failed run may be run again.
	OK     bool   `json:"ok"`
	Result string `json:"result,omitempty"`
}

// Run is the record of a run-once lock's last finished run.
type Run struct {
	Key        string    `json:"key"`
	Status     string    `json:"status"` // succeeded or failed
	Owner      string    `json:"owner"`
	Pod        string    `json:"pod,omitempty"`
	Namespace  string    `json:"namespace,omitempty"`
	Node       string    `json:"node,omitempty"`
	Cluster    string    `json:"cluster,omitempty"`
	Fence      int64     `json:"fence"`
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
	Result     string    `json:"result,omitempty"`
	// ExpiresAt is when the record goes (the sidecar's --once-retention).
	ExpiresAt time.Time `json:"expires_at"`
}

// Holder is who holds a lock, as its holder record says.
type Holder struct {
	Owner      string    `json:"owner"`
	Pod        string    `json:"pod,omitempty"`
	Namespace  string    `json:"namespace,omitempty"`
	Node       string    `json:"node,omitempty"`
	Cluster    string    `json:"cluster,omitempty"`
	AcquiredAt time.Time `json:"acquired_at,omitzero"`
	ExpiresAt  time.Time `json:"expires_at,omitzero"`
	// Foreign marks a holder that is not Baton (etcdctl lock, etcdctl
	// elect).
	Foreign bool `json:"foreign,omitempty"`
	// Value is what an election's leader announces: its campaign's or its
	// last proclaim's value; a foreign leader's whole value in etcd.
	Value string `json:"value,omitempty"`
	// Mode is "read" for a reader; Weight the units a semaphore's holder
	// takes.
	Mode   string `json:"mode,omitempty"`
	Weight int    `json:"weight,omitempty"`
	// Process, in a status, is the local process holding the lock when it
	// holds through the answering sidecar.
	Process *Process `json:"process,omitempty"`
}

// Process is a local process of the answering sidecar's pod that holds or
// waits for a lock, read from its unix socket's peer credentials when it
// asked, and from /proc when the status is read.
type Process struct {
	// PID is its process id, in the sidecar's process namespace (0 when
	// not seen).
	PID int `json:"pid,omitempty"`
	// Command is its command line, its arguments joined by spaces.
	Command string `json:"command,omitempty"`
	// Exited says it is gone (the lock outlives it until its ttl, a
	// release, or the sidecar's end).
	Exited bool `json:"exited,omitempty"`
	// Unseen says why the sidecar cannot see it: it is not in the
	// sidecar's process namespace.
	Unseen string `json:"unseen,omitempty"`
}

// Queued is a caller of the answering sidecar queued for a lock behind
// that sidecar's own contender.
type Queued struct {
	Owner string `json:"owner"`
	// Since is when it queued.
	Since   time.Time `json:"since,omitzero"`
	Process *Process  `json:"process,omitempty"`
}

// Holding is one of a lock's holders, in a status of a lock that has
// several (a semaphore, a read/write lock held by readers).
type Holding struct {
	Holder
	Fence int64 `json:"fence"`
}

// Grant answers a granted acquire or an extend.
type Grant struct {
	Granted    bool      `json:"granted"`
	Key        string    `json:"key"`
	Owner      string    `json:"owner"`
	Fence      int64     `json:"fence"`
	AcquiredAt time.Time `json:"acquired_at"`
	ExpiresAt  time.Time `json:"expires_at"`
	// Mode, Limit and Weight repeat the claim granted, when not a mutex's.
	Mode   string `json:"mode,omitempty"`
	Limit  int    `json:"limit,omitempty"`
	Weight int    `json:"weight,omitempty"`
	// Value is what an election's leader announces (a proclaim's answer).
	Value string `json:"value,omitempty"`
}

// Released answers a release (DELETE /v1/locks/KEY?owner=O).
type Released struct {
	Released bool   `json:"released"`
	Key      string `json:"key"`
	Owner    string `json:"owner"`
	Fence    int64  `json:"fence"`
	// HeldFor is how long the lock was held, as a Go duration string;
	// HeldSeconds the same in seconds.
	HeldFor     string  `json:"held_for"`
	HeldSeconds float64 `json:"held_for_seconds"`
}

// Forced answers a force release (DELETE /v1/locks/KEY?force=true).
type Forced struct {
	Released bool    `json:"released"`
	Forced   bool    `json:"forced"`
	Key      string  `json:"key"`
	Fence    int64   `json:"fence"`
	Holder   *Holder `json:"holder"`
}

// Status is one lock as GET /v1/locks/KEY and the list show it.
type Status struct {
	Key       string    `json:"key"`
	Held      bool      `json:"held"`
	Holder    *Holder   `json:"holder,omitempty"`
	Fence     int64     `json:"fence,omitempty"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	// Waiters counts the callers waiting, on every sidecar.
	Waiters int `json:"waiters"`
	// Limit and HeldUnits are a semaphore's units and how many are held.
	Limit     int `json:"limit,omitempty"`
	HeldUnits int `json:"held_units,omitempty"`
	// Holders lists every holder, the first first, when a lock may have
	// several (a semaphore, readers); Holder and Fence are the first's.
	Holders []Holding `json:"holders,omitempty"`
	// Waiting lists the sidecars' contenders waiting for the lock, first in
	// line first: each stands for a caller of its sidecar, and Queued more.
	Waiting []Waiter `json:"waiting,omitempty"`
	// QueuedHere lists the answering sidecar's callers queued behind its
	// own contender (the holder or a waiter above, whose queued counts
	// them), first first: only that sidecar knows them.
	QueuedHere []Queued `json:"queued_here,omitempty"`
}

// Waiter is a contender waiting for a lock: the first caller its sidecar
// queued for it, and how many more of that sidecar's callers wait behind.
type Waiter struct {
	Owner     string `json:"owner"`
	Pod       string `json:"pod,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Node      string `json:"node,omitempty"`
	Cluster   string `json:"cluster,omitempty"`
	// Since is when it queued.
	Since time.Time `json:"since,omitzero"`
	// Queued is how many more callers of its sidecar wait behind it.
	Queued int `json:"queued,omitempty"`
	// Foreign marks a contender that is not Baton's (etcdctl lock).
	Foreign bool   `json:"foreign,omitempty"`
	Mode    string `json:"mode,omitempty"`
	Weight  int    `json:"weight,omitempty"`
	// Process is its local process, when it is the answering sidecar's.
	Process *Process `json:"process,omitempty"`
}

// List answers GET /v1/locks?prefix=P.
type List struct {
	Locks []Status `json:"locks"`
	// Truncated says the sidecar's list limit cut the answer short.
	Truncated bool `json:"truncated,omitempty"`
}

// Event is one line of a hold stream; Event is one of the Event constants
// and says which other fields it fills.
type Event struct {
	Event      string    `json:"event"`
	Key        string    `json:"key"`
	Owner      string    `json:"owner,omitempty"`
	Position   int       `json:"position,omitempty"`
	Fence      int64     `json:"fence,omitempty"`
	AcquiredAt time.Time `json:"acquired_at,omitzero"`
	ExpiresAt  time.Time `json:"expires_at,omitzero"`
	MaxHoldAt  time.Time `json:"max_hold_at,omitzero"`
	// ValidFor, on granted and heartbeat events, is how many seconds after
	// At the lock cannot be granted to anyone else even if the sidecar
	// stopped right after sending the line (froze, or lost etcd): its etcd
	// lease's last renewal plus the lease TTL, less a margin, plus the
	// lock's lock delay. A holder that hears nothing more must have
	// stopped its work by then: silence past it is a loss.
	ValidFor float64 `json:"valid_for_seconds,omitempty"`
	// LeaseTTL, on the granted event, is the TTL of the sidecar's etcd
	// lease, which it renews every third of it: how long the lock outlives
	// the sidecar if it stops without releasing it.
	LeaseTTL float64 `json:"lease_ttl_seconds,omitempty"`
	// Value, on a campaign's granted event, is what the new leader
	// announces.
	Value   string  `json:"value,omitempty"`
	Reason  string  `json:"reason,omitempty"`
	Code    string  `json:"code,omitempty"`
	Message string  `json:"message,omitempty"`
	Holder  *Holder `json:"holder,omitempty"`
	// Run is, on a run-once stream refused already_done, the last run.
	Run *Run `json:"run,omitempty"`
	// RetryAt is, on a stream refused lock_delayed, when the lock is free
	// to take.
	RetryAt time.Time `json:"retry_at,omitzero"`
	At      time.Time `json:"at"`
}

// WaitForever is the wait of a hold stream that queues for as long as it
// takes (a standby replica): its heartbeats keep the connection alive.
const WaitForever = "forever"

// WatchEvent is one line of a watch (GET /v1/locks/KEY:watch or
// /v1/locks:watch?prefix=P); Event is one of the Watch constants.
type WatchEvent struct {
	Event string `json:"event"`
	Key   string `json:"key,omitempty"`
	// Revision is etcd's revision of the change (of the read, for state
	// and synced); it never goes back along a watch.
	Revision int64 `json:"revision"`
	// Fence and Holder are the holder a granted, released, expired or
	// lost event is about.
	Fence  int64   `json:"fence,omitempty"`
	Holder *Holder `json:"holder,omitempty"`
	// Lock is the lock's status after the change (state: now).
	Lock *Status `json:"lock,omitempty"`
	// Resynced marks a change found by reading again after a gap in the
	// watch: changes within the gap may be merged, none is missed.
	Resynced bool      `json:"resynced,omitempty"`
	At       time.Time `json:"at"`
}

// Error is the body of every error answer: a code (one of the Code
// constants) and a message a person can act on; the other fields say more
// for the codes that have more to say.
type Error struct {
	// Status is the answer's HTTP status; it is not in the body. It is 0
	// in an Error made of a hold stream's refused or error event, which
	// comes after the stream's 200.
	Status int `json:"-"`
	// Granted is false on a refused acquire (already_running,
	// wait_timeout), absent otherwise.
	Granted *bool   `json:"granted,omitempty"`
	Code    string  `json:"code"`
	Message string  `json:"message"`
	Key     string  `json:"key,omitempty"`
	Holder  *Holder `json:"holder,omitempty"`
	Fence   int64   `json:"fence,omitempty"`
	// Holders lists every holder of a semaphore or of a lock readers
	// share that refused the caller (already_running, wait_timeout), the
	// first of them Holder; absent for a lock held whole.
	Holders []Holding `json:"holders,omitempty"`
	// Reason and EndedAt say why and when a lock was lost (lock_lost).
	Reason  string    `json:"reason,omitempty"`
	EndedAt time.Time `json:"ended_at,omitzero"`
	// Limit is the limit in force on the lock (limit_mismatch); absent
	// when the lock is not a semaphore.
	Limit int `json:"limit,omitempty"`
	// Run is the last finished run of a run-once lock (already_done).
	Run *Run `json:"run,omitempty"`
	// RetryAt is when a lock held back by a lock delay is free to take
	// (lock_delayed).
	RetryAt time.Time `json:"retry_at,omitzero"`
}

func (e *Error) Error() string {
	if e.Status == 0 { // a stream's refused or error event
		return fmt.Sprintf("%s (%s)", e.Message, e.Code)
	}
	return fmt.Sprintf("%s (%d %s)", e.Message, e.Status, e.Code)
}
