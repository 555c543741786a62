package coordinator

import (
	"context"
	"fmt"
	"time"

	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/lockstore"
)

// maxHeldElsewhere bounds the memory of locks seen held elsewhere; past it
// the memory starts over (a forgotten lock costs one write on its next
// refusal, nothing more).
const maxHeldElsewhere = 1 << 16

// tryLocked tries once, with c.mu locked, which it unlocks: in etcd when
// the turn is free or is being freed by a release here, else it is
// refused naming the holder.
func (c *Coordinator) tryLocked(ctx context.Context, e *entry, req AcquireRequest) (Grant, error) {
	if c.tryTurnLocked(e) {
		c.mu.Unlock()
		return c.try(ctx, e, req)
	}
	if letGo := e.retiring || (e.held != nil && e.held.ending); letGo {
		// The lock is being released here: etcd may already show it
		// free. Wait for that one request, then try.
		wctx, cancel := c.etcdCtx(ctx)
		err := c.waitTurnLocked(wctx, e, false)
		cancel()
		if err == nil {
			c.mu.Unlock()
			return c.try(ctx, e, req)
		}
	}
	c.mu.Unlock()
	// A local caller is queued in etcd: whoever holds the lock, it is
	// not this caller.
	return Grant{}, c.refusal(ctx, req.Key, false, 0)
}

// try makes one attempt in one etcd transaction; the caller has the turn.
func (c *Coordinator) try(ctx context.Context, e *entry, req AcquireRequest) (Grant, error) {
	sess, err := c.session(ctx)
	if err != nil {
		c.leaveTurn(e)
		return Grant{}, fmt.Errorf("acquire %q: %w", req.Key, err)
	}
	key, pfx := c.layout.ContenderKey(req.Key, int64(sess.ID())), c.layout.LockPrefix(req.Key)
	now := c.now()
	rec := c.record(req.Owner, now, now.Add(req.TTL))

	// A lock last seen held elsewhere is read first: a refusal is then a
	// linearizable read, with no raft entry (a transaction whose compare
	// fails still costs one, and an fsync, when it has a write branch).
	c.mu.Lock()
	readFirst := c.heldElsewhere[req.Key.String()]
	load := len(c.locks)
	c.mu.Unlock()
	id := sess.LeaseFor(load)
	if readFirst {
		first, err := c.firstContender(ctx, req.Key)
		if err != nil {
			c.leaveTurn(e)
			return Grant{}, unavailable(fmt.Sprintf("acquire %q", req.Key), err)
		}
		if first != nil {
			c.leaveTurn(e)
			return Grant{}, heldFrom(req.Key, first, false, 0)
		}
		c.mu.Lock()
		delete(c.heldElsewhere, req.Key.String()) // its delete went unseen
		c.mu.Unlock()
	}

	// The outcome must not depend on the caller hanging up mid-call: the
	// store carries out a write whatever the caller does.
	out, err := c.store.Try(pfx, lockstore.Put{Key: key, Lease: id, Record: rec})
	if err != nil {
		c.retire(e, key, 0, sess) // the put may have committed
		return Grant{}, unavailable(fmt.Sprintf("acquire %q", req.Key), err)
	}
	if !out.OK {
		c.mu.Lock()
		if len(c.heldElsewhere) >= maxHeldElsewhere {
			clear(c.heldElsewhere)
		}
		c.heldElsewhere[req.Key.String()] = true
		c.mu.Unlock()
		c.leaveTurn(e)
		return Grant{}, heldFrom(req.Key, out.First, false, 0)
	}
	return c.grant(e, req, sess, id, key, out.Rev, rec)
}

// refusal reads who holds k (a read, no write) for a refused caller.
func (c *Coordinator) refusal(ctx context.Context, k keyspace.Key, waited bool, wait time.Duration) error {
	first, err := c.firstContender(ctx, k)
	if err != nil {
		return unavailable(fmt.Sprintf("acquire %q", k), err)
	}
	return heldFrom(k, first, waited, wait)
}

// heldFrom is the refusal naming first, which is nil when the lock was
// found free (a wait that ran out just as its holder left).
func heldFrom(k keyspace.Key, first *lockstore.Contender, waited bool, wait time.Duration) error {
	he := &HeldError{Key: k, Waited: waited, Wait: wait.Round(time.Millisecond)}
	if first != nil {
		he.Holder, he.Fence = first.Holder, first.Create
	}
	return he
}
