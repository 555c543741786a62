package coordinator

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/keyspace"
)

// events reads a watch's events, checking that revisions never go back.
type events struct {
	t   *testing.T
	ch  <-chan LockEvent
	rev int64
}

func (e *events) next() LockEvent {
	e.t.Helper()
	select {
	case ev, ok := <-e.ch:
		if !ok {
			e.t.Fatal("the watch ended")
		}
		if ev.Rev < e.rev {
			e.t.Fatalf("revision went back: %+v after %d", ev, e.rev)
		}
		e.rev = ev.Rev
		return ev
	case <-time.After(10 * time.Second):
		e.t.Fatal("no event in 10s")
	}
	return LockEvent{}
}

// expect reads the next event and checks its kind (and, when not 0, its
// fence).
func (e *events) expect(kind EventKind, fence int64) LockEvent {
	e.t.Helper()
	ev := e.next()
	if ev.Kind != kind || (fence != 0 && ev.Fence != fence) {
		e.t.Fatalf("event %+v, want %s of fence %d", ev, kind, fence)
	}
	return ev
}

func observe(t *testing.T, s *sidecar, k keyspace.Key, prefix string) *events {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ch, err := s.c.Observe(ctx, k, prefix)
	if err != nil {
		t.Fatal(err)
	}
	return &events{t: t, ch: ch}
}

