package coordinator

import (
	"sync/atomic"
	"time"

	"github.com/baton-dev/baton/internal/lockstore"
)

// HeldLock is a lock held by a local owner, as a restarted sidecar needs to
// know it.
type HeldLock struct {
	Key        string
	Owner      string
	Fence      int64
	Hold       bool // held by a hold stream, which the restart cannot keep
	AcquiredAt time.Time
	ExpiresAt  time.Time
}

// HeldChange is one change of the held locks: a lock granted, adopted or
// extended, or (Ended) a lock that ended.
type HeldChange struct {
	Lock  HeldLock
	Ended bool
}

// maxJournal bounds the changes kept for HeldChanges; past it they are
// dropped and the reader must take the whole set again (HeldLocks).
const maxJournal = 1 << 16

// journal keeps the changes of the held locks since they were last read,
// so that the state file grows by what changed rather than being rewritten
// whole: with 100k locks held, a full copy is tens of megabytes.
type journal struct {
	changes  []HeldChange
	overflow bool         // changes were dropped since the last full read
	held     atomic.Int64 // locks held now; written under Coordinator.mu, read without it
}

func heldLockOf(e *entry, h *held) HeldLock {
	return HeldLock{Key: e.key.String(), Owner: h.owner, Fence: h.fence, Hold: h.hold, AcquiredAt: h.acquiredAt, ExpiresAt: h.expiresAt}
}

// drop drops the changes kept and those to come until the next full read.
func (j *journal) drop() { j.changes, j.overflow = nil, true }

// note records a change of h, unless changes are being dropped.
func (j *journal) note(e *entry, h *held, ended bool) {
	switch {
	case j.overflow:
	case len(j.changes) >= maxJournal:
		j.changes, j.overflow = nil, true
	default:
		j.changes = append(j.changes, HeldChange{Lock: heldLockOf(e, h), Ended: ended})
	}
}

// HeldChanges returns the changes of the held locks, in order, since the
// last call of HeldChanges or HeldLocks, and how many locks are held now.
// ok is false when too many changes were made to keep: call HeldLocks.
func (c *Coordinator) HeldChanges() (changes []HeldChange, held int, ok bool) {
	c.mu.Lock()
	defer c.unlock()
	j := &c.journal
	changes, ok = j.changes, !j.overflow
	j.changes = nil
	return changes, int(j.held.Load()), ok
}

// HeldLocks returns the locks held now, and the leases of the session that
// carries them (none when no lock is held). It resets HeldChanges.
func (c *Coordinator) HeldLocks() ([]HeldLock, []lockstore.LeaseID) {
	c.mu.Lock()
	defer c.unlock()
	c.journal.changes, c.journal.overflow = nil, false
	var (
		out  []HeldLock
		sess lockstore.Session
	)
	for _, e := range c.locks {
		if h := e.held; h != nil {
			out = append(out, heldLockOf(e, h))
			sess = h.sess
		}
	}
	if sess == nil {
		return out, nil
	}
	return out, sess.IDs()
}

// Changes is signalled (level-triggered) whenever the held locks change:
// granted, extended or ended.
func (c *Coordinator) Changes() <-chan struct{} { return c.changes }

// VisitHeld calls f for each lock held now: its key, when it was
// granted, when it expires, and the window its last grant, extend or
// renewal set. The locks are copied under the coordinator's lock and f is
// called after it is let go (the metrics read the held locks' ages with
// it at each scrape): nothing of the caller's runs under the engine's
// mutex, however many locks a sidecar holds.
func (c *Coordinator) VisitHeld(f func(key string, acquiredAt, expiresAt time.Time, ttl time.Duration)) {
	c.mu.Lock()
	held := make([]heldNow, 0, c.journal.held.Load())
	for _, e := range c.locks {
		if h := e.held; h != nil && !h.ended {
			held = append(held, heldNow{key: e.key.String(), acquiredAt: h.acquiredAt, expiresAt: h.expiresAt, ttl: h.ttl})
		}
	}
	c.unlock()
	for _, h := range held {
		f(h.key, h.acquiredAt, h.expiresAt, h.ttl)
	}
}

// heldNow is a held lock as VisitHeld copies it.
type heldNow struct {
	key                   string
	acquiredAt, expiresAt time.Time
	ttl                   time.Duration
}
