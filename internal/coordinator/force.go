package coordinator

import (
	"context"
	"fmt"

	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/policy"
)

// Forced describes a lock an operator released by force.
type Forced struct {
	Holder keyspace.Holder
	Fence  int64
}

// ForceRelease deletes the holder key of k, whichever sidecar (or etcdctl)
// holds it, for an operator. fence, when not 0, must be the holder's fence:
// the delete compares the key's create revision, so a newer holder is never
// hit. by says who asked, for the log. The holder's sidecar reports the
// lock lost (force_released) to its owner: this one at once, another when
// its watch sees the delete.
func (c *Coordinator) ForceRelease(ctx context.Context, k keyspace.Key, fence int64, by string) (Forced, error) {
	op := fmt.Sprintf("force release %q", k)
	if err := c.allowed(policy.ForceRelease, k); err != nil {
		return Forced{}, fmt.Errorf("%s: %w", op, err)
	}
	tctx, cancel := c.etcdCtx(ctx)
	defer cancel()
	first, err := c.store.First(tctx, c.layout.LockPrefix(k))
	if err != nil {
		return Forced{}, unavailable(op, err)
	}
	if first == nil {
		return Forced{}, fmt.Errorf("%s: %w: nobody holds it", op, ErrNotHeld)
	}
	if fence != 0 && first.Create != fence {
		return Forced{}, fmt.Errorf("%s: %w", op, &HeldError{Key: k, Holder: first.Holder, Fence: first.Create, Mismatch: fence})
	}
	del, err := c.store.Delete(first.Key, first.Create)
	if err != nil {
		return Forced{}, unavailable(op, err)
	}
	if !del.OK {
		return Forced{}, fmt.Errorf("%s: %w: the holder changed while releasing; look again", op, ErrFenceMismatch)
	}
	c.log.Warn("lock force-released", "lock", k.String(), "owner", first.Holder.Owner, "pod", first.Holder.Pod, "fence", first.Create, "by", by)
	// Held here: lost now, whether or not the watch is open for it.
	c.mu.Lock()
	if e := c.locks[k.String()]; e != nil && e.held != nil && e.held.fence == first.Create && !e.held.ending {
		c.loseLocked(e, e.held, ForceReleased)
		c.passTurnLocked(e)
	}
	c.mu.Unlock()
	return Forced{Holder: first.Holder, Fence: first.Create}, nil
}
