package coordinator

import (
	"context"
	"fmt"

	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/lockstore"
)

// ownedBy returns owner's local lock of k and marks a change of it in
// flight (held.ending), so that the watch does not take the change for a
// loss. A change already in flight (a hold's renewal as its caller
// releases, say) is waited for first. It explains why when owner holds
// no such lock.
func (c *Coordinator) ownedBy(ctx context.Context, k keyspace.Key, owner string) (*entry, *held, error) {
	if err := CheckOwner(owner); err != nil {
		return nil, nil, err
	}
	for {
		e, h, settled, err := c.ownedHere(k, owner)
		switch {
		case settled != nil:
			select {
			case <-settled:
				continue
			case <-ctx.Done():
				return nil, nil, fmt.Errorf("%w: waiting for another release or extend of this lock: %w", ErrUnavailable, ctx.Err())
			}
		case h != nil || err != nil:
			return e, h, err
		}
		return nil, nil, c.ownedElsewhere(ctx, k, owner)
	}
}

// ownedHere is ownedBy's look at the locks held here: owner's lock of k,
// marked in flight; or, when a change of it is in flight, the channel
// closed as it settles; or why owner does not hold it here; or nothing
// when nobody holds k here.
func (c *Coordinator) ownedHere(k keyspace.Key, owner string) (*entry, *held, <-chan struct{}, error) {
	c.mu.Lock()
	defer c.unlock()
	if c.closed {
		return nil, nil, nil, fmt.Errorf("%w: shutting down", ErrUnavailable)
	}
	var h *held
	e := c.locks[k.String()]
	if e != nil {
		h = e.held
	}
	if h == nil || h.owner != owner {
		if s := c.locks[slotName(k, owner)]; s != nil && s.held != nil {
			e, h = s, s.held
		}
	}
	if h != nil && h.ending == nil && !lockstore.Alive(h.sess) {
		// The session was given up and its watcher has not run yet.
		h.loseLocked(LeaseLost)
		e.passTurnLocked()
		h = nil
	}
	if h != nil && h.owner == owner {
		if h.ending != nil {
			return nil, nil, h.ending, nil
		}
		h.ending = make(chan struct{})
		return e, h, nil, nil
	}
	if lost := c.ended.lost(c.now(), k, owner); lost != nil {
		return nil, nil, nil, lost
	}
	if h != nil {
		return nil, nil, nil, &NotOwnerError{Key: k, Owner: owner, Holder: h.recordOf()}
	}
	return nil, nil, nil, nil
}

// ownedElsewhere explains why owner cannot change k, which nobody holds
// here: it is held elsewhere, or by nobody.
func (c *Coordinator) ownedElsewhere(ctx context.Context, k keyspace.Key, owner string) error {
	tctx, cancel := c.cfg.etcdCtx(ctx)
	defer cancel()
	first, err := c.store.lines.First(tctx, c.layout.LockPrefix(k))
	if err != nil {
		return unavailable("read holder", err)
	}
	if first == nil {
		return fmt.Errorf("%w: nobody holds it", ErrNotHeld)
	}
	holder := first.Holder
	if holder.Owner == owner {
		return fmt.Errorf("%w: %s holds it through another sidecar (pod %s); ask that sidecar", ErrNotOwner, owner, holder.Pod)
	}
	return &NotOwnerError{Key: k, Owner: owner, Holder: holder}
}
