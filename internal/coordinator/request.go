package coordinator

import (
	"errors"
	"math"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/baton-dev/baton/internal/keyspace"
)

// MaxOwnerLen bounds an owner (execution id).
const MaxOwnerLen = 256

// AcquireRequest asks for a lock.
type AcquireRequest struct {
	Key keyspace.Key
	// Owner is the caller's execution id; NewOwner() makes one when empty.
	Owner string
	// TTL is how long the lock may be held before the sidecar releases it;
	// 0 means Config.DefaultTTL; at most Config.MaxHold.
	TTL time.Duration
	// Wait is how long to queue for the lock; 0 tries once, WaitForever
	// (a hold's only) waits as long as it takes.
	Wait time.Duration
	// Position, if set, is told the number of contenders ahead of the
	// caller each time that number is learned while it waits.
	Position *Position
	// Hold marks a lock bound to its caller's connection (a hold stream): a
	// restarted sidecar does not keep it, since the connection died too.
	// Such a lock is meant to last as long as its caller: TTL is then the
	// renewal window, which the caller (the server's stream) keeps moving
	// with a Hold (Coordinator.Keep) while the connection lives.
	Hold bool
	// MaxHold, with Hold, caps how long the lock may be held however often
	// it is renewed or extended: at AcquiredAt+MaxHold it ends, lost with
	// reason MaxHoldReached. 0 sets no cap. At most Config.MaxHold.
	MaxHold time.Duration
	// LockDelay, for a lock held whole, holds the lock back from everyone
	// for that long after this caller loses it other than by its release
	// (its lease expired, its ttl ran out, it was forced free): a margin
	// for a paused holder still writing. 0: Config.LockDelay.
	LockDelay time.Duration
	// Once, when set, makes the acquire a run-once call: it is granted only
	// if the lock's work is to run (see Once).
	Once *Once
	// Claim is what the caller asks of the lock: exclusive (the zero
	// Claim, the mutex or a writer), a reader (Mode keyspace.Read), or
	// Weight of the Limit units of a semaphore. A limit of 1 taken whole is
	// the mutex.
	Claim keyspace.Claim
	// Caller is the process id of the local process asking, as the
	// socket's peer credentials give it: 0 when not known (not asked over
	// a unix socket), NotVisible when the process is not in the sidecar's
	// process namespace. Status reports it for the lock's local holder
	// and waiters.
	Caller int32
	// Value is, for a candidate of an election (Config.Space
	// keyspace.Elections), what it announces once leader: at most
	// keyspace.MaxValue bytes. A lock has none.
	Value string
}

// NotVisible is AcquireRequest.Caller for a process the sidecar cannot
// see: the kernel gives its pid as 0 when the asking process's pid
// namespace is not the sidecar's (a pod without shareProcessNamespace).
const NotVisible int32 = -1

