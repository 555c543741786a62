package coordinator

import (
	"context"
	"fmt"
	"time"

	"github.com/baton-dev/baton/internal/lockstore"
)

// An acquire first asks what this sidecar knows of the lock: its entry
// (the key's, or a shared claim's slot), and whether a holder here answers
// the caller at once.

// enterLocked returns the entry that req contends in, with one more
// reference: the key's for an exclusive claim, the owner's slot for a
// shared one. It refuses while the sidecar drains, and a claim of a lock
// that its owner holds here with a claim of the other kind.
func (c *Coordinator) enterLocked(req AcquireRequest) (*entry, error) {
	if c.closed.Load() || c.draining.Load() {
		return nil, fmt.Errorf("acquire %q: %w: shutting down", req.Key, ErrUnavailable)
	}
	exclusive := req.Claim.IsExclusive()
	if !exclusive || len(c.units) > 0 {
		other := req.Key.String() // where the owner's claim of the other kind would be
		if exclusive {
			other = slotName(req.Key, req.Owner)
		}
		if x := c.locks[other]; x != nil && x.held != nil && x.held.owner == req.Owner {
			err := &MismatchError{Key: req.Key, Asked: req.Claim, InForce: claimOf(x), Holder: x.held.recordOf(), Fence: x.held.fence, Own: true}
			return nil, fmt.Errorf("acquire %q: %w", req.Key, err)
		}
	}
	return c.lineLocked(req.Key, req.Owner, req.Claim), nil
}

// heldHereLocked answers an acquire of a lock held in this sidecar, when
// its holder's answer is the caller's: the grant again to its owner
// (acquire is idempotent), a refusal naming the holder to a try. answered
// says it did. check is a holder of the owner's that etcd must first be
// asked about (settle), unless it is verified, which it was.
func (e *entry) heldHereLocked(req AcquireRequest, verified *held) (g Grant, answered bool, check *held, err error) {
	c := e.co
	if h := e.held; h != nil && !lockstore.Alive(h.sess) {
		// The session just ended and its watcher has not run yet: the
		// lock is lost, not something to hand back.
		h.loseLocked(LeaseLost)
		e.passTurnLocked()
	}
	if h := e.held; h != nil && h != verified && h.owner == req.Owner && !c.hub.covers(e.key, h.fence) {
		// Asked again before the watch reports this key's deletes (a young
		// lock, or a watch being established again): etcd says whether
		// it is still held, so a lock force released meanwhile is never
		// handed back.
		return Grant{}, false, h, nil
	}
	h := e.held
	// The same owner gets its grant back only from one plain acquire to
	// the next (a retried call): a hold is a holder of its own, which
	// never shares its lock, not even with its own owner's other hold.
	same := h != nil && h.owner == req.Owner && !h.hold && !req.Hold
	switch {
	case h == nil:
		return Grant{}, false, nil, nil
	case same && h.claim() != req.Claim:
		err := &MismatchError{Key: req.Key, Asked: req.Claim, InForce: h.claim(), Holder: h.recordOf(), Fence: h.fence, Own: true}
		return Grant{}, true, nil, fmt.Errorf("acquire %q: %w", req.Key, err)
	case same:
		g := grantOf(e, h)
		g.Repeated = true
		if req.Caller != 0 {
			e.pid = req.Caller // the process that asked last, which goes on with the lock
		}
		return g, true, nil, nil
	case req.Wait == 0 && h.ending == nil:
		return Grant{}, true, nil, &HeldError{Key: req.Key, Holder: h.recordOf(), Fence: h.fence, Twin: h.owner == req.Owner}
	}
	return Grant{}, false, nil, nil
}

// decision is what an acquire does next, as decideLocked found the lock
// here: an answer (answered: g, or err), or the way on: a waiter's or a
// shared try's place in line for the turn (ch), or an exclusive try's step
// (step). check is a holder of the owner's that etcd must be asked about
// first (settle).
type decision struct {
	g        Grant
	err      error
	answered bool
	ch       chan struct{}
	step     tryStep
	check    *held
}

// decideLocked decides what req does next with e: heldHereLocked's answer,
// else, when proceed, the way on (admitLocked, lineUpLocked or
// tryStepLocked), in the same hold of the mutex. verified is a holder etcd
// was asked about (settle).
func (e *entry) decideLocked(req AcquireRequest, verified *held, proceed bool) decision {
	g, answered, check, err := e.heldHereLocked(req, verified)
	switch {
	case check != nil:
		return decision{check: check}
	case answered:
		return decision{g: g, err: err, answered: true}
	case !proceed:
		return decision{}
	case req.Wait > 0:
		ch, err := e.admitLocked(req)
		return decision{ch: ch, err: err, answered: err != nil}
	}
	return e.admission().stepLocked()
}

// settle asks etcd about each holder of the owner's that d must check
// (verify), deciding again after each, until the decision needs no check.
func (e *entry) settle(ctx context.Context, req AcquireRequest, d decision, proceed bool) decision {
	c := e.co
	for d.check != nil {
		h := d.check
		if err := h.verify(ctx); err != nil {
			return decision{answered: true, err: fmt.Errorf("acquire %q: %w", req.Key, err)}
		}
		c.mu.Lock()
		if c.closed.Load() {
			c.unlock()
			return decision{answered: true, err: fmt.Errorf("acquire %q: %w: shutting down", req.Key, ErrUnavailable)}
		}
		d = e.decideLocked(req, h, proceed)
		c.unlock()
	}
	return d
}

// A claim enters a lock's line in etcd as its kind's admission says
// (keyspace.Admission.Alone). A claim that holds only alone (a mutex, a
// writer) goes by etcd's Mutex transactions: its try writes its key only
// where the line is empty, its wait waits for every contender ahead to
// leave (mutexLine). A claim that may hold beside others (a reader, a
// semaphore's units) writes its key with a read of the claims ahead in the
// same transaction, and holds when keyspace.Holders counts it in
// (sharedLine). The entry is chosen by the same rule (lineLocked): the
// local owners of claims that hold alone share the key's entry and its
// turn; each owner of a shared claim has a slot of its own.

// admission is how the claims of one entry enter the lock's line.
type admission interface {
	// stepLocked finds, under the mutex, what a try does next here: a
	// step of its own (decision.step) or a place in line for the turn
	// (decision.ch).
	stepLocked() decision
	// try carries out a try from d on; ref is the caller's reference to
	// the entry, which the try may drop (it sets it false then).
	try(ctx context.Context, req AcquireRequest, d decision, ref *bool) (Grant, error)
	// wait queues in etcd and waits until the claim holds; the caller
	// has the turn.
	wait(ctx context.Context, req AcquireRequest, start time.Time, w *hearing) (Grant, error)
}

// admission returns how e's claims enter the lock's line.
func (e *entry) admission() admission {
	if e.slot != nil {
		return sharedLine{e}
	}
	return mutexLine{e}
}
