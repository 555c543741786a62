package coordinator

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-dev/baton/internal/keyspace"
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
	tctx, cancel := c.etcdCtx(ctx)
	defer cancel()
	resp, err := c.cli.Get(tctx, c.layout.LockPrefix(k), clientv3.WithFirstCreate()...)
	if err != nil {
		return Forced{}, unavailable(op, err)
	}
	if len(resp.Kvs) == 0 {
		return Forced{}, fmt.Errorf("%s: %w: nobody holds it", op, ErrNotHeld)
	}
	kv := resp.Kvs[0]
	holder := keyspace.DecodeHolder(kv.Value)
	if fence != 0 && kv.CreateRevision != fence {
		return Forced{}, fmt.Errorf("%s: %w", op, &HeldError{Key: k, Holder: holder, Fence: kv.CreateRevision, Mismatch: fence})
	}
	tctx, cancel = c.etcdCtx(context.WithoutCancel(ctx))
	defer cancel()
	del, err := c.cli.Txn(tctx).
		If(clientv3.Compare(clientv3.CreateRevision(string(kv.Key)), "=", kv.CreateRevision)).
		Then(clientv3.OpDelete(string(kv.Key))).
		Commit()
	if err != nil {
		return Forced{}, unavailable(op, err)
	}
	if !del.Succeeded {
		return Forced{}, fmt.Errorf("%s: %w: the holder changed while releasing; look again", op, ErrFenceMismatch)
	}
	c.log.Warn("lock force-released", "lock", k.String(), "owner", holder.Owner, "pod", holder.Pod, "fence", kv.CreateRevision, "by", by)
	// Held here: lost now, whether or not the watch is open for it.
	c.mu.Lock()
	if e := c.locks[k.String()]; e != nil && e.held != nil && e.held.fence == kv.CreateRevision && !e.held.ending {
		c.loseLocked(e, e.held, ForceReleased)
		c.passTurnLocked(e)
	}
	c.mu.Unlock()
	return Forced{Holder: holder, Fence: kv.CreateRevision}, nil
}
