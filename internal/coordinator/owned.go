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
		c.mu.Lock()
		if c.closed.Load() {
			c.unlock()
			return nil, nil, fmt.Errorf("%w: shutting down", ErrUnavailable)
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
		switch {
		case h != nil && h.owner == owner && h.ending != nil:
			settled := h.ending
			c.unlock()
			select {
			case <-settled:
				continue
			case <-ctx.Done():
				return nil, nil, fmt.Errorf("%w: waiting for another release or extend of this lock: %w", ErrUnavailable, ctx.Err())
			}
		case h != nil && h.owner == owner:
			h.ending = make(chan struct{})
			c.unlock()
			return e, h, nil
		}
		lost := c.ended.lost(c.now(), k, owner)
		var other error
		if h != nil {
			other = &NotOwnerError{Key: k, Owner: owner, Holder: h.recordOf()}
		}
		c.unlock()
		switch {
		case lost != nil:
			return nil, nil, lost
		case other != nil:
			return nil, nil, other
		}
		tctx, cancel := c.cfg.etcdCtx(ctx)
		defer cancel()
		return nil, nil, holderElsewhere(tctx, c.store.lines, c.layout.LockPrefix(k), k, owner)
	}
}

// holderElsewhere explains why owner cannot change k, which nobody holds
// through this sidecar: it is held elsewhere, or by nobody.
func holderElsewhere(ctx context.Context, lines lockstore.Lines, prefix string, k keyspace.Key, owner string) error {
	first, err := lines.First(ctx, prefix)
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
