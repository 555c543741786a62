package coordinator

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-dev/baton/internal/keyspace"
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
	resp, err := c.cli.Get(tctx, c.layout.LockPrefix(k), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return Status{}, unavailable(fmt.Sprintf("status %q", k), err)
	}
	if len(resp.Kvs) == 0 {
		return Status{Key: k}, nil
	}
	s := Status{Key: k, Held: true, Holder: keyspace.DecodeHolder(resp.Kvs[0].Value), Fence: resp.Kvs[0].CreateRevision, Waiters: -1}
	for _, kv := range resp.Kvs {
		s.Waiters += keyspace.DecodeHolder(kv.Value).Callers()
	}
	return s, nil
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
	resp, err := c.cli.Get(tctx, c.layout.ListPrefix(prefix), clientv3.WithPrefix(), clientv3.WithLimit(MaxListKeys))
	if err != nil {
		return nil, false, unavailable("list", err)
	}
	byPrefix := map[string]int{}
	for _, kv := range resp.Kvs {
		k, pfx, ok := c.layout.ParseContender(string(kv.Key))
		if !ok {
			continue
		}
		i, seen := byPrefix[pfx]
		if !seen {
			byPrefix[pfx] = len(locks)
			h := keyspace.DecodeHolder(kv.Value)
			locks = append(locks, Status{Key: k, Held: true, Holder: h, Fence: kv.CreateRevision, Waiters: h.Callers() - 1})
			continue
		}
		s, h := &locks[i], keyspace.DecodeHolder(kv.Value)
		s.Waiters += h.Callers()
		if kv.CreateRevision < s.Fence {
			s.Holder, s.Fence = h, kv.CreateRevision
		}
	}
	return locks, resp.More, nil
}
