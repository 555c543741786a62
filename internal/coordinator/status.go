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
	Key  keyspace.Key
	Held bool
	// Holder and Fence are the first holder's (the only one's, but for a
	// read/write lock held by readers and a semaphore).
	Holder keyspace.Holder
	Fence  int64
	// Waiters counts the callers waiting for the lock, in every sidecar.
	Waiters int
	// Limit is the units of a semaphore, 0 for any other lock; HeldUnits
	// how many of them are held.
	Limit, HeldUnits int
	// Holders are every holder, the first created first.
	Holders []Holding
	// Waiting are the contenders waiting, first in line first: one per
	// sidecar that queues callers for the lock (Holder.Queued more behind
	// it), with when it queued (Holder.AcquiredAt).
	Waiting []keyspace.Holder
}

// Holding is one holder of a lock.
type Holding struct {
	Holder keyspace.Holder
	Fence  int64
}

// Status reads lock k from etcd (one linearizable read of its contenders).
func (c *Coordinator) Status(ctx context.Context, k keyspace.Key) (Status, error) {
	tctx, cancel := c.cfg.etcdCtx(ctx)
	defer cancel()
	cs, _, err := c.store.watches.Contenders(tctx, c.layout.LockPrefix(k), 0)
	if err != nil {
		return Status{}, unavailable(fmt.Sprintf("status %q", k), err)
	}
	if locks := c.reads.summarize(cs); len(locks) == 1 {
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
	tctx, cancel := c.cfg.etcdCtx(ctx)
	defer cancel()
	cs, more, err := c.store.watches.Contenders(tctx, c.layout.ListPrefix(prefix), MaxListKeys)
	if err != nil {
		return nil, false, unavailable("list", err)
	}
	return c.reads.summarize(cs), more, nil
}

// statusOf is the status of lock k with the contenders line.
func statusOf(k keyspace.Key, line []lockstore.Contender) Status {
	sortLine(line)
	n := holdersOf(line)
	s := Status{Key: k, Held: n > 0, Holders: make([]Holding, n)}
	for i, ct := range line {
		s.Waiters += ct.Holder.Callers()
		if i < n {
			s.Holders[i] = Holding{Holder: ct.Holder, Fence: ct.Create}
			s.HeldUnits += ct.Holder.Units()
		} else {
			s.Waiting = append(s.Waiting, ct.Holder)
		}
	}
	s.Waiters -= n
	if n > 0 {
		s.Holder, s.Fence = line[0].Holder, line[0].Create
	}
	for _, ct := range line {
		if !ct.Holder.Foreign {
			s.Limit = ct.Holder.Limit // the claim in force
			break
		}
	}
	return s
}
