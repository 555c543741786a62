package coordinator

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/lockstore"
)

// Sentinel errors a caller branches on. The server maps them to HTTP status
// codes; every error returned by the Coordinator wraps one of them.
var (
	// ErrHeld: someone else holds the lock (a *HeldError carries who).
	ErrHeld = errors.New("lock is held")
	// ErrWaitTimeout: the wait ran out while the lock stayed held (a *HeldError).
	ErrWaitTimeout = errors.New("wait timed out")
	// ErrNotHeld: nobody holds the lock.
	ErrNotHeld = errors.New("lock is not held")
	// ErrNotOwner: the lock is held by another owner (a *NotOwnerError).
	ErrNotOwner = errors.New("not the owner")
	// ErrLost: the caller's lock ended without its release (a *LostError).
	ErrLost = errors.New("lock lost")
	// ErrUnavailable: etcd could not be reached or the sidecar has no
	// session; nothing was granted.
	ErrUnavailable = errors.New("unavailable")
	// ErrTooManyWaiters: the sidecar's queue is full.
	ErrTooManyWaiters = errors.New("too many waiters")
	// ErrInvalid: a request field is out of range.
	ErrInvalid = errors.New("invalid request")
	// ErrLimitMismatch: the caller's claim does not agree with the lock's:
	// another limit than the semaphore's, a semaphore of a lock that is
	// not one, or an owner asking again with another claim (a
	// *MismatchError).
	ErrLimitMismatch = errors.New("limit mismatch")
	// ErrDone: a run-once lock's run already finished and is not to run
	// again (a *DoneError carries its record).
	ErrDone = errors.New("already done")
	// ErrFenceMismatch: a force release named a fence that no longer holds
	// the lock (a *HeldError names the holder now).
	ErrFenceMismatch = errors.New("fence mismatch")
)

// InvalidError tells which request field is out of range.
type InvalidError struct {
	Field string // "ttl", "wait", "owner" or "key"
	Msg   string
}

func (e *InvalidError) Error() string { return e.Field + ": " + e.Msg }

// Is makes errors.Is(err, ErrInvalid) true.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