// TestObserveOneLock: a watch of one lock starts with its state and then
// tells every grant, release, expiry, loss and change of its waiters, with
// revisions that never go back: leader observation.
func TestObserveOneLock(t *testing.T) {
	parallel(t)
	a, b := newSidecar(t, "pod-a"), newSidecar(t, "pod-b")
	k := key(t, "leader")
	ev := observe(t, b, k, "")
	if st := ev.expect(EventState, 0); st.Status.Held || st.Key != k {
		t.Fatalf("initial state %+v, want free", st)
	}
	ev.expect(EventSynced, 0)

	g := a.mustAcquire(t, k, "leader-1")
	if e := ev.expect(EventGranted, g.Fence); e.Holder.Owner != "leader-1" || e.Holder.Pod != "pod-a" || e.Rev != g.Fence {
		t.Errorf("granted %+v", e)
	}
	waited := make(chan Grant, 1)
	go func() {
		g, err := b.acquire(t, k, "leader-2", 10*time.Second)
		if err != nil {
			t.Error(err)
		}
		waited <- g
	}()
	if e := ev.expect(EventQueued, 0); e.Status.Waiters != 1 {
		t.Errorf("queued %+v, want 1 waiter", e)
	}
	a.mustRelease(t, k, "leader-1")
	ev.expect(EventReleased, g.Fence)
	g2 := <-waited
	ev.expect(EventGranted, g2.Fence)
	b.mustRelease(t, k, "leader-2")
	ev.expect(EventReleased, g2.Fence)

	// An expiry, then a lost session.
	g3, err := a.c.Acquire(context.Background(), AcquireRequest{Key: k, Owner: "short", TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ev.expect(EventGranted, g3.Fence)
	ev.expect(EventExpired, g3.Fence)
	g4 := a.mustAcquire(t, k, "crashing")
	ev.expect(EventGranted, g4.Fence)
	a.expire(t)
	ev.expect(EventLost, g4.Fence)
}

// TestObservePrefix: a watch of a prefix tells the state of every lock
// under it, then the changes of those and of new ones, and nothing of
// other locks; a semaphore's grants are told one by one.
func TestObservePrefix(t *testing.T) {
	parallel(t)
	a := newSidecar(t, "pod-a")
	held := a.mustAcquire(t, key(t, "tenant-a/one"), "o1")
	a.mustAcquire(t, key(t, "tenant-b/other"), "o2")
	ev := observe(t, a, keyspace.Key{}, "tenant-a/")
	if st := ev.expect(EventState, 0); st.Key.String() != "tenant-a/one" || st.Status.Fence != held.Fence {
		t.Fatalf("state %+v", st)
	}
	ev.expect(EventSynced, 0)
	a.mustAcquire(t, key(t, "tenant-b/more"), "o3") // not watched
	sem := key(t, "tenant-a/pipelines")
	u1 := a.mustClaim(t, sem, "p1", units(2, 1))
	u2 := a.mustClaim(t, sem, "p2", units(2, 1))
	ev.expect(EventGranted, u1.Fence)
	if e := ev.expect(EventGranted, u2.Fence); e.Status.HeldUnits != 2 || e.Status.Limit != 2 || len(e.Status.Holders) != 2 {
		t.Errorf("second unit: status %+v", e.Status)
	}
	a.mustRelease(t, sem, "p1")
	ev.expect(EventReleased, u1.Fence)
	if _, err := a.c.Observe(context.Background(), keyspace.Key{}, "bad prefix"); err == nil {
		t.Error("a watch of an invalid prefix started")
	}
}

// TestObserveAcrossAGap: a watch that breaks while etcd is out of reach
// (on the memory store; etcd's client resumes its watch where it was)
// reads again once etcd is back and follows on: the end of the holder's
// lock is told once, and the next grant.
func TestObserveAcrossAGap(t *testing.T) {
	parallel(t)
	w := newOwnWorld(t)
	a := newSidecarOn(t, w, "pod-a")
	k := key(t, "gap")
	g := a.mustAcquire(t, k, "holder")
	ev := observe(t, a, k, "")
	ev.expect(EventState, 0)
	ev.expect(EventSynced, 0)
	w.down(t)
	w.up(t)
	waitFor(t, 10*time.Second, "the sidecar ready again", func() bool { return a.c.Ready() == nil })
	// Lost with the outage, or released now: a release that etcd, just back,
	// did not take yet is asked again.
	waitFor(t, 10*time.Second, "the holder's lock let go", func() bool {
		_, err := a.c.Release(context.Background(), k, "holder")
		return !errors.Is(err, ErrUnavailable)
	})
	next, err := a.c.Acquire(context.Background(), AcquireRequest{Key: k, Owner: "after", Wait: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ended := 0
	for e := ev.next(); e.Kind != EventGranted || e.Fence != next.Fence; e = ev.next() {
		switch {
		case e.Kind == EventSynced, e.Kind == EventQueued: // the next caller may queue before the holder's end
		case e.Fence == g.Fence && (e.Kind == EventLost || e.Kind == EventReleased):
			ended++
		default:
			t.Fatalf("event %+v before the grant of fence %d", e, next.Fence)
		}
	}
	if ended != 1 {
		t.Errorf("the end of fence %d told %d times", g.Fence, ended)
	}
}

// TestObserverResync: reading again after a gap tells the difference:
// holders gone are told ended, new ones granted, all marked resynced,
// then synced at the new revision.
func TestObserverResync(t *testing.T) {
	parallel(t)
	a := newSidecar(t, "pod-a")
	k := key(t, "resync")
	old := a.mustAcquire(t, k, "old")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs, rev, err := a.raw.Snapshot(ctx, a.c.Layout().LockPrefix(k))
	if err != nil {
		t.Fatal(err)
	}
	o := &observer{c: a.c, base: a.c.Layout().LockPrefix(k), one: k, out: make(chan LockEvent, 16), lines: map[string]*obsLine{}}
	if !o.sync(ctx, cs, rev, false) {
		t.Fatal("sync ended")
	}
	a.mustRelease(t, k, "old")
	b := newSidecar(t, "pod-b")
	next := b.mustAcquire(t, k, "new")
	cs, rev, err = a.raw.Snapshot(ctx, a.c.Layout().LockPrefix(k))
	if err != nil {
		t.Fatal(err)
	}
	if !o.sync(ctx, cs, rev, true) {
		t.Fatal("sync ended")
	}
	close(o.out)
	ev := &events{t: t, ch: o.out}
	ev.expect(EventState, 0)
	ev.expect(EventSynced, 0)
	for _, want := range []struct {
		kind  EventKind
		fence int64
	}{{EventReleased, old.Fence}, {EventGranted, next.Fence}, {EventSynced, 0}} {
		if e := ev.expect(want.kind, want.fence); e.Kind != EventSynced && !e.Resynced {
			t.Errorf("%+v is not marked resynced", e)
		}
	}
	if ev.rev != rev {
		t.Errorf("synced at %d, want the read's %d", ev.rev, rev)
	}
}
