package etcdstore

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-dev/baton/internal/lockstore"
)

// Watch implements lockstore.Store with one etcd watch on prefix. It asks
// for no previous values: etcd would read each deleted key's last version
// from its backend for every watching sidecar, and revoking a lease with
// thousands of keys would then stall it; the key and the delete's revision
// are enough. Watching from the current revision matters too: etcd serves
// a watch that starts in the past only every 100ms. The watch requires a
// leader, so a member cut off from the others ends it rather than going
// quiet.
func (s *Store) Watch(ctx context.Context, prefix string, from int64) <-chan lockstore.WatchResponse {
	return s.watch(ctx, prefix, from, false, clientv3.WithFilterPut())
}

// WatchAll implements lockstore.Store: Watch with the writes, whose values
// etcd sends with the events anyway.
func (s *Store) WatchAll(ctx context.Context, prefix string, from int64) <-chan lockstore.WatchResponse {
	return s.watch(ctx, prefix, from, true)
}

// Snapshot implements lockstore.Store.
func (s *Store) Snapshot(ctx context.Context, prefix string) ([]lockstore.Contender, int64, error) {
	resp, err := s.cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, 0, s.refusal(err, prefix)
	}
	cs := make([]lockstore.Contender, len(resp.Kvs))
	for i, kv := range resp.Kvs {
		cs[i] = contenderOf(kv)
	}
	return cs, resp.Header.Revision, nil
}

// watch runs a watch on prefix; all reports the writes too (Changes).
func (s *Store) watch(ctx context.Context, prefix string, from int64, all bool, more ...clientv3.OpOption) <-chan lockstore.WatchResponse {
	opts := append([]clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithCreatedNotify(), clientv3.WithProgressNotify()}, more...)
	if from > 0 {
		opts = append(opts, clientv3.WithRev(from))
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	wch := s.cli.Watch(wctx, prefix, opts...)
	out := make(chan lockstore.WatchResponse)
	go func() {
		defer cancel()
		defer close(out)
		for resp := range wch {
			r, last := responseOf(resp, all)
			r.Err = s.refusal(r.Err, prefix)
			select {
			case out <- r:
			case <-ctx.Done():
				return
			}
			if last {
				return
			}
		}
	}()
	return out
}

// responseOf translates one etcd watch response, with its Changes when
// all; last says the watch ends with it. Rev is the header's revision only where etcd promises that
// nothing up to it is left to send (creation, progress notices): a
// response to a watch catching up carries the store's revision in its
// header with only some of the events up to it.
func responseOf(resp clientv3.WatchResponse, all bool) (r lockstore.WatchResponse, last bool) {
	switch {
	case resp.CompactRevision != 0:
		r.Compacted = true
		return r, true
	case resp.Err() != nil:
		r.Err = resp.Err()
		return r, true
	case resp.Created:
		r.Established, r.Rev = true, resp.Header.Revision
		return r, false
	case resp.IsProgressNotify():
		r.Rev = resp.Header.Revision
		return r, false
	}
	for _, ev := range resp.Events {
		r.Rev = ev.Kv.ModRevision
		if ev.Type == clientv3.EventTypeDelete {
			r.Deleted = append(r.Deleted, lockstore.Deletion{Key: string(ev.Kv.Key), Rev: ev.Kv.ModRevision})
			if !all {
				continue
			}
			r.Changes = append(r.Changes, lockstore.Change{Rev: ev.Kv.ModRevision, Deleted: true, Contender: lockstore.Contender{Key: string(ev.Kv.Key)}})
			continue
		}
		r.Changes = append(r.Changes, lockstore.Change{Rev: ev.Kv.ModRevision, Contender: contenderOf(ev.Kv)})
	}
	return r, false
}
