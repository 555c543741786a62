package mirror

import (
	"context"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	batonv1 "github.com/baton-dev/baton/api/v1alpha1"
)

// follow keeps the view in step with etcd until ctx ends: a full read,
// then a watch from the revision after it; after a watch error (a
// compaction among them) it reads everything again. Every lock that may
// have changed is sent to the reconciler, and after a full read so is
// every Lock object, so that nothing stale survives a restart or a gap.
func (m *Mirror) follow(ctx context.Context) error {
	for ctx.Err() == nil {
		rev, err := m.load(ctx)
		if err != nil {
			m.log.Error(err, "cannot read the locks from etcd; retrying")
		} else if err := m.watch(ctx, rev+1); err != nil && ctx.Err() == nil {
			m.log.Error(err, "etcd watch ended; reading everything again")
		}
		select {
		case <-ctx.Done():
		case <-time.After(m.cfg.RetryInterval):
		}
	}
	return nil
}

// load reads every contender key of the mirrored scopes at one revision.
func (m *Mirror) load(ctx context.Context) (int64, error) {
	var (
		kvs []*mvccpb.KeyValue
		rev int64
	)
	for _, p := range m.cfg.prefixes() {
		opts := []clientv3.OpOption{clientv3.WithPrefix()}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		tctx, cancel := context.WithTimeout(ctx, m.cfg.RequestTimeout)
		resp, err := m.etcd.Get(tctx, p, opts...)
		cancel()
		if err != nil {
			return 0, fmt.Errorf("read %s: %w", p, err)
		}
		rev = resp.Header.Revision
		kvs = append(kvs, resp.Kvs...)
	}
	refs := m.view.reset(kvs, rev)
	var objs batonv1.LockList
	if err := m.client.List(ctx, &objs); err != nil {
		return 0, fmt.Errorf("list Lock objects: %w", err)
	}
	for _, o := range objs.Items {
		refs = append(refs, objectRef{namespace: o.Namespace, name: o.Name})
	}
	var leases coordinationv1.LeaseList
	if err := m.live.List(ctx, &leases, client.MatchingLabels{LabelManagedBy: ManagedBy}, client.HasLabels{LabelElection}); err != nil {
		return 0, fmt.Errorf("list the elections' Leases: %w", err)
	}
	for _, l := range leases.Items {
		refs = append(refs, objectRef{namespace: l.Namespace, name: l.Name, election: true})
	}
	for _, ref := range refs {
		m.enqueue(ctx, ref)
	}
	m.log.Info("read the locks from etcd", "revision", rev, "contenders", len(kvs), "objects", len(objs.Items))
	return rev, nil
}

// watch applies etcd's changes from revision from until the watch fails.
func (m *Mirror) watch(ctx context.Context, from int64) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	prefixes := m.cfg.prefixes()
	merged := make(chan clientv3.WatchResponse)
	for _, p := range prefixes {
		go func() {
			for resp := range m.etcd.Watch(wctx, p, clientv3.WithPrefix(), clientv3.WithRev(from)) {
				select {
				case merged <- resp:
				case <-wctx.Done():
					return
				}
			}
			select {
			case merged <- clientv3.WatchResponse{Canceled: true}:
			case <-wctx.Done():
			}
		}()
	}
	for {
		var resp clientv3.WatchResponse
		select {
		case <-ctx.Done():
			return nil
		case resp = <-merged:
		}
		if resp.CompactRevision != 0 {
			return fmt.Errorf("the watch fell behind a compaction at revision %d", resp.CompactRevision)
		}
		if err := resp.Err(); err != nil {
			return err
		}
		if resp.Canceled {
			return fmt.Errorf("the watch was closed")
		}
		for _, ev := range resp.Events {
			var (
				ref objectRef
				ok  bool
			)
			if ev.Type == clientv3.EventTypeDelete {
				ref, ok = m.view.remove(string(ev.Kv.Key), ev.Kv.ModRevision)
			} else {
				ref, ok = m.view.put(ev.Kv)
			}
			if ok {
				m.enqueue(ctx, ref)
			}
		}
	}
}

// enqueue asks the reconciler to look at the Lock ref; of an election,
// the election's to look at its Lease, and the reconciler at its Lock.
func (m *Mirror) enqueue(ctx context.Context, ref objectRef) {
	if !m.cfg.inScope(ref.namespace) {
		return
	}
	send := func(obj client.Object, name string, to chan<- event.GenericEvent) {
		obj.SetNamespace(ref.namespace)
		obj.SetName(name)
		select {
		case to <- event.GenericEvent{Object: obj}:
		case <-ctx.Done():
		}
	}
	if !ref.election {
		send(&batonv1.Lock{}, ref.name, m.events)
		return
	}
	send(&coordinationv1.Lease{}, ref.name, m.leases)
	send(&batonv1.Lock{}, electionPrefix+ref.name, m.events)
}
