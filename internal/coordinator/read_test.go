package coordinator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestConcurrentRefusalsShareReads: many tries at once on a lock held by
// another sidecar are all refused, naming the holder, with far fewer etcd
// reads than tries; once the holder has released, the next try is granted
// (no read that began before the release answers it).
func TestConcurrentRefusalsShareReads(t *testing.T) {
	parallel(t)
	a, b := newSidecar(t, "pod-a"), newSidecar(t, "pod-b")
	k := key(t, "storm")
	a.mustAcquire(t, k, "running")
	if _, err := b.acquire(t, k, "warm-up", 0); err == nil {
		t.Fatal("granted a held lock")
	}
	const n = 64
	b.calls.readDelay.Store(int64(20 * time.Millisecond)) // each answer's way back, on any store
	ranges := b.calls.Reads()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			_, err := b.acquire(t, k, fmt.Sprintf("dup-%d", i), 0)
			var he *HeldError
			if !errors.As(err, &he) || he.Holder.Owner != "running" {
				errs <- fmt.Errorf("try %d: %w; want refused naming the holder", i, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	reads := b.calls.Reads() - ranges
	t.Logf("%d concurrent refusals, %d etcd reads", n, reads)
	if reads >= n/2 {
		t.Errorf("%d reads for %d concurrent refusals; want them shared", reads, n)
	}

	if _, err := a.c.Release(context.Background(), k, "running"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.acquire(t, k, "next", 0); err != nil {
		t.Fatalf("try after the release: %v", err)
	}
}

// TestRefusalNeverPredatesTheQuestion: a try that asks while another try
// of the same lock is in flight, its read made while the lock was held,
// is not answered by that read: the lock was released before it asked,
// and it is granted.
func TestRefusalNeverPredatesTheQuestion(t *testing.T) {
	parallel(t)
	a, b := newSidecar(t, "pod-a"), newSidecar(t, "pod-b")
	k := key(t, "asked-after")
	a.mustAcquire(t, k, "running")
	if _, err := b.acquire(t, k, "warm-up", 0); !errors.Is(err, ErrHeld) {
		t.Fatalf("a try of a held lock: %v", err)
	}
	gate := make(chan struct{}) // the first try's answer is on its way until it closes
	b.calls.answerGate.Store(&gate)
	before := b.calls.Reads()
	first := make(chan error, 1)
	go func() {
		_, err := b.acquire(t, k, "first", 0)
		first <- err
	}()
	waitFor(t, 5*time.Second, "the first try's read made", func() bool { return b.calls.Reads() > before })
	a.mustRelease(t, k, "running")
	second := make(chan error, 1)
	go func() {
		_, err := b.acquire(t, k, "second", 0)
		second <- err
	}()
	time.Sleep(100 * time.Millisecond) // the second try asks, and waits for the first's outcome
	b.calls.answerGate.Store(nil)
	close(gate)
	if err := <-second; err != nil {
		t.Errorf("a try that asked after the release: %v; want granted", err)
	}
	if err := <-first; !errors.Is(err, ErrHeld) {
		t.Errorf("the try that asked while the lock was held: %v; want refused", err)
	}
}

// TestSharedReadHonoursTheCallersContext: a caller that joined a read gives
// up when its context ends.
func TestSharedReadHonoursTheCallersContext(t *testing.T) {
	parallel(t)
	a := newSidecar(t, "pod-a")
	k := key(t, "ctx")
	// A read in flight that never ends, as far as the caller can tell.
	r := &sharedRead{done: make(chan struct{})}
	a.c.reads.mu.Lock()
	a.c.reads.inflight[k.String()] = r
	a.c.reads.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := a.c.reads.first(ctx, k); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want the context's", err)
	}
}
