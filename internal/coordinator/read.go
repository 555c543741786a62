package coordinator

import (
	"context"

	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/lockstore"
)

// sharedRead is one linearizable read of the first contender of a lock,
// shared by every caller that asked for it before it started. Callers that
// ask while it is in flight share the next one, which starts when it ends:
// a read never answers a caller that arrived after it began, so each
// answer is etcd's as of a moment after the caller asked. A burst of tries
// on one held lock (a webhook delivered many times, a resume button
// clicked repeatedly) then costs etcd a read or two, not one per caller.
type sharedRead struct {
	done  chan struct{}        // closed when first and err are set
	first *lockstore.Contender // nil when the lock is free
	err   error
	next  *sharedRead // joined by the callers arriving while this one is in flight
}

// firstContender reads the first contender of k, nil when k is free,
// sharing the read as sharedRead says.
func (c *Coordinator) firstContender(ctx context.Context, k keyspace.Key) (*lockstore.Contender, error) {
	name := k.String()
	c.mu.Lock()
	r := c.reads[name]
	if r == nil {
		r = &sharedRead{done: make(chan struct{})}
		c.reads[name] = r
		c.mu.Unlock()
		c.read(k, r)
		return r.first, r.err
	}
	if r.next == nil {
		r.next = &sharedRead{done: make(chan struct{})}
	}
	n := r.next
	c.mu.Unlock()
	select {
	case <-n.done:
		return n.first, n.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// read performs r, then starts the read its latecomers joined, if any.
func (c *Coordinator) read(k keyspace.Key, r *sharedRead) {
	ctx, cancel := c.etcdCtx(context.Background())
	r.first, r.err = c.store.lines.First(ctx, c.layout.LockPrefix(k))
	cancel()
	c.mu.Lock()
	if r.next != nil {
		c.reads[k.String()] = r.next
		go c.read(k, r.next)
	} else {
		delete(c.reads, k.String())
	}
	c.mu.Unlock()
	close(r.done)
}
