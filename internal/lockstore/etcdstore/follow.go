package etcdstore

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-dev/baton/internal/lockstore"
)

// Follower hears the value of one key as it changes (see Follow).
type Follower struct {
	// Set is told the key's value (nil when it does not exist) and the
	// revision it was read at: once at start, again after every change.
	Set func(value []byte, rev int64)
	// Fail is told that etcd refuses this store's user the key
	// (lockstore.ErrPermissionDenied, naming user and key). Until the next
	// Set, the value is unknown.
	Fail func(err error)
}

// Follow reads key, then watches it, telling f its value, until ctx ends.
// A read that fails (etcd out of reach, a refusal) or a watch that ends
// (compaction, a lost leader) is tried again after retry, reading the
// value afresh, so that no change is missed. It is how a sidecar follows
// its scope's lock policy.
func (s *Store) Follow(ctx context.Context, key string, retry time.Duration, f Follower) {
	for ctx.Err() == nil {
		err := s.followOnce(ctx, key, f)
		if err != nil && isDenial(err) {
			who := "an etcd client without a user"
			if s.user != "" {
				who = fmt.Sprintf("etcd user %q", s.user)
			}
			f.Fail(fmt.Errorf("%w: %s may not read %q: %w", lockstore.ErrPermissionDenied, who, key, err))
		}
		sleepCtx(ctx, retry)
	}
}

// followOnce reads key and watches it from there until the watch ends,
// saying why it ended.
func (s *Store) followOnce(ctx context.Context, key string, f Follower) error {
	gctx, cancel := context.WithTimeout(ctx, s.commits.timeout)
	resp, err := s.cli.Get(gctx, key)
	cancel()
	if err != nil {
		return err
	}
	rev := resp.Header.Revision
	var value []byte
	if len(resp.Kvs) > 0 {
		value = resp.Kvs[0].Value
	}
	f.Set(value, rev)
	wctx, stop := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer stop()
	for wr := range s.cli.Watch(wctx, key, clientv3.WithRev(rev+1)) {
		if err := wr.Err(); err != nil {
			return err
		}
		for _, ev := range wr.Events {
			rev = ev.Kv.ModRevision
			if ev.Type == clientv3.EventTypeDelete {
				f.Set(nil, rev)
			} else {
				f.Set(ev.Kv.Value, rev)
			}
		}
	}
	return ctx.Err()
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
