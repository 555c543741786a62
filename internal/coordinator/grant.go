package coordinator

import (
	"time"

	"github.com/baton-dev/baton/internal/keyspace"
)

// Grant is a lock held by a local owner.
type Grant struct {
	Key        keyspace.Key
	Owner      string
	Fence      int64
	AcquiredAt time.Time
	ExpiresAt  time.Time
	// Repeated says the owner held the lock before this call, which changed
	// nothing (acquire is idempotent).
	Repeated bool
	// TTL is the lock's window: the deadline a grant, an extend or a
	// renewal sets is that long after it.
	TTL time.Duration
	// MaxHoldAt is when the lock ends whatever its renewals (the request's
	// MaxHold); zero when uncapped.
	MaxHoldAt time.Time
	// Claim is what the grant holds: the lock whole, as a reader, or units
	// of a semaphore.
	Claim keyspace.Claim
	// LockDelay is the lock delay the lock was granted with: how long it is
	// held back from everyone once lost other than by its release. It is
	// set on the grant that Acquire returns.
	LockDelay time.Duration
	// Value is what the grant announces, for an election's leader.
	Value string

	h *held
}

// Renewed returns a channel closed at the next renewal of the lease that
// carries the lock (which moves ValidFor on); nil when none comes.
func (g Grant) Renewed() <-chan struct{} {
	if g.h == nil {
		return nil
	}
	return g.h.sess.Renewed()
}

// LeaseTTL is the TTL of the etcd lease that carries the lock: how long the
// lock outlives this sidecar if it stops (crashes, freezes) without
// releasing it.
func (g Grant) LeaseTTL() time.Duration {
	if g.h == nil {
		return 0
	}
	return g.h.sess.TTL()
}

// ValidFor is how long after now the lock cannot be granted to anyone else,
// even if this sidecar stopped at once (froze, or lost etcd): until its
// session would give up its leases for want of a renewal, which is before
// etcd can expire them, plus the lock delay. A holder that hears nothing
// more from the sidecar must have stopped its work by then. 0 once the
// lock ended.
func (g Grant) ValidFor(now time.Time) time.Duration {
	if g.h == nil {
		return 0
	}
	g.h.entry.co.mu.Lock()
	ended := g.h.ended
	g.h.entry.co.unlock()
	until := g.h.sess.ValidUntil()
	if ended || until.IsZero() {
		return 0
	}
	return max(until.Sub(now)+g.LockDelay, 0)
}

// Done returns a channel that is closed when the lock ends, however it ends.
func (g Grant) Done() <-chan struct{} {
	if g.h == nil {
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	return g.h.doneChan()
}

// Err returns nil while the lock is held and after its owner released it,
// and a *LostError once it ended any other way.
func (g Grant) Err() error {
	if g.h == nil {
		return nil
	}
	g.h.entry.co.mu.Lock()
	defer g.h.entry.co.unlock()
	if lost := g.h.lostErr(); g.h.ended && lost != nil {
		return lost
	}
	return nil
}

func grantOf(e *entry, h *held) Grant {
	return Grant{Key: e.key, Owner: h.owner, Fence: h.fence, AcquiredAt: h.acquiredAt, ExpiresAt: h.expiresAt, TTL: h.ttl, MaxHoldAt: h.maxHoldAt(), Claim: h.claim(), Value: h.value(), h: h}
}