// checkAcquire validates req against the sidecar's limits and fills in its
// defaults: an owner, the ttl, the lock delay.
func (cfg *Config) checkAcquire(req *AcquireRequest) error {
	if req.Key.IsZero() {
		return invalid("key", "no key")
	}
	if req.Owner == "" {
		req.Owner = NewOwner()
	} else if err := CheckOwner(req.Owner); err != nil {
		return err
	}
	ttl, err := cfg.checkTTL(req.TTL)
	if err != nil {
		return err
	}
	req.TTL = ttl
	switch {
	case req.MaxHold < 0:
		return invalid("max_hold", "%v is negative; leave it out to hold for as long as the stream stays open", req.MaxHold)
	case req.MaxHold > 0 && !req.Hold:
		return invalid("max_hold", "applies to hold streams (POST /v1/locks/KEY:hold), which renew their lock; a plain acquire ends at its ttl")
	case req.MaxHold > 0 && req.MaxHold < time.Second:
		return invalid("max_hold", "%v is shorter than 1s", req.MaxHold)
	case req.MaxHold > cfg.MaxHold:
		return invalid("max_hold", "%v is longer than the sidecar's maximum hold %v", req.MaxHold, cfg.MaxHold)
	case req.MaxHold > 0 && req.TTL > req.MaxHold:
		req.TTL = req.MaxHold // the cap comes first
	}
	if err := checkClaim(&req.Claim); err != nil {
		return err
	}
	if err := cfg.checkSpace(req); err != nil {
		return err
	}
	switch {
	case req.LockDelay < 0:
		return invalid("lock_delay", "%v is negative", req.LockDelay)
	case req.LockDelay > cfg.MaxLockDelay:
		return invalid("lock_delay", "%v is longer than the sidecar's maximum lock delay %v", req.LockDelay, cfg.MaxLockDelay)
	case req.LockDelay > 0 && !req.Claim.IsExclusive():
		return invalid("lock_delay", "applies to locks held whole, not to readers or semaphores")
	case req.LockDelay == 0 && req.Claim.IsExclusive():
		req.LockDelay = cfg.LockDelay
	}
	switch {
	case req.Wait < 0:
		return invalid("wait", "%v is negative; use 0 to try once", req.Wait)
	case req.Hold:
		// A hold stream's heartbeats keep its connection alive while it
		// waits: it may wait as long as it asks, forever included.
	case req.Wait == WaitForever:
		return invalid("wait", "forever is for hold streams (POST /v1/locks/KEY:hold, baton run), whose heartbeats keep the connection alive; a plain acquire waits at most the sidecar's maximum wait %v", cfg.MaxWait)
	case req.Wait > cfg.MaxWait:
		return invalid("wait", "%v is longer than the sidecar's maximum wait %v; a hold stream (POST /v1/locks/KEY:hold, baton run) may wait longer, or forever", req.Wait, cfg.MaxWait)
	}
	return nil
}

// checkSpace refuses what the coordinator's space does not have: a value
// for a lock; run-once, readers or a semaphore for an election.
func (cfg *Config) checkSpace(req *AcquireRequest) error {
	if cfg.Space != keyspace.Elections {
		if req.Value != "" {
			return invalid("value", "is what a candidate of an election announces (POST /v1/elections/NAME:campaign); a lock has none")
		}
		return nil
	}
	switch {
	case len(req.Value) > keyspace.MaxValue:
		return invalid("value", "is %d bytes long, at most %d are allowed", len(req.Value), keyspace.MaxValue)
	case !utf8.ValidString(req.Value):
		return invalid("value", "is not valid UTF-8")
	case req.Once != nil:
		return invalid("once", "applies to locks: an election has a leader, not runs")
	case !req.Claim.IsExclusive():
		return invalid("mode", "an election has one leader at a time: it takes no mode, limit or weight")
	}
	return nil
}

// WaitForever is the wait of a hold that queues for as long as it takes.
const WaitForever = time.Duration(math.MaxInt64)

// checkClaim validates a claim and puts it in its one form
// (keyspace.Claim.Normal).
func checkClaim(cl *keyspace.Claim) error {
	n, err := cl.Normal()
	if ce, ok := errors.AsType[*keyspace.ClaimError](err); ok {
		return invalid(ce.Field, "%s", ce.Msg)
	}
	if err != nil {
		return err
	}
	*cl = n
	return nil
}

// checkTTL validates a lock's ttl; 0 is the default ttl.
func (cfg *Config) checkTTL(ttl time.Duration) (time.Duration, error) {
	switch {
	case ttl == 0:
		return cfg.DefaultTTL, nil
	case ttl < 0:
		return 0, invalid("ttl", "%v is negative", ttl)
	case ttl < time.Second:
		return 0, invalid("ttl", "%v is shorter than 1s", ttl)
	case ttl > cfg.MaxHold:
		return 0, invalid("ttl", "%v is longer than the sidecar's maximum hold %v", ttl, cfg.MaxHold)
	}
	return ttl, nil
}

// CheckOwner validates an owner: 1 to MaxOwnerLen bytes of printable UTF-8.
func CheckOwner(owner string) error {
	switch {
	case owner == "":
		return invalid("owner", "is empty")
	case len(owner) > MaxOwnerLen:
		return invalid("owner", "is %d bytes long, at most %d are allowed", len(owner), MaxOwnerLen)
	case !utf8.ValidString(owner):
		return invalid("owner", "is not valid UTF-8")
	}
	for _, r := range owner {
		if !unicode.IsPrint(r) || r == ' ' {
			return invalid("owner", "%q has %q; use printable characters without spaces", owner, r)
		}
	}
	return nil
}
