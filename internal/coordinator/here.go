package coordinator

import (
	"context"
	"fmt"

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
	if c.closed || c.draining {
		return nil, fmt.Errorf("acquire %q: %w: shutting down", req.Key, ErrUnavailable)
	}
	exclusive := req.Claim.IsExclusive()
	if !exclusive || len(c.units) > 0 {
		other := req.Key.String() // where the owner's claim of the other kind would be
		if exclusive {
			other = slotName(req.Key, req.Owner)
		}
		if x := c.locks[other]; x != nil && x.held != nil && x.held.owner == req.Owner {
			err := &MismatchError{Key: req.Key, Asked: req.Claim, InForce: claimOf(x), Holder: c.recordOf(x.held), Fence: x.held.fence, Own: true}
			return nil, fmt.Errorf("acquire %q: %w", req.Key, err)
		}
	}
	if exclusive {
		return c.refLocked(req.Key), nil
	}
	return c.slotLocked(req.Key, req.Owner, req.Claim), nil
}

// heldHereLocked answers an acquire of a lock held in this sidecar, when
// its holder's answer is the caller's: the grant again to its owner
// (acquire is idempotent), a refusal naming the holder to a try. answered
// says it did. check is a holder of the owner's that etcd must first be
// asked about (verifiedHere), unless it is verified, which it was.
func (c *Coordinator) heldHereLocked(e *entry, req AcquireRequest, verified *held) (g Grant, answered bool, check *held, err error) {
	if h := e.held; h != nil && !lockstore.Alive(h.sess) {
		// The session just ended and its watcher has not run yet: the
		// lock is lost, not something to hand back.
		c.loseLocked(e, h, LeaseLost)
		c.passTurnLocked(e)
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
		err := &MismatchError{Key: req.Key, Asked: req.Claim, InForce: h.claim(), Holder: c.recordOf(h), Fence: h.fence, Own: true}
		return Grant{}, true, nil, fmt.Errorf("acquire %q: %w", req.Key, err)
	case same:
		g := grantOf(e, h)
		g.Repeated = true
		return g, true, nil, nil
	case req.Wait == 0 && !h.ending:
		return Grant{}, true, nil, &HeldError{Key: req.Key, Holder: c.recordOf(h), Fence: h.fence, Twin: h.owner == req.Owner}
	}
	return Grant{}, false, nil, nil
}

// verifiedHere is heldHereLocked's answer once etcd said whether h, the
// owner's holder here, still holds the lock.
func (c *Coordinator) verifiedHere(ctx context.Context, e *entry, req AcquireRequest, h *held) (g Grant, answered bool, err error) {
	if err := c.verify(ctx, e, h); err != nil {
		return Grant{}, true, fmt.Errorf("acquire %q: %w", req.Key, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return Grant{}, true, fmt.Errorf("acquire %q: %w: shutting down", req.Key, ErrUnavailable)
	}
	g, answered, _, err = c.heldHereLocked(e, req, h)
	return g, answered, err
}

// here is heldHereLocked's answer, asking etcd when it must.
func (c *Coordinator) here(ctx context.Context, e *entry, req AcquireRequest) (Grant, bool, error) {
	c.mu.Lock()
	g, answered, check, err := c.heldHereLocked(e, req, nil)
	c.mu.Unlock()
	if check != nil {
		return c.verifiedHere(ctx, e, req, check)
	}
	return g, answered, err
}
