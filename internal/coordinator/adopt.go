package coordinator

import (
	"context"
	"fmt"
	"time"

	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/lockstore"
)

// Adopt takes over the locks that an earlier process of this sidecar held
// under sess's leases, which Keeper resumed: their owners keep them, with the
// same fences and deadlines. Keys of the lease that held no lock (waiters)
// or that belonged to hold streams (whose connections died with that
// process) are deleted. A lock of previous whose key is gone was force
// released meanwhile and is reported lost to its owner.
func (c *Coordinator) Adopt(ctx context.Context, sess lockstore.Session, previous []HeldLock) (adopted int, err error) {
	tctx, cancel := c.cfg.etcdCtx(ctx)
	cs, _, err := c.store.watches.Contenders(tctx, c.layout.Base(), 0)
	cancel()
	if err != nil {
		return 0, unavailable("adopt", err)
	}
	holding := holdingKeys(c.layout, cs)
	hold := map[string]bool{}
	deadline := map[string]time.Time{} // as the state file has it
	for _, p := range previous {
		hold[fmt.Sprintf("%s\x00%d", p.Key, p.Fence)] = p.Hold
		deadline[fmt.Sprintf("%s\x00%d", p.Key, p.Fence)] = p.ExpiresAt
	}
	found := map[string]bool{}
	var stray []lockstore.Contender
	c.mu.Lock()
	c.sessions.watch(sess)
	for _, ct := range cs {
		k, _, ok := c.layout.ParseContender(ct.Key)
		if !ok || !lockstore.Owns(sess, ct.Lease) {
			continue
		}
		id := fmt.Sprintf("%s\x00%d", k, ct.Create)
		found[id] = true
		// A waiter's key, or a hold stream's (as the state file or, when
		// the file missed it, its record says): its caller is gone.
		if !holding[ct.Key] || hold[id] || ct.Holder.Hold {
			stray = append(stray, ct)
			continue
		}
		rec := ct.Holder
		e := c.lineLocked(k, rec.Owner, rec.Claim) // the holder's reference
		e.busy = true
		// The record's deadline, or the state file's when later: an extend
		// that etcd, out of space, could not write into the record, and that
		// the owner was told.
		expires := rec.ExpiresAt
		if d := deadline[id]; d.After(expires) {
			expires = d
		}
		h := &held{owner: rec.Owner, entry: e, fence: ct.Create, etcdKey: ct.Key, sess: sess, lease: ct.Lease,
			acquiredAt: rec.AcquiredAt, expiresAt: expires, ttl: rec.ExpiresAt.Sub(rec.AcquiredAt)}
		h.holdLocked(max(c.clock.Until(expires), 0), true)
		// The callers the record counts as queued here died with the
		// earlier process.
		e.placing.Store(&contenderRecord{key: h.etcdKey, create: h.fence, mod: ct.Mod, lease: h.lease, wrote: rec})
		e.publishLaterLocked()
		adopted++
		c.log.Info("lock kept across a restart", "lock", k.String(), "owner", h.owner, "fence", h.fence, "expiresAt", h.expiresAt)
	}
	for _, p := range previous {
		k, err := keyspace.ParseKey(p.Key)
		if err != nil || p.Hold || found[fmt.Sprintf("%s\x00%d", p.Key, p.Fence)] {
			continue
		}
		c.ended.remember(c.now(), k, endedLock{owner: p.Owner, fence: p.Fence, reason: ForceReleased, at: c.now(), expiresAt: p.ExpiresAt})
	}
	signal(c.changes)
	c.unlock()

	for _, ct := range stray {
		if _, err := c.store.lines.Delete(ct.Key, ct.Create); err != nil {
			return adopted, unavailable("delete a stray key", err)
		}
	}
	return adopted, nil
}

// holdingKeys returns the contender keys of cs that hold their lock.
func holdingKeys(l keyspace.Layout, cs []lockstore.Contender) map[string]bool {
	lines := map[string][]lockstore.Contender{}
	for _, ct := range cs {
		if _, pfx, ok := l.ParseContender(ct.Key); ok {
			lines[pfx] = append(lines[pfx], ct)
		}
	}
	holding := map[string]bool{}
	for _, line := range lines {
		sortLine(line)
		for _, ct := range line[:holdersOf(line)] {
			holding[ct.Key] = true
		}
	}
	return holding
}

// Forget records the locks of an earlier process whose lease is gone as
// lost, so that their owners hear 410 lease_lost rather than 404.
func (c *Coordinator) Forget(previous []HeldLock) {
	c.mu.Lock()
	defer c.unlock()
	for _, p := range previous {
		if k, err := keyspace.ParseKey(p.Key); err == nil && !p.Hold {
			c.ended.remember(c.now(), k, endedLock{owner: p.Owner, fence: p.Fence, reason: LeaseLost, at: c.now(), expiresAt: p.ExpiresAt})
		}
	}
}
