package coordinator

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// BenchmarkCycle measures one acquire and release of a free lock by one
// caller: on the in-memory store, what the coordinator's own logic costs;
// with BATON_STORE=etcd, with etcd's round trips (package etcdstore
// measures those alone, beside raw etcd transactions). make bench measures
// the whole sidecar against raw etcd; this is for pprof and -benchmem.
func BenchmarkCycle(b *testing.B) {
	s := newSidecar(b, "pod-a")
	ctx := context.Background()
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
}

// BenchmarkLocalQueueBurst measures what publishing a sidecar's local
// queue costs etcd: 16 callers of one sidecar queue for a lock held
// elsewhere, then all give up. Reported: the sidecar's writes per burst
// (its contender key's put and delete are 2; the rest write the queue's
// length into the key's record).
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
			return int(e.queued.Load())
		}
		return -1
	}
	const callers = 16
	txns := s.calls.Writes()
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
	b.ReportMetric(float64(s.calls.Writes()-txns)/float64(b.N), "writes/burst")
}
