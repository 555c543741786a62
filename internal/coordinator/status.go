package coordinator

import (
	"context"
	"fmt"

	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/lockstore"
)

// MaxListKeys bounds the contender keys one List reads.
const MaxListKeys = 10000

// Status is what etcd says about one lock.
type Status struct {
	Key    keyspace.Key
	Held   bool
	Holder keyspace.Holder
	Fence  int64
	// Waiters counts the callers waiting for the lock, in every sidecar.
	Waiters int
}

// Status reads lock k from etcd (one linearizable read of its contenders).
func (c *Coordinator) Status(ctx context.Context, k keyspace.Key) (Status, error) {
	tctx, cancel := c.etcdCtx(ctx)
	defer cancel()
	cs, _, err := c.store.Contenders(tctx, c.layout.LockPrefix(k), 0)
	if err != nil {
		return Status{}, unavailable(fmt.Sprintf("status %q", k), err)
	}
	if locks := c.summarize(cs); len(locks) == 1 {
		return locks[0], nil
	}
	return Status{Key: k}, nil
}

// List returns the locks whose key starts with prefix ("" for all), in key
// order. truncated is true when there were more than MaxListKeys contender
// keys to read.
func (c *Coordinator) List(ctx context.Context, prefix string) (locks []Status, truncated bool, err error) {
	if err := keyspace.ValidatePrefix(prefix); err != nil {
		return nil, false, fmt.Errorf("list: %w", err)
	}
	tctx, cancel := c.etcdCtx(ctx)
	defer cancel()
	cs, more, err := c.store.Contenders(tctx, c.layout.ListPrefix(prefix), MaxListKeys)
	if err != nil {
		return nil, false, unavailable("list", err)
	}
	return c.summarize(cs), more, nil
}

// summarize returns the status of each lock of the contenders cs, in the
// order the locks first appear. A lock's holder is its first contender;
// its waiters are the callers of every contender (each counts those queued
// behind it in its sidecar) but the holder.
func (c *Coordinator) summarize(cs []lockstore.Contender) []Status {
	var locks []Status
	byPrefix := map[string]int{}
	for _, ct := range cs {
		k, pfx, ok := c.layout.ParseContender(ct.Key)
		if !ok {
			continue
		}
		i, seen := byPrefix[pfx]
		if !seen {
			byPrefix[pfx] = len(locks)
			locks = append(locks, Status{Key: k, Held: true, Holder: ct.Holder, Fence: ct.Create, Waiters: ct.Holder.Callers() - 1})
			continue
		}
		s := &locks[i]
		s.Waiters += ct.Holder.Callers()
		if ct.Create < s.Fence {
			s.Holder, s.Fence = ct.Holder, ct.Create
		}
	}
	return locks
}
