package coordinator

import (
	"context"
	"fmt"
	"time"

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
	Waiting []Waiting
	// Queued are this sidecar's callers queued behind its own contenders
	// of the lock (which count them in Holder.Queued), first first: only
	// this sidecar knows them.
	Queued []Caller
}

// Holding is one holder of a lock.
type Holding struct {
	Holder keyspace.Holder
	Fence  int64
	// Caller is the local caller holding it, when it holds through this
	// sidecar (Status only).
	Caller *Caller
}

// Waiting is one contender waiting for a lock.
type Waiting struct {
	Holder keyspace.Holder
	// Caller is its local caller, when it is this sidecar's (Status only).
	Caller *Caller
	key    string // its contender key
	create int64  // and the key's create revision: the placement's identity
}

// Caller is a local caller of a lock, as only its sidecar knows it.
type Caller struct {
	Owner string
	// Since is when it queued, or for a holder when it was granted.
	Since time.Time
	// PID is its process: AcquireRequest.Caller.
	PID int32
}

// Status reads lock k from etcd (one linearizable read of its contenders).
func (c *Coordinator) Status(ctx context.Context, k keyspace.Key) (Status, error) {
	tctx, cancel := c.cfg.etcdCtx(ctx)
	defer cancel()
	cs, _, err := c.store.watches.Contenders(tctx, c.layout.LockPrefix(k), 0)
	if err != nil {
		return Status{}, unavailable(fmt.Sprintf("status %q", k), err)
	}
	s := Status{Key: k}
	if locks := c.reads.summarize(cs); len(locks) == 1 {
		s = locks[0]
	}
	c.mu.Lock()
	addLocalCallers(c.locks, &s)
	c.unlock()
	return s, nil
}

// addLocalCallers adds to s what only this sidecar knows, from its
// entries by name: the local callers of its contenders, and those queued
// behind them. Guarded by Coordinator.mu.
func addLocalCallers(locks map[string]*entry, s *Status) {
	seen := map[*entry]bool{}
	lines := func(owner string) [2]*entry { // the key's line, and owner's slot
		return [2]*entry{locks[s.Key.String()], locks[slotName(s.Key, owner)]}
	}
	queuedOf := func(e *entry) {
		if e == nil || seen[e] {
			return
		}
		seen[e] = true
		for _, q := range e.queue {
			if q.owner != "" {
				s.Queued = append(s.Queued, Caller{Owner: q.owner, Since: q.since, PID: q.pid})
			}
		}
	}
	queuedOf(locks[s.Key.String()])
	for i := range s.Holders {
		h := &s.Holders[i]
		for _, e := range lines(h.Holder.Owner) {
			if e != nil && e.held != nil && e.held.fence == h.Fence {
				h.Caller = &Caller{Owner: e.held.owner, Since: e.held.acquiredAt, PID: e.pid}
				queuedOf(e)
			}
		}
	}
	for i := range s.Waiting {
		w := &s.Waiting[i]
		for _, e := range lines(w.Holder.Owner) {
			if e == nil {
				continue
			}
			rec := e.rec
			if p := e.placing.Load(); rec == nil || (p != nil && p.create > rec.create) {
				rec = p
			}
			// The key's name is the same for each placement of the
			// session: the one etcd showed is the one of its revision.
			if rec != nil && rec.key == w.key && rec.create == w.create && rec.wrote.Owner == w.Holder.Owner {
				w.Caller = &Caller{Owner: w.Holder.Owner, Since: w.Holder.AcquiredAt, PID: rec.pid}
				queuedOf(e)
			}
		}
	}
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
			s.Waiting = append(s.Waiting, Waiting{Holder: ct.Holder, key: ct.Key, create: ct.Create})
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
