package coordinator

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/lockstore"
)

func TestRelease(t *testing.T) {
	parallel(t)
	k := key(t, "rel")
	a, b := newSidecar(t, "pod-a"), newSidecar(t, "pod-b")
	ctx := context.Background()

	if _, err := a.c.Release(ctx, k, "nobody"); !errors.Is(err, ErrNotHeld) {
		t.Errorf("release of a free lock: %v, want ErrNotHeld", err)
	}
	g := a.mustAcquire(t, k, "owner")
	if _, err := a.c.Release(ctx, k, "intruder"); !errors.Is(err, ErrNotOwner) {
		t.Errorf("release by another owner: %v, want ErrNotOwner", err)
	}
	if _, err := b.c.Release(ctx, k, "intruder"); !errors.Is(err, ErrNotOwner) {
		t.Errorf("release by another owner through another sidecar: %v, want ErrNotOwner", err)
	}
	if _, err := b.c.Release(ctx, k, "owner"); !errors.Is(err, ErrNotOwner) {
		t.Errorf("release through the wrong sidecar: %v, want ErrNotOwner", err)
	}
	time.Sleep(20 * time.Millisecond)
	r, err := a.c.Release(ctx, k, "owner")
	if err != nil {
		t.Fatal(err)
	}
	if r.Fence != g.Fence || r.HeldFor < 20*time.Millisecond {
		t.Errorf("released %+v, want fence %d and held_for >= 20ms", r, g.Fence)
	}
	select {
	case <-g.Done():
		if err := g.Err(); err != nil {
			t.Errorf("Err() after a release = %v, want nil", err)
		}
	default:
		t.Error("Grant.Done still open after release")
	}
	if keys := a.contenders(t, k); len(keys) != 0 {
		t.Errorf("keys after release: %v", keys)
	}
	if _, err := a.c.Release(ctx, k, "owner"); !errors.Is(err, ErrNotHeld) {
		t.Errorf("second release: %v, want ErrNotHeld", err)
	}
}

// TestReleaseComparesCreateRevision is etcd issue #22082: a release must not
// delete a newer key that sits under the same name.
func TestReleaseComparesCreateRevision(t *testing.T) {
	parallel(t)
	k := key(t, "cmp")
	a := newSidecar(t, "pod-a")
	ctx := context.Background()
	g := a.mustAcquire(t, k, "old")
	keys := a.contenders(t, k)
	// Someone deletes and re-creates the same key: a new lock under our name.
	a.deleteKey(t, keys[0])
	put, err := a.raw.Queue(a.c.Layout().LockPrefix(k), lockstore.Put{Key: keys[0], Lease: a.session(t).ID(), Record: keyspace.Holder{Owner: "newer"}})
	if err != nil || !put.OK {
		t.Fatalf("re-create: %+v, %v", put, err)
	}
	_, err = a.c.Release(ctx, k, "old")
	var le *LostError
	if !errors.As(err, &le) || le.Fence != g.Fence {
		t.Fatalf("release = %v, want a LostError for fence %d", err, g.Fence)
	}
	if ok, err := a.raw.Holds(ctx, keys[0], put.Rev); err != nil || !ok {
		t.Fatalf("the newer key was touched: %v %v", ok, err)
	}
	a.deleteKey(t, keys[0])
}

