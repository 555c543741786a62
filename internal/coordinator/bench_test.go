package coordinator

import (
	"context"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// BenchmarkCycle measures one acquire and release of a free lock by one
// caller, with the raw etcd transactions that are its limit and Baton's
// own transactions sent directly side by side on the same etcd: what the
// coordinator adds to a grant, without HTTP.
// make bench measures the whole sidecar against raw etcd; this is for
// pprof and -benchmem.
func BenchmarkCycle(b *testing.B) {
	s := newSidecar(b, "pod-a")
	ctx := context.Background()
	b.Run("raw-txn", func(b *testing.B) {
		l, err := s.cli.Grant(ctx, 60)
		if err != nil {
			b.Fatal(err)
		}
		k := s.c.Layout().ContenderKey(key(b, "raw"), l.ID)
		b.ReportAllocs()
		for b.Loop() {
			r, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
				Then(clientv3.OpPut(k, "", clientv3.WithLease(l.ID))).Commit()
			if err != nil || !r.Succeeded {
				b.Fatalf("acquire: %v %v", err, r)
			}
			r, err = s.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", r.Header.Revision)).
				Then(clientv3.OpDelete(k)).Commit()
			if err != nil || !r.Succeeded {
				b.Fatalf("release: %v %v", err, r)
			}
		}
	})
	b.Run("baton-txn", func(b *testing.B) {
		l, err := s.cli.Grant(ctx, 60)
		if err != nil {
			b.Fatal(err)
		}
		k := key(b, "shaped")
		ek, pfx := s.c.Layout().ContenderKey(k, l.ID), s.c.Layout().LockPrefix(k)
		now := s.c.now()
		rec := s.c.record("o", now, now.Add(s.c.cfg.DefaultTTL)).Encode()
		b.ReportAllocs()
		for b.Loop() {
			r, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(pfx), "=", 0).WithPrefix()).
				Then(clientv3.OpPut(ek, rec, clientv3.WithLease(l.ID))).
				Else(clientv3.OpGet(pfx, clientv3.WithFirstCreate()...)).Commit()
			if err != nil || !r.Succeeded {
				b.Fatalf("acquire: %v %v", err, r)
			}
			r, err = s.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(ek), "=", r.Header.Revision)).
				Then(clientv3.OpDelete(ek)).Commit()
			if err != nil || !r.Succeeded {
				b.Fatalf("release: %v %v", err, r)
			}
		}
	})
	b.Run("coordinator", func(b *testing.B) {
		k := key(b, "cycle")
		b.ReportAllocs()
		for b.Loop() {
			if _, err := s.c.Acquire(ctx, AcquireRequest{Key: k, Owner: "o"}); err != nil {
				b.Fatal(err)
			}
			if _, err := s.c.Release(ctx, k, "o"); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkLocalQueueBurst measures what publishing a sidecar's local
// queue costs etcd: 16 callers of one sidecar queue for a lock held
// elsewhere, then all give up. Reported: the sidecar's etcd transactions
// per burst (its contender key's put and delete are 2; the rest write the
// queue's length into the key's record).
func BenchmarkLocalQueueBurst(b *testing.B) {
	a, s := newSidecar(b, "pod-a"), newSidecar(b, "pod-b")
	ctx := context.Background()
	k := key(b, "burst")
	if _, err := a.c.Acquire(ctx, AcquireRequest{Key: k, Owner: "holder"}); err != nil {
		b.Fatal(err)
	}
	queued := func() int {
		s.c.mu.Lock()
		defer s.c.mu.Unlock()
		if e := s.c.locks[k.String()]; e != nil && e.rec != nil {
			return e.queued
		}
		return -1
	}
	const callers = 16
	txns := s.calls.Txns()
	for b.Loop() {
		wctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{}, callers)
		for i := range callers {
			go func() {
				_, _ = s.c.Acquire(wctx, AcquireRequest{Key: k, Owner: fmt.Sprintf("c%d", i), Wait: time.Minute})
				done <- struct{}{}
			}()
		}
		waitFor(b, 10*time.Second, "the burst queued", func() bool { return queued() == callers-1 })
		time.Sleep(2 * recordDelay) // the record says so
		cancel()
		for range callers {
			<-done
		}
		time.Sleep(2 * recordDelay)
	}
	b.ReportMetric(float64(s.calls.Txns()-txns)/float64(b.N), "txns/burst")
}
