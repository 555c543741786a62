package coordinator

import (
	"context"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/lease"
)

// Adopt takes over the locks that an earlier process of this sidecar held
// under sess's leases, which Keeper resumed: their owners keep them, with the
// same fences and deadlines. Keys of the lease that held no lock (waiters)
// or that belonged to hold streams (whose connections died with that
// process) are deleted. A lock of previous whose key is gone was force
// released meanwhile and is reported lost to its owner.
func (c *Coordinator) Adopt(ctx context.Context, sess *lease.Session, previous []HeldLock) (adopted int, err error) {
	tctx, cancel := c.etcdCtx(ctx)
	resp, err := c.cli.Get(tctx, c.layout.Base(), clientv3.WithPrefix())
	cancel()
	if err != nil {
		return 0, unavailable("adopt", err)
	}
	first := map[string]int64{} // lock prefix → lowest create revision
	for _, kv := range resp.Kvs {
		if _, pfx, ok := c.layout.ParseContender(string(kv.Key)); ok {
			if r, seen := first[pfx]; !seen || kv.CreateRevision < r {
				first[pfx] = kv.CreateRevision
			}
		}
	}
	hold := map[string]bool{}
	for _, p := range previous {
		hold[fmt.Sprintf("%s\x00%d", p.Key, p.Fence)] = p.Hold
	}
	found := map[string]bool{}
	var stray []*mvccpb.KeyValue
	c.mu.Lock()
	c.watchLocked(sess)
	for _, kv := range resp.Kvs {
		k, pfx, ok := c.layout.ParseContender(string(kv.Key))
		if !ok || !sess.Owns(clientv3.LeaseID(kv.Lease)) {
			continue
		}
		id := fmt.Sprintf("%s\x00%d", k, kv.CreateRevision)
		found[id] = true
		if first[pfx] != kv.CreateRevision || hold[id] {
			stray = append(stray, kv)
			continue
		}
		rec := keyspace.DecodeHolder(kv.Value)
		e := c.refLocked(k) // the holder's reference
		e.busy = true
		h := &held{owner: rec.Owner, fence: kv.CreateRevision, etcdKey: string(kv.Key), sess: sess, lease: clientv3.LeaseID(kv.Lease),
			acquiredAt: rec.AcquiredAt, expiresAt: rec.ExpiresAt, ttl: rec.ExpiresAt.Sub(rec.AcquiredAt), co: c}
		c.holdLocked(e, h, max(time.Until(rec.ExpiresAt), 0), true)
		// The callers the record counts as queued here died with the
		// earlier process.
		c.contendLocked(e, h.etcdKey, h.fence, kv.ModRevision, h.lease, rec)
		adopted++
		c.log.Info("lock kept across a restart", "lock", k.String(), "owner", h.owner, "fence", h.fence, "expiresAt", h.expiresAt)
	}
	for _, p := range previous {
		k, err := keyspace.ParseKey(p.Key)
		if err != nil || p.Hold || found[fmt.Sprintf("%s\x00%d", p.Key, p.Fence)] {
			continue
		}
		c.rememberLocked(k, endedLock{owner: p.Owner, fence: p.Fence, reason: ForceReleased, at: c.now()})
	}
	c.signalLocked()
	c.mu.Unlock()

	for _, kv := range stray {
		if err := c.deleteKey(string(kv.Key), kv.CreateRevision); err != nil {
			return adopted, unavailable("delete a stray key", err)
		}
	}
	return adopted, nil
}

// Forget records the locks of an earlier process whose lease is gone as
// lost, so that their owners hear 410 lease_lost rather than 404.
func (c *Coordinator) Forget(previous []HeldLock) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range previous {
		if k, err := keyspace.ParseKey(p.Key); err == nil && !p.Hold {
			c.rememberLocked(k, endedLock{owner: p.Owner, fence: p.Fence, reason: LeaseLost, at: c.now()})
		}
	}
}
