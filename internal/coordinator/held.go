package coordinator

import (
	"time"

	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/lockstore"
)

// held is a lock granted to a local owner. A sidecar may hold 100 000
// locks: what few of them need (a max hold, how one ended) is behind a
// pointer, and the fields are ordered so that a held is 192 bytes.
type held struct {
	owner      string
	etcdKey    string
	sess       lockstore.Session
	fence      int64
	lease      lockstore.LeaseID // the lease of sess that carries etcdKey
	mod        int64             // the revision of the last write of etcdKey that etcd took, while entry.rec keeps none
	ttl        time.Duration     // the window each grant, extend or renewal sets
	acquiredAt time.Time
	expiresAt  time.Time
	due        time.Time     // when its deadline fires
	more       *heldMore     // what few locks have (a max hold, an election's value); nil when none
	entry      *entry        // the lock's entry: its claim, its deadline, and its registry (entry.co, whose mu guards the rest). Never changes
	ending     chan struct{} // while a release or extend of ours is in flight (its delete is not a loss); closed as it settles
	end        *heldEnd      // made when first needed: most locks are released without
	slot       int32         // its place in the deadline queue; -1 when none
	hold       bool          // bound to a hold stream
	ended      bool          // the lock ended
	watched    bool          // its lock's watch is open for it (hub.watchHeld)
	inScope    bool          // counted among the scope watch's holds, with no lock watch
}

// heldMore is what few held locks have. Guarded by Coordinator.mu.
type heldMore struct {
	capAt time.Time // the request's max hold: no deadline goes past it; zero when none. Never changes
	value string    // what an election's leader announces (AcquireRequest.Value, Proclaim)
}

// moreOf returns h's heldMore, made if need be; Coordinator.mu is held.
func (h *held) moreOf() *heldMore {
	if h.more == nil {
		h.more = &heldMore{}
	}
	return h.more
}

// value is what h announces as an election's leader; "" for a lock.
func (h *held) value() string {
	if h.more == nil {
		return ""
	}
	return h.more.value
}

// heldEnd is what a held lock's end needs: who waits for it, why it was
// lost, and a delete heard while a change was in flight. Guarded by
// Coordinator.mu.
type heldEnd struct {
	goneAt int64         // the revision of a delete of its key heard while a change was in flight (0: none)
	done   chan struct{} // closed when the lock ends; made when first asked for
	lost   *LostError    // why it ended, when not by its owner's release; set before it ends
}

// endOf returns h's heldEnd, made if need be; Coordinator.mu is held.
func (h *held) endOf() *heldEnd {
	if h.end == nil {
		h.end = &heldEnd{}
	}
	return h.end
}

// lostErr is why h was lost; nil while held or once released. Guarded by
// Coordinator.mu.
func (h *held) lostErr() *LostError {
	if h.end == nil {
		return nil
	}
	return h.end.lost
}

// maxHoldAt is h's max hold; zero when none.
func (h *held) maxHoldAt() time.Time {
	if h.more == nil {
		return time.Time{}
	}
	return h.more.capAt
}

// settleLocked ends the change of h in flight, if any: the callers
// waiting to change h look again.
func (h *held) settleLocked() {
	if h.ending != nil {
		close(h.ending)
		h.ending = nil
	}
}

// goneAfterLocked has h lost, by its own goroutine, when a delete of
// its key after revision rev was heard while an extend was in flight:
// the extend's write went in, and then the key went (a force release,
// say), a delete onDelete leaves to the change in flight.
func (h *held) goneAfterLocked(rev int64) {
	if h.end != nil && h.end.goneAt > rev {
		go h.lostByDelete()
	}
}

// claim returns what h holds.
func (h *held) claim() keyspace.Claim {
	return claimOf(h.entry)
}

// doneChan returns the channel closed when h ends, making it if need be.
// Whoever waits on it must hear of a loss at once: h is watched from now.
func (h *held) doneChan() <-chan struct{} {
	h.entry.co.mu.Lock()
	defer h.entry.co.unlock()
	end := h.endOf()
	if end.done == nil {
		end.done = make(chan struct{})
		if h.ended {
			close(end.done)
		}
	}
	h.watchHeldLocked()
	return end.done
}

// loseLocked ends h as lost for reason and remembers it for its owner.
func (h *held) loseLocked(reason LostReason) {
	c := h.entry.co
	e := h.entry
	if e.held != h {
		return
	}
	lost := &LostError{Key: e.key, Owner: h.owner, Fence: h.fence, Reason: reason, At: c.now()}
	h.endOf().lost = lost
	h.endLocked()
	c.ended.remember(c.now(), e.key, endedLock{owner: h.owner, fence: h.fence, reason: reason, at: lost.At, expiresAt: h.expiresAt})
	c.log.Warn("lock lost", "lock", e.key.String(), "owner", h.owner, "fence", h.fence, "reason", string(reason), "heldFor", c.now().Sub(h.acquiredAt))
}

// holdLocked makes h e's holder, expiring in d; the caller has the turn.
// With watchNow (a hold stream's lock, whose caller is told of a loss as it
// happens, or one held since before this process) h is watched at once,
// otherwise once it has been held for the watch delay.
func (h *held) holdLocked(d time.Duration, watchNow bool) {
	c := h.entry.co
	e := h.entry
	// Indexed before its watch opens: a delete that the watch delivers
	// finds the key held here (onDelete), and then waits for this hold.
	e.held = h
	deletedAt := c.heldKeys.add(h)
	if watchNow {
		h.watchHeldLocked()
	} else {
		h.watchLaterLocked()
	}
	c.deadlines.arm(h, d)
	if e.slot != nil {
		c.units[h.etcdKey] = e
	}
	c.events.add(lockEvent{key: e.key.String(), claim: h.claim()})
	c.journal.held.Add(1)
	h.changedLocked(false)
	if deletedAt > h.fence {
		go h.lostByDelete() // deleted before this hold was indexed: lost at once
	}
}

// endLocked forgets h as e's holder; the caller decides about the turn.
func (h *held) endLocked() {
	c := h.entry.co
	e := h.entry
	if e.held != h {
		return
	}
	c.deadlines.disarm(h)
	e.held = nil
	c.heldKeys.remove(h)
	if c.units[h.etcdKey] == e {
		delete(c.units, h.etcdKey)
	}
	h.ended = true
	if h.watched {
		c.hub.unwatchHeld(e.key, h.inScope)
	}
	if h.end != nil && h.end.done != nil {
		close(h.end.done)
	}
	e.refs-- // the holder's reference; the turn, still busy, keeps e
	var reason string
	if lost := h.lostErr(); lost != nil {
		reason = string(lost.Reason)
	}
	c.events.add(lockEvent{key: e.key.String(), claim: h.claim(), ended: true, reason: reason, heldFor: c.now().Sub(h.acquiredAt)})
	c.journal.held.Add(-1)
	h.changedLocked(true)
}

// changedLocked notes a change of h for HeldChanges and signals Changes.
func (h *held) changedLocked(ended bool) {
	c := h.entry.co
	e := h.entry
	c.journal.note(e, h, ended)
	signal(c.changes)
}