func TestExpiry(t *testing.T) {
	parallel(t)
	k := key(t, "short")
	a, b := newSidecar(t, "pod-a"), newSidecar(t, "pod-b")
	ctx := context.Background()
	g, err := a.c.Acquire(ctx, AcquireRequest{Key: k, Owner: "slow", TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// A waiter elsewhere gets it when the deadline passes: the first
	// grant's, which its acquire may have returned well after on a busy
	// machine.
	g2, err := b.c.Acquire(ctx, AcquireRequest{Key: k, Owner: "next", Wait: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if early := time.Until(g.ExpiresAt); early > 0 {
		t.Errorf("granted %v before the first grant's 1s deadline", early)
	}
	if g2.Fence <= g.Fence {
		t.Errorf("fence %d after %d", g2.Fence, g.Fence)
	}
	<-g.Done()
	if le := (*LostError)(nil); !errors.As(g.Err(), &le) || le.Reason != Expired {
		t.Errorf("Err() after the deadline = %v, want lost (expired)", g.Err())
	}
	_, err = a.c.Release(ctx, k, "slow")
	var le *LostError
	if !errors.As(err, &le) || le.Reason != Expired || le.Fence != g.Fence {
		t.Errorf("release after expiry: %v, want lost (expired)", err)
	}
	if _, err := a.c.Extend(ctx, k, "slow", time.Minute); !errors.Is(err, ErrLost) {
		t.Errorf("extend after expiry: %v, want ErrLost", err)
	}
	// The same owner may ask again explicitly and gets a new fence.
	if _, err := b.c.Release(ctx, k, "next"); err != nil {
		t.Fatal(err)
	}
	g3 := a.mustAcquire(t, k, "slow")
	if g3.Fence <= g2.Fence {
		t.Errorf("new grant fence %d, want > %d", g3.Fence, g2.Fence)
	}
}

func TestExtend(t *testing.T) {
	parallel(t)
	k := key(t, "long")
	a, b := newSidecar(t, "pod-a"), newSidecar(t, "pod-b")
	ctx := context.Background()
	g, err := a.c.Acquire(ctx, AcquireRequest{Key: k, Owner: "job", TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.c.Extend(ctx, k, "other", time.Minute); !errors.Is(err, ErrNotOwner) {
		t.Errorf("extend by another owner: %v", err)
	}
	if _, err := a.c.Extend(ctx, k, "job", 48*time.Hour); !errors.Is(err, ErrInvalid) {
		t.Errorf("extend past max hold: %v", err)
	}
	for i := 0; i < 3; i++ {
		time.Sleep(800 * time.Millisecond)
		e, err := a.c.Extend(ctx, k, "job", 2*time.Second)
		if err != nil {
			t.Fatalf("extend %d: %v", i, err)
		}
		if e.Fence != g.Fence || !e.ExpiresAt.After(g.ExpiresAt) {
			t.Errorf("extended grant %+v", e)
		}
	}
	// Held 2.4s on a 2s ttl; others see the new deadline.
	_, err = b.acquire(t, k, "other", 0)
	var he *HeldError
	if !errors.As(err, &he) || !he.Holder.ExpiresAt.After(g.ExpiresAt) {
		t.Fatalf("refusal %v, want the extended deadline", err)
	}
	if _, err := a.c.Release(ctx, k, "job"); err != nil {
		t.Fatal(err)
	}
}

// TestReleaseWaitsForAnExtendInFlight: a release that comes while a
// renewal of the lock is in flight (a hold's renewal as its caller lets
// go, as baton run does when its command ends) waits for it and then
// releases. Refused, the caller would have gone on believing the lock
// free while it stayed held.
func TestReleaseWaitsForAnExtendInFlight(t *testing.T) {
	parallel(t)
	k := key(t, "renewed")
	a := newSidecar(t, "pod-a")
	ctx := context.Background()
	g := a.mustAcquire(t, k, "job")
	held := gate{entered: make(chan struct{}), open: make(chan struct{})}
	a.calls.updateGate.Store(&held)
	extended := extending(a, k, "job")
	<-held.entered // the extend's write is in flight
	a.calls.updateGate.Store(nil)
	released := make(chan error, 1)
	go func() {
		_, err := a.c.Release(ctx, k, "job")
		released <- err
	}()
	select {
	case err := <-released:
		t.Fatalf("the release ended while the extend was in flight: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(held.open)
	if err := <-extended; err != nil {
		t.Fatalf("extend: %v", err)
	}
	if err := <-released; err != nil {
		t.Fatalf("release after the extend: %v", err)
	}
	if r, err := a.c.Release(ctx, k, "job"); !errors.Is(err, ErrNotHeld) {
		t.Errorf("a second release: %+v, %v; want not held", r, err)
	}
	if keys := a.contenders(t, k); len(keys) != 0 {
		t.Errorf("keys left after the release of fence %d: %v", g.Fence, keys)
	}
}

// TestDeletedAsExtendedIsNoticed: the lock's key deleted (a force
// release) just after an extend's write went in, before the extend ended.
// The watch hears the delete while the change is in flight, when a delete
// may be the change's own; the extend's end must then have the lock lost,
// not held in silence until its next renewal or its deadline.
func TestDeletedAsExtendedIsNoticed(t *testing.T) {
	parallel(t)
	k := key(t, "extended")
	a := newSidecar(t, "pod-a")
	g := a.mustAcquire(t, k, "job")
	keys := a.contenders(t, k)
	written := gate{entered: make(chan struct{}), open: make(chan struct{})}
	a.calls.updatedGate.Store(&written)
	extended := extending(a, k, "job")
	<-written.entered // the extend's write is in; the extend has not ended
	a.calls.updatedGate.Store(nil)
	a.deleteKey(t, keys[0])
	waitFor(t, 5*time.Second, "the watch to hear the delete", func() bool {
		a.c.mu.Lock()
		defer a.c.unlock()
		h := a.c.locks[k.String()].held
		return h != nil && h.end != nil && h.end.goneAt != 0
	})
	close(written.open)
	if err := <-extended; err != nil {
		t.Fatalf("extend: %v", err)
	}
	wantLost(t, g, ForceReleased, "the holder was not told its key was deleted as it was extended")
}

// TestForceReleasedAsExtendedHere: a force release through the holder's
// own sidecar, just after an extend's write went in and before the extend
// ended, is not taken in at once (the holder's change is in flight), and
// still loses the lock soon after the extend ends, though the lock is
// young (its watch delay is a minute): the delete reaches onDelete, which
// loses it.
func TestForceReleasedAsExtendedHere(t *testing.T) {
	parallel(t)
	k := key(t, "forced-as-extended")
	a := newSidecar(t, "pod-a", func(c *Config) { c.WatchDelay = time.Minute })
	g := a.mustAcquire(t, k, "job")
	written := gate{entered: make(chan struct{}), open: make(chan struct{})}
	a.calls.updatedGate.Store(&written)
	extended := extending(a, k, "job")
	<-written.entered // the extend's write is in; the extend has not ended
	a.calls.updatedGate.Store(nil)
	if _, err := a.c.ForceRelease(context.Background(), k, g.Fence, "test"); err != nil {
		t.Fatalf("force release: %v", err)
	}
	close(written.open)
	if err := <-extended; err != nil {
		t.Fatalf("extend: %v", err)
	}
	wantLost(t, g, ForceReleased, "the holder was not told of a force release here as it was extended")
}

// extending extends owner's lock of k by a minute in the background, and
// returns the channel its outcome arrives on.
func extending(s *sidecar, k keyspace.Key, owner string) <-chan error {
	out := make(chan error, 1)
	go func() {
		_, err := s.c.Extend(context.Background(), k, owner, time.Minute)
		out <- err
	}()
	return out
}

func TestForceReleaseIsNoticed(t *testing.T) {
	parallel(t)
	k := key(t, "forced")
	a := newSidecar(t, "pod-a")
	ctx := context.Background()
	g := a.mustAcquire(t, k, "victim")
	keys := a.contenders(t, k)
	a.deleteKey(t, keys[0])
	wantLost(t, g, ForceReleased, "the holder was not told its key was deleted")
	_, err := a.c.Release(ctx, k, "victim")
	var le *LostError
	if !errors.As(err, &le) || le.Reason != ForceReleased {
		t.Fatalf("release after force release: %v, want lost (force_released)", err)
	}
	// The lock is free for others, and a new grant works.
	if g2 := a.mustAcquire(t, k, "next"); g2.Fence <= g.Fence {
		t.Errorf("fence %d after %d", g2.Fence, g.Fence)
	}
}

// TestDeletedAsGranted: a delete of a key, delivered by the watch before
// the grant that created the key indexed it (a force release just as the
// lock is granted), loses the lock at once rather than leaving it held in
// silence. The delete is handed to the coordinator as the watch would,
// before the grant, at a revision after any fence it can get.
func TestDeletedAsGranted(t *testing.T) {
	parallel(t)
	k := key(t, "deleted-as-granted")
	a := newSidecar(t, "pod-a")
	first := a.mustAcquire(t, k, "o")
	name := first.h.etcdKey // the session's contender key of k, again below
	a.mustRelease(t, k, "o")
	deletedThenGranted(t, a, k, name, "a key deleted before its grant was indexed is held in silence")
}

// deletedThenGranted hands a delete of name, s's contender key of k, to s
// as its watch would, at a revision after any fence, then has k granted
// to s again with that key, and wants the grant lost at once.
func deletedThenGranted(t *testing.T, s *sidecar, k keyspace.Key, name, silent string) {
	t.Helper()
	s.c.onDelete(k, name, 1<<62)
	g := s.mustAcquire(t, k, "o")
	if g.h.etcdKey != name {
		t.Fatalf("the second grant's key %s, want the session's %s again", g.h.etcdKey, name)
	}
	wantLost(t, g, ForceReleased, silent)
}

// TestDeletedAsGrantedBesideAHeldKey: as TestDeletedAsGranted, with
// another key held here that shares the deleted key's slot in the index of
// held keys, so that the index cannot say the deleted key is not held: the
// delete is looked at under the mutex, which finds no holder yet and
// leaves it for the grant to find.
func TestDeletedAsGrantedBesideAHeldKey(t *testing.T) {
	parallel(t)
	k := key(t, "deleted-beside")
	a := newSidecar(t, "pod-a")
	first := a.mustAcquire(t, k, "o")
	name := first.h.etcdKey
	a.mustRelease(t, k, "o")
	sess := a.session(t)
	var beside keyspace.Key
	for i := 0; beside.IsZero(); i++ {
		if i == 1<<20 {
			t.Fatal("no key shares the deleted key's slot")
		}
		b := key(t, fmt.Sprintf("beside-%d", i))
		if a.c.heldKeys.slot(a.c.Layout().ContenderKey(b, int64(sess.ID()))) == a.c.heldKeys.slot(name) {
			beside = b
		}
	}
	a.mustAcquire(t, beside, "o")
	deletedThenGranted(t, a, k, name, "a key deleted before its grant was indexed, beside a held key of its slot, is held in silence")
}

func TestLeaseLost(t *testing.T) {
	parallel(t)
	k := key(t, "lease")
	a, b := newSidecar(t, "pod-a"), newSidecar(t, "pod-b")
	ctx := context.Background()
	g := a.mustAcquire(t, k, "victim")
	sess := a.session(t)
	// The lease ends behind the sidecar's back, as when etcd expires it.
	a.expire(t)
	select {
	case <-g.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the holder was not told its lease ended")
	}
	_, err := a.c.Release(ctx, k, "victim")
	var le *LostError
	if !errors.As(err, &le) || le.Reason != LeaseLost {
		t.Fatalf("release after lease loss: %v, want lost (lease_lost)", err)
	}
	// Another sidecar can take it; the old owner is not silently re-granted.
	g2 := b.mustAcquire(t, k, "taker")
	if g2.Fence <= g.Fence {
		t.Errorf("fence %d after %d", g2.Fence, g.Fence)
	}
	if st, _ := a.c.Status(ctx, k); st.Holder.Owner != "taker" {
		t.Errorf("holder %+v, want taker", st.Holder)
	}
	// The sidecar opens a new session and works again.
	waitFor(t, 10*time.Second, "new session", func() bool {
		s, err := a.sessions.Current()
		return err == nil && s.ID() != sess.ID()
	})
	if _, err := b.c.Release(ctx, k, "taker"); err != nil {
		t.Fatal(err)
	}
	a.mustAcquire(t, k, "victim")
}

// TestDeadlinesOfManyLocks: the locks of one sidecar share one deadline
// queue. Each expires at its own deadline, in order; an extended lock moves
// back in the queue and a released one leaves it.
func TestDeadlinesOfManyLocks(t *testing.T) {
	parallel(t)
	a := newSidecar(t, "pod-a")
	ctx := context.Background()
	const n = 12
	grants := make([]Grant, n)
	start := time.Now()
	for i := n - 1; i >= 0; i-- { // pushed in reverse order of their deadlines
		g, err := a.c.Acquire(ctx, AcquireRequest{Key: key(t, fmt.Sprintf("dl%d", i)), Owner: "o", TTL: time.Second + time.Duration(i)*100*time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		grants[i] = g
	}
	if _, err := a.c.Extend(ctx, key(t, "dl0"), "o", time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := a.c.Release(ctx, key(t, "dl1"), "o"); err != nil {
		t.Fatal(err)
	}
	var ended []time.Duration
	for i := 2; i < n; i++ {
		select {
		case <-grants[i].Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("dl%d (ttl %v) still held after 10s", i, time.Second+time.Duration(i)*100*time.Millisecond)
		}
		ended = append(ended, time.Since(start))
		if le := (*LostError)(nil); !errors.As(grants[i].Err(), &le) || le.Reason != Expired {
			t.Errorf("dl%d ended with %v; want expired", i, grants[i].Err())
		}
		if since := time.Since(grants[i].AcquiredAt); since < time.Second+time.Duration(i)*100*time.Millisecond {
			t.Errorf("dl%d ended %v after its grant, before its ttl", i, since)
		}
	}
	select {
	case <-grants[0].Done():
		t.Errorf("the extended lock ended: %v", grants[0].Err())
	default:
	}
	if grants[1].Err() != nil {
		t.Errorf("the released lock ended with %v; want its release", grants[1].Err())
	}
	t.Logf("expiries after %v", ended)
}

// TestDoneAskedLate: a grant's Done channel is made when first asked for;
// asked for after the lock ended, it is closed at once, and Err tells a
// release from a loss.
func TestDoneAskedLate(t *testing.T) {
	parallel(t)
	a := newSidecar(t, "pod-a")
	ctx := context.Background()
	released := a.mustAcquire(t, key(t, "released"), "o")
	if _, err := a.c.Release(ctx, key(t, "released"), "o"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-released.Done():
	default:
		t.Fatal("Done of a released lock is open")
	}
	if err := released.Err(); err != nil {
		t.Errorf("Err of a released lock: %v", err)
	}

	k := key(t, "forced")
	lost := a.mustAcquire(t, k, "o")
	a.deleteKey(t, a.contenders(t, k)[0])
	waitFor(t, 5*time.Second, "the loss", func() bool { return lost.Err() != nil })
	select {
	case <-lost.Done():
	default:
		t.Fatal("Done of a lost lock is open")
	}
	if le := (*LostError)(nil); !errors.As(lost.Err(), &le) || le.Reason != ForceReleased {
		t.Errorf("Err of a force-released lock: %v", lost.Err())
	}
	if err := (Grant{}).Err(); err != nil {
		t.Errorf("Err of no grant: %v", err)
	}
}

// wantLost waits for g to end lost for reason, and fails with silent when
// it does not end within 5s.
func wantLost(t *testing.T, g Grant, reason LostReason, silent string) {
	t.Helper()
	select {
	case <-g.Done():
		if le := (*LostError)(nil); !errors.As(g.Err(), &le) || le.Reason != reason {
			t.Errorf("Err() = %v, want lost (%s)", g.Err(), reason)
		}
	case <-time.After(5 * time.Second):
		t.Fatal(silent)
	}
}
