package coordinator

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/lockstore"
)

func TestStatusAndList(t *testing.T) {
	parallel(t)
	a, b := newSidecar(t, "pod-a"), newSidecar(t, "pod-b")
	ctx := context.Background()
	k := key(t, "flow-1/plan")
	st, err := a.c.Status(ctx, k)
	if err != nil || st.Held {
		t.Fatalf("status of a free lock: %+v, %v", st, err)
	}
	g := a.mustAcquire(t, k, "planner")
	a.mustAcquire(t, key(t, "flow-1/apply"), "applier")
	a.mustAcquire(t, key(t, "flow-2/plan"), "other")
	go b.acquire(t, k, "queued", 5*time.Second)
	waitFor(t, 5*time.Second, "a waiter", func() bool { return len(a.contenders(t, k)) == 2 })

	st, err = b.c.Status(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Held || st.Holder.Owner != "planner" || st.Fence != g.Fence || st.Waiters != 1 || !st.Holder.ExpiresAt.Equal(g.ExpiresAt) {
		t.Errorf("status %+v, want held by planner with 1 waiter", st)
	}

	locks, truncated, err := b.c.List(ctx, "flow-1/")
	if err != nil || truncated {
		t.Fatal(err, truncated)
	}
	got := map[string]Status{}
	for _, l := range locks {
		got[l.Key.String()] = l
	}
	if len(got) != 2 || got["flow-1/plan"].Waiters != 1 || got["flow-1/plan"].Holder.Owner != "planner" || got["flow-1/apply"].Holder.Owner != "applier" {
		t.Errorf("list flow-1/ = %+v", locks)
	}
	if all, _, _ := b.c.List(ctx, ""); len(all) != 3 {
		t.Errorf("list all = %d locks, want 3", len(all))
	}
	if _, _, err := b.c.List(ctx, "bad prefix"); !errors.Is(err, keyspace.ErrInvalidKey) {
		t.Errorf("bad prefix: %v", err)
	}
	a.c.Release(ctx, k, "planner")
}

// TestEtcdDown: with etcd gone, acquires answer ErrUnavailable within a
// bounded time and grant nothing; when etcd returns, the sidecar recovers
// by itself.
func TestEtcdDown(t *testing.T) {
	parallel(t)
	w := newOwnWorld(t)
	a := newSidecarOn(t, w, "pod-a", func(c *Config) { c.RequestTimeout = 500 * time.Millisecond })
	ctx := context.Background()
	k := key(t, "down")
	held := a.mustAcquire(t, k, "before")

	w.down(t)
	for _, name := range []string{"try", "wait"} {
		start := time.Now()
		wait := time.Duration(0)
		if name == "wait" {
			wait = 2 * time.Second
		}
		_, err := a.c.Acquire(ctx, AcquireRequest{Key: key(t, "other-"+name), Owner: "during", Wait: wait})
		if !errors.Is(err, ErrUnavailable) {
			t.Errorf("%s while etcd is down: %v, want ErrUnavailable", name, err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s took %v to fail", name, d)
		}
	}
	if _, err := a.c.Status(ctx, k); !errors.Is(err, ErrUnavailable) {
		t.Errorf("status while etcd is down: %v", err)
	}
	// Past the lease TTL the session is lost: the lock with it, and readiness.
	select {
	case <-held.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the holder was not told its session ended")
	}
	if err := a.c.Ready(); !errors.Is(err, ErrUnavailable) {
		t.Errorf("ready without a session: %v", err)
	}
	if _, err := a.c.Release(ctx, k, "before"); !errors.Is(err, ErrLost) {
		t.Errorf("release of the lost lock: %v, want ErrLost", err)
	}

	w.up(t)
	var err error
	waitFor(t, 15*time.Second, "ready again", func() bool { return a.c.Ready() == nil })
	var g Grant
	waitFor(t, 15*time.Second, "a grant after recovery", func() bool {
		g, err = a.acquire(t, key(t, "after"), "after", 0)
		return err == nil
	})
	if g.Fence <= held.Fence {
		t.Errorf("fence %d after restart, want > %d", g.Fence, held.Fence)
	}
	// etcd renews every lease when it restarts; the sidecar revokes the one
	// it gave up for lost, so the lost lock does not block others a TTL more.
	waitFor(t, 5*time.Second, "the lost lock's key to go", func() bool {
		st, err := a.c.Status(ctx, k)
		return err == nil && !st.Held
	})
}

func TestShutdown(t *testing.T) {
	parallel(t)
	a, b := newSidecar(t, "pod-a"), newSidecar(t, "pod-b")
	ctx := context.Background()
	k := key(t, "bye")
	b.mustAcquire(t, k, "other")
	for _, s := range []string{"one", "two", "three"} {
		a.mustAcquire(t, key(t, s), s)
	}
	waiting := make(chan error)
	go func() {
		_, err := a.c.Acquire(ctx, AcquireRequest{Key: k, Owner: "waiter", Wait: time.Minute})
		waiting <- err
	}()
	waitFor(t, 5*time.Second, "waiter queued", func() bool { return len(a.contenders(t, k)) == 2 })

	// One lease carries every lock of the sidecar.
	cs, _, err := b.raw.Contenders(ctx, a.c.Layout().Base(), 0)
	if err != nil {
		t.Fatal(err)
	}
	leases := map[lockstore.LeaseID]int{}
	for _, c := range cs {
		leases[c.Lease]++
	}
	if len(leases) != 2 {
		t.Errorf("keys of two sidecars carry %d leases, want 2: %v", len(leases), leases)
	}

	grants := make([]Grant, 0, 3)
	for _, s := range []string{"one", "two", "three"} {
		g, err := a.c.Acquire(ctx, AcquireRequest{Key: key(t, s), Owner: s}) // held: its grant again
		if err != nil {
			t.Fatal(err)
		}
		grants = append(grants, g)
	}
	a.c.HeldChanges() // read: from here the journal has only the shutdown's

	start := time.Now()
	a.c.Shutdown()
	a.revoke()
	// Every lock ends as lost to the shutdown, told to its holder and
	// listed for the state file; the journal, dropped at once, says to read
	// the held locks whole, and none are; no deadline is left to fire.
	for _, g := range grants {
		var lost *LostError
		if !errors.As(g.Err(), &lost) || lost.Reason != Shutdown {
			t.Errorf("%s after shutdown: %v, want lost (shutdown)", g.Key, g.Err())
		}
	}
	if losses := a.c.Losses(); len(losses) != 3 {
		t.Errorf("losses after shutdown: %v, want the 3 locks held", losses)
	}
	if changes, held, ok := a.c.HeldChanges(); ok || held != 0 {
		t.Errorf("journal after shutdown: %v, %d held, ok %v; want it dropped and none held", changes, held, ok)
	}
	if held, _ := a.c.HeldLocks(); len(held) != 0 {
		t.Errorf("held after shutdown: %v", held)
	}
	a.c.mu.Lock()
	armed := a.c.deadlines.queue.Len()
	a.c.unlock()
	if armed != 0 {
		t.Errorf("%d deadlines armed after shutdown", armed)
	}
	if err := <-waiting; !errors.Is(err, ErrUnavailable) {
		t.Errorf("waiter at shutdown: %v, want ErrUnavailable", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("shutdown took %v", d)
	}
	for _, s := range []string{"one", "two", "three"} {
		if keys := b.contenders(t, key(t, s)); len(keys) != 0 {
			t.Errorf("%s still held after shutdown: %v", s, keys)
		}
	}
	if keys := b.contenders(t, k); len(keys) != 1 {
		t.Errorf("contenders of %s: %v, want only b's holder", k, keys)
	}
	if _, err := a.acquire(t, key(t, "late"), "late", 0); !errors.Is(err, ErrUnavailable) {
		t.Errorf("acquire after shutdown: %v", err)
	}
	if a.c.Ready() == nil {
		t.Error("ready after shutdown")
	}
}

// TestWaitersCountCallers: waiters counts the callers waiting for a lock,
// those queued inside a sidecar behind its one contender key included, as
// every sidecar and the records in etcd tell it, and follows them as they
// come, give up and are granted.
func TestWaitersCountCallers(t *testing.T) {
	parallel(t)
	a, b, c := newSidecar(t, "pod-a"), newSidecar(t, "pod-b"), newSidecar(t, "pod-c")
	ctx := context.Background()
	k := key(t, "turns")
	a.mustAcquire(t, k, "holder")

	// wait starts a blocking acquire on s; leave ends its wait.
	type waiter struct {
		leave  context.CancelFunc
		result chan error
	}
	wait := func(s *sidecar, owner string) waiter {
		wctx, cancel := context.WithCancel(ctx)
		w := waiter{leave: cancel, result: make(chan error, 1)}
		go func() {
			_, err := s.c.Acquire(wctx, AcquireRequest{Key: k, Owner: owner, Wait: time.Minute})
			w.result <- err
		}()
		return w
	}
	waiters := func(want int, why string) {
		t.Helper()
		var got [3]int
		waitFor(t, 5*time.Second, fmt.Sprintf("%d waiters (%s)", want, why), func() bool {
			for i, s := range []*sidecar{a, b, c} {
				st, err := s.c.Status(ctx, k)
				if err != nil {
					t.Fatal(err)
				}
				got[i] = st.Waiters
			}
			return got == [3]int{want, want, want}
		})
		locks, _, err := c.c.List(ctx, "turns")
		if err != nil || len(locks) != 1 || locks[0].Waiters != want {
			t.Errorf("%s: list says %+v (%v), want %d waiters", why, locks, err, want)
		}
	}

	b1 := wait(b, "b1")
	waitFor(t, 5*time.Second, "b's contender", func() bool { return len(a.contenders(t, k)) == 2 })
	b2 := wait(b, "b2")
	waiters(2, "two callers queued on one sidecar")
	c1 := wait(c, "c1")
	waiters(3, "and one on another")

	b2.leave()
	if err := <-b2.result; !errors.Is(err, context.Canceled) {
		t.Fatalf("b2 left: %v", err)
	}
	waiters(2, "a local caller gave up")
	b3 := wait(b, "b3")
	waiters(3, "another queued behind b1")

	// handOn releases owner's lock on s and sees next granted.
	handOn := func(s *sidecar, owner string, next waiter) {
		t.Helper()
		if _, err := s.c.Release(ctx, k, owner); err != nil {
			t.Fatal(err)
		}
		if err := <-next.result; err != nil {
			t.Fatalf("the next in line after %s: %v", owner, err)
		}
	}
	handOn(a, "holder", b1)
	waiters(2, "b1 holds, b3 queues behind it on b, c1 on c")
	if _, err := b.c.Extend(ctx, k, "b1", time.Hour); err != nil {
		t.Fatal(err)
	}
	waiters(2, "b1 extended its lock")
	handOn(b, "b1", c1) // b3 queues anew, behind c1
	waiters(1, "c1 holds, b3 contends")
	handOn(c, "c1", b3)
	waiters(0, "b3 holds alone")
	if rec := b.first(t, k).Holder; rec.Owner != "b3" || rec.Queued != 0 {
		t.Errorf("b3's record %+v, want b3's with nobody queued", rec)
	}
}

// TestQueuedAsItQueues: a caller that queues here behind a waiter whose
// key is being written (its record made, saying nobody queues behind it)
// is counted in that record once the key is written. The key is noted
// with no mutex, so it is the waiter that sees the queue moved.
func TestQueuedAsItQueues(t *testing.T) {
	parallel(t)
	k := key(t, "queued-as-it-queues")
	a, b := newSidecar(t, "pod-a"), newSidecar(t, "pod-b")
	b.mustAcquire(t, k, "holder")
	writing := gate{entered: make(chan struct{}), open: make(chan struct{})}
	a.calls.queueGate.Store(&writing)
	first, second := make(chan error, 1), make(chan error, 1)
	go func() {
		_, err := a.acquire(t, k, "first", time.Minute)
		first <- err
	}()
	<-writing.entered // first's key is being written, with Queued 0
	a.calls.queueGate.Store(nil)
	go func() {
		_, err := a.acquire(t, k, "second", time.Minute)
		second <- err
	}()
	waitFor(t, 5*time.Second, "second queued behind first", func() bool {
		a.c.mu.Lock()
		defer a.c.mu.Unlock()
		e := a.c.locks[k.String()]
		return e != nil && e.queued.Load() == 1
	})
	close(writing.open)
	waitFor(t, 5*time.Second, "first's record counting second", func() bool {
		cs, _, err := a.raw.Contenders(context.Background(), a.c.Layout().LockPrefix(k), 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cs {
			if c.Holder.Owner == "first" {
				return c.Holder.Queued == 1
			}
		}
		return false
	})
	if _, err := b.c.Release(context.Background(), k, "holder"); err != nil {
		t.Fatal(err)
	}
	if err := <-first; err != nil {
		t.Fatalf("first: %v", err)
	}
	a.mustRelease(t, k, "first")
	if err := <-second; err != nil {
		t.Fatalf("second: %v", err)
	}
	a.mustRelease(t, k, "second")
}

// TestVisitHeldRunsNothingUnderTheLock: VisitHeld's callback runs with the
// engine's mutex let go (the metrics' scrape reads the held locks with it:
// under the mutex, every lock operation waited for it), so it may even
// call the coordinator.
func TestVisitHeldRunsNothingUnderTheLock(t *testing.T) {
	a := newSidecar(t, "pod-a")
	k := key(t, "visited")
	a.mustAcquire(t, k, "o")
	defer a.mustRelease(t, k, "o")
	var seen []string
	a.c.VisitHeld(func(key string, acquiredAt, expiresAt time.Time, ttl time.Duration) {
		if !a.c.mu.TryLock() {
			t.Error("VisitHeld's callback runs under the engine's mutex")
		} else {
			a.c.mu.Unlock()
		}
		if !expiresAt.After(acquiredAt) || ttl <= 0 {
			t.Errorf("visited %s: acquired %v, expires %v, ttl %v", key, acquiredAt, expiresAt, ttl)
		}
		seen = append(seen, key)
	})
	if len(seen) != 1 || seen[0] != k.String() {
		t.Fatalf("VisitHeld visited %v, want [%s]", seen, k)
	}
}

// underLock is an Observer that records whether it was called with the
// engine's mutex of c held.
type underLock struct {
	nopObserver
	c      *Coordinator
	calls  atomic.Int64
	inside atomic.Int64
}

func (o *underLock) check() {
	o.calls.Add(1)
	if !o.c.mu.TryLock() {
		o.inside.Add(1)
		return
	}
	o.c.mu.Unlock()
}

func (o *underLock) Granted(string)                      { o.check() }
func (o *underLock) Ended(string, string, time.Duration) { o.check() }
func (o *underLock) Units(string, int, bool, int)        { o.check() }

// TestObserverToldOutsideTheLock: the observer hears of grants, ends and a
// semaphore's units with the engine's mutex let go, whatever ends the
// lock (a release, a loss, the shutdown).
func TestObserverToldOutsideTheLock(t *testing.T) {
	o := &underLock{}
	a := newSidecarWith(t, newWorld(t), "pod-a", []Option{WithObserver(o)})
	o.c = a.c
	k, sem := key(t, "told"), key(t, "told-sem")
	a.mustAcquire(t, k, "o")
	a.mustRelease(t, k, "o")
	ctx := context.Background()
	if _, err := a.c.Acquire(ctx, AcquireRequest{Key: sem, Owner: "o", TTL: time.Minute, Claim: keyspace.Claim{Limit: 2}}); err != nil {
		t.Fatal(err)
	}
	a.mustAcquire(t, k, "o")
	a.c.Shutdown()
	if o.calls.Load() < 6 || o.inside.Load() != 0 {
		t.Fatalf("the observer was called %d times, %d of them under the engine's mutex; want 6 or more, none under it", o.calls.Load(), o.inside.Load())
	}
}
