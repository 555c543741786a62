package coordinator

import (
	"context"
	"fmt"
	"strings"

	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/lockstore"
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
	if err := c.guard.allowed(policy.ForceRelease, k); err != nil {
		return Forced{}, fmt.Errorf("%s: %w", op, err)
	}
	line, err := c.reads.lineOf(ctx, k)
	if err != nil {
		return Forced{}, unavailable(op, err)
	}
	target, err := forceTarget(k, line, fence)
	if err != nil {
		return Forced{}, fmt.Errorf("%s: %w", op, err)
	}
	del, err := c.store.lines.Delete(target.Key, target.Create)
	if err != nil {
		return Forced{}, unavailable(op, err)
	}
	if !del.OK {
		return Forced{}, fmt.Errorf("%s: %w: the holder changed while releasing; look again", op, ErrFenceMismatch)
	}
	c.log.Warn("lock force-released", "lock", k.String(), "owner", target.Holder.Owner, "pod", target.Holder.Pod, "fence", target.Create, "by", by)
	// Held here: lost now, whether or not the watch is open for it.
	c.mu.Lock()
	e := c.locks[k.String()]
	if u := c.units[target.Key]; u != nil {
		e = u
	}
	if e != nil && e.held != nil && e.held.fence == target.Create && e.held.ending == nil {
		e.held.loseLocked(ForceReleased)
		e.passTurnLocked()
	}
	c.unlock()
	return Forced{Holder: target.Holder, Fence: target.Create}, nil
}

// forceTarget picks the holder of line that a force release with fence
// deletes: the one with that fence, or with fence 0 the only holder.
func forceTarget(k keyspace.Key, line []lockstore.Contender, fence int64) (lockstore.Contender, error) {
	holders := line[:holdersOf(line)]
	switch {
	case len(holders) == 0:
		return lockstore.Contender{}, fmt.Errorf("%w: nobody holds it", ErrNotHeld)
	case fence != 0:
		for _, h := range holders {
			if h.Create == fence {
				return h, nil
			}
		}
		return lockstore.Contender{}, &HeldError{Key: k, Holder: holders[0].Holder, Fence: holders[0].Create, Mismatch: fence}
	case len(holders) > 1:
		fences := make([]string, len(holders))
		for i, h := range holders {
			fences[i] = fmt.Sprintf("%d (%s)", h.Create, describe(h.Holder))
		}
		return lockstore.Contender{}, invalid("fence", "lock %q has %d holders: %s; name the fence of the one to release",
			k.String(), len(holders), strings.Join(fences, ", "))
	}
	return holders[0], nil
}