func invalid(field, format string, args ...any) error {
	return &InvalidError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// HeldError tells a refused caller who holds the lock.
type HeldError struct {
	Key    keyspace.Key
	Holder keyspace.Holder
	Fence  int64
	// Waited is true when the caller queued and the wait ran out.
	Waited bool
	// Wait is how long the caller waited.
	Wait time.Duration
	// Mismatch is the fence a refused force release named.
	Mismatch int64
	// Twin says the holder has the caller's own owner, and one of them is a
	// hold (a hold never shares its lock).
	Twin bool
	// Holders are, for a semaphore or a lock that readers share, every
	// holder, the first of them Holder (with Fence); nil for a lock held
	// whole.
	Holders []Holding
}

func (e *HeldError) Error() string {
	if len(e.Holders) == 0 && e.Mismatch == 0 && !e.Twin && !e.Waited {
		// The refusal of a try, which a burst of duplicates answers many
		// times a second: one allocation.
		b := make([]byte, 0, 80+len(e.Key.String())+len(e.Holder.Owner)+len(e.Holder.Pod))
		b = strconv.AppendQuote(append(b, "lock "...), e.Key.String())
		return string(appendHolder(append(b, " is held by "...), e.Holder))
	}
	msg := fmt.Sprintf("lock %q is held by %s", e.Key.String(), describe(e.Holder))
	if len(e.Holders) > 0 {
		msg = e.sharedMessage()
	}
	if e.Mismatch != 0 {
		return fmt.Sprintf("%s with fence %d, not fence %d; nothing was released", msg, e.Fence, e.Mismatch)
	}
	if e.Twin {
		msg += "; that holder has the same owner, and a hold (hold stream, baton run) never shares its lock, not even with its own owner's other calls: give each replica an owner of its own"
	}
	if e.Waited {
		msg += fmt.Sprintf("; gave up after waiting %v", e.Wait)
	}
	return msg
}

// sharedMessage names every holder of a shared lock: "semaphore "k" is
// full: 2 of 2 units held, by a (pod p) until T and b (pod q) until U". A
// semaphore with units left refused the caller for its weight, or for the
// callers that wait ahead of it, which the message says instead of full.
func (e *HeldError) sharedMessage() string {
	names := make([]string, len(e.Holders))
	units := 0
	for i, h := range e.Holders {
		names[i] = describe(h.Holder)
		units += h.Holder.Units()
	}
	by := strings.Join(names, ", ")
	if len(names) > 1 {
		by = strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
	}
	first := e.Holders[0].Holder
	switch {
	case first.Limit > 0 && units >= first.Limit:
		return fmt.Sprintf("semaphore %q is full: %d of %d units held, by %s", e.Key.String(), units, first.Limit, by)
	case first.Limit > 0:
		return fmt.Sprintf("semaphore %q has no room for this caller (its weight, or callers waiting ahead of it): %d of %d units held, by %s", e.Key.String(), units, first.Limit, by)
	case first.Mode == keyspace.Read && len(names) > 1:
		return fmt.Sprintf("lock %q is held by %d readers: %s", e.Key.String(), len(names), by)
	}
	return fmt.Sprintf("lock %q is held by %s", e.Key.String(), by)
}

// Is makes errors.Is(err, ErrHeld) and, after a wait, ErrWaitTimeout true;
// for a refused force release, ErrFenceMismatch.
func (e *HeldError) Is(target error) bool {
	if e.Mismatch != 0 {
		return target == ErrFenceMismatch
	}
	return target == ErrHeld || (e.Waited && target == ErrWaitTimeout)
}

// MismatchError tells a caller that its claim does not agree with the
// claim in force on the lock.
type MismatchError struct {
	Key keyspace.Key
	// Asked is the caller's claim; InForce the lock's, as its first Baton
	// contender (Holder) has it.
	Asked, InForce keyspace.Claim
	Holder         keyspace.Holder
	Fence          int64
	// Own says the caller itself holds the lock with another claim.
	Own bool
}

func (e *MismatchError) Error() string {
	asked := "a lock (mutex or read/write)"
	if e.Asked.Limit > 0 {
		asked = fmt.Sprintf("a semaphore of %d units", e.Asked.Limit)
	}
	if e.Own {
		return fmt.Sprintf("lock %q is held by %s as %s (mode %q); release it before asking for it as %s (mode %q)",
			e.Key.String(), e.Holder.Owner, e.InForce.Kind(), modeName(e.InForce), asked, modeName(e.Asked))
	}
	fix := "leave limit out"
	if e.InForce.Limit > 0 {
		fix = fmt.Sprintf("ask with limit %d", e.InForce.Limit)
	}
	return fmt.Sprintf("lock %q is %s (as %s, fence %d, has it), not %s; every caller of a lock must agree on its limit: %s",
		e.Key.String(), e.InForce.Kind(), describe(e.Holder), e.Fence, asked, fix)
}

// Is makes errors.Is(err, ErrLimitMismatch) true.
func (e *MismatchError) Is(target error) bool { return target == ErrLimitMismatch }

func modeName(c keyspace.Claim) string {
	if c.Mode == keyspace.Read {
		return "read"
	}
	return "write"
}

// NotOwnerError tells a caller that another owner holds the lock.
type NotOwnerError struct {
	Key    keyspace.Key
	Owner  string
	Holder keyspace.Holder
}

func (e *NotOwnerError) Error() string {
	return fmt.Sprintf("lock %q is not held by %s: it is held by %s", e.Key.String(), e.Owner, describe(e.Holder))
}

// Is makes errors.Is(err, ErrNotOwner) true.
func (e *NotOwnerError) Is(target error) bool { return target == ErrNotOwner }

// LostReason says how a lock ended without its owner's release.
type LostReason string

// Reasons a lock is lost.
const (
	// Expired: the lock's own deadline (ttl) passed.
	Expired LostReason = "expired"
	// LeaseLost: the sidecar's etcd session ended (etcd unreachable past the
	// lease TTL).
	LeaseLost LostReason = "lease_lost"
	// ForceReleased: someone else deleted the holder key in etcd.
	ForceReleased LostReason = "force_released"
	// Shutdown: the sidecar is stopping and revokes its lease.
	Shutdown LostReason = "shutdown"
	// MaxHoldReached: a hold stream's lock reached the max hold its
	// caller asked for.
	MaxHoldReached LostReason = "max_hold"
	// EtcdRewound: etcd went back in time (restored from an older
	// snapshot, or its data lost) and the holder's key is gone with it.
	EtcdRewound LostReason = "etcd_rewound"
)

// LostReasons lists every LostReason.
func LostReasons() []LostReason {
	return []LostReason{Expired, LeaseLost, ForceReleased, Shutdown, MaxHoldReached, EtcdRewound}
}

// LostError tells an owner that its lock already ended.
type LostError struct {
	Key    keyspace.Key
	Owner  string
	Fence  int64
	Reason LostReason
	At     time.Time
	// HeldFor is how long the lock had been held when it ended, where the
	// reason needs it (MaxHoldReached).
	HeldFor time.Duration
}

func (e *LostError) Error() string {
	var why string
	switch e.Reason {
	case Expired:
		why = "its ttl ran out; extend the lock before its deadline or ask for a longer ttl"
	case LeaseLost:
		why = "the sidecar lost its etcd session; another caller may hold it now"
	case ForceReleased:
		why = "its key was deleted in etcd by someone else (force release)"
	case Shutdown:
		why = "the sidecar is shutting down and released every lock"
	case MaxHoldReached:
		why = fmt.Sprintf("it was held for the max_hold its holder asked for (%v)", e.HeldFor.Round(time.Millisecond))
	case EtcdRewound:
		why = "etcd went back in time (restored from an older snapshot, or its data lost) and the lock's key is gone with it; no lock is granted until etcd's revision passes the highest fence granted"
	default:
		why = string(e.Reason)
	}
	return fmt.Sprintf("lock %q (fence %d) held by %s ended at %s: %s", e.Key.String(), e.Fence, e.Owner, e.At.UTC().Format(time.RFC3339), why)
}

// Is makes errors.Is(err, ErrLost) true.
func (e *LostError) Is(target error) bool { return target == ErrLost }

func describe(h keyspace.Holder) string { return string(appendHolder(nil, h)) }

// appendHolder appends describe(h) to b.
func appendHolder(b []byte, h keyspace.Holder) []byte {
	switch {
	case h.Foreign:
		return append(b, "a client that is not Baton (for example etcdctl lock)"...)
	case h.Owner == "":
		return append(b, "another caller of this sidecar"...)
	}
	b = append(b, h.Owner...)
	if h.Pod != "" {
		b = append(append(append(b, " (pod "...), h.Pod...), ')')
	}
	if !h.ExpiresAt.IsZero() {
		b = h.ExpiresAt.UTC().AppendFormat(append(b, " until "...), time.RFC3339)
	}
	return b
}

func unavailable(op string, err error) error {
	switch {
	case errors.Is(err, ErrPermissionDenied), errors.Is(err, ErrCorrupt):
		return fmt.Errorf("%s: %w: %w", op, ErrUnavailable, err)
	case errors.Is(err, ErrNoSpace):
		return fmt.Errorf("%s: %w: %w; %s", op, ErrUnavailable, err, noSpaceHint)
	case errors.Is(err, lockstore.ErrLeaseGone):
		return fmt.Errorf("%s: %w: %w; the sidecar's etcd session ended with it, and the next one is opening: retry", op, ErrUnavailable, err)
	}
	return fmt.Errorf("%s: %w: etcd did not answer: %w", op, ErrUnavailable, err)
}
