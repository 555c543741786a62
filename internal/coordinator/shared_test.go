package coordinator

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/baton-dev/baton/internal/keyspace"
)

func units(limit, weight int) keyspace.Claim { return keyspace.Claim{Limit: limit, Weight: weight} }

var reader = keyspace.Claim{Mode: keyspace.Read}

// claim acquires k for owner with cl, waiting up to wait.
func (s *sidecar) claim(k keyspace.Key, owner string, cl keyspace.Claim, wait time.Duration) (Grant, error) {
	return s.c.Acquire(context.Background(), AcquireRequest{Key: k, Owner: owner, Claim: cl, Wait: wait})
}

func (s *sidecar) mustClaim(t *testing.T, k keyspace.Key, owner string, cl keyspace.Claim) Grant {
	t.Helper()
	g, err := s.claim(k, owner, cl, 0)
	if err != nil {
		t.Fatalf("acquire %s by %s with %+v: %v", k, owner, cl, err)
	}
	return g
}

func (s *sidecar) mustRelease(t *testing.T, k keyspace.Key, owner string) {
	t.Helper()
	if _, err := s.c.Release(context.Background(), k, owner); err != nil {
		t.Fatalf("release %s by %s: %v", k, owner, err)
	}
}

func TestSemaphore(t *testing.T) {
	parallel(t)
	a, b := newSidecar(t, "pod-a"), newSidecar(t, "pod-b")
	k := key(t, "tenant-a/pipelines")
	sem := units(3, 1)

	fences := map[int64]string{}
	for i, s := range []*sidecar{a, a, b} {
		owner := []string{"run-1", "run-2", "run-3"}[i]
		g := s.mustClaim(t, k, owner, sem)
		if fences[g.Fence] != "" || g.Claim != sem {
			t.Fatalf("grant %+v: fence already given to %s", g, fences[g.Fence])
		}
		fences[g.Fence] = owner
	}
	if again := a.mustClaim(t, k, "run-1", sem); !again.Repeated {
		t.Errorf("the same owner again: %+v, want the grant repeated", again)
	}

	t.Run("full: refused naming a holder, then with no write", func(t *testing.T) {
		_, err := b.claim(k, "run-4", sem, 0)
		var he *HeldError
		if !errors.As(err, &he) || fences[he.Fence] == "" {
			t.Fatalf("err = %v, want a refusal naming a holder", err)
		}
		writes, reads := b.calls.Writes(), b.calls.Reads()
		if _, err := b.claim(k, "run-4", sem, 0); !errors.Is(err, ErrHeld) {
			t.Fatalf("err = %v, want ErrHeld", err)
		}
		if w, r := b.calls.Writes()-writes, b.calls.Reads()-reads; w != 0 || r != 1 {
			t.Errorf("a refusal of a lock seen full cost %d writes and %d reads, want 0 and 1", w, r)
		}
		if got := len(a.contenders(t, k)); got != 3 {
			t.Errorf("%d contender keys after refusals, want the 3 holders'", got)
		}
	})

	t.Run("status shows every holder", func(t *testing.T) {
		st, err := b.c.Status(context.Background(), k)
		if err != nil {
			t.Fatal(err)
		}
		if !st.Held || st.Limit != 3 || st.HeldUnits != 3 || len(st.Holders) != 3 || st.Waiters != 0 {
			t.Fatalf("status = %+v", st)
		}
		for _, h := range st.Holders {
			if fences[h.Fence] != h.Holder.Owner {
				t.Errorf("holder %+v: fence %d was granted to %s", h.Holder, h.Fence, fences[h.Fence])
			}
		}
	})

	t.Run("a unit released is granted to the next", func(t *testing.T) {
		a.mustRelease(t, k, "run-2")
		g := b.mustClaim(t, k, "run-4", sem)
		if fences[g.Fence] != "" {
			t.Fatalf("fence %d given twice", g.Fence)
		}
	})
}

// TestSemaphoreNoBarging: a heavy waiter at the head of the line is not
// passed by lighter claims that would fit.
func TestSemaphoreNoBarging(t *testing.T) {
	parallel(t)
	a, b := newSidecar(t, "pod-a"), newSidecar(t, "pod-b")
	k := key(t, "weights")
	a.mustClaim(t, k, "one", units(4, 1))
	a.mustClaim(t, k, "two", units(4, 2))
	heavy := make(chan error, 1)
	go func() {
		_, err := b.claim(k, "heavy", units(4, 3), 10*time.Second)
		heavy <- err
	}()
	waitFor(t, 5*time.Second, "the heavy claim in line", func() bool { return len(a.contenders(t, k)) == 3 })
	if _, err := b.claim(k, "light", units(4, 1), 0); !errors.Is(err, ErrHeld) {
		t.Fatalf("a light try past the heavy waiter: %v, want ErrHeld (a unit is free, but not for it)", err)
	}
	a.mustRelease(t, k, "one")
	select {
	case err := <-heavy:
		t.Fatalf("heavy granted with 2 of 4 units held: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	a.mustRelease(t, k, "two")
	if err := <-heavy; err != nil {
		t.Fatalf("heavy: %v", err)
	}
	st, _ := a.c.Status(context.Background(), k)
	if st.HeldUnits != 3 || len(st.Holders) != 1 || st.Holders[0].Holder.Owner != "heavy" {
		t.Errorf("status = %+v", st)
	}
}

func TestReadWriteLock(t *testing.T) {
	parallel(t)
	a, b := newSidecar(t, "pod-a"), newSidecar(t, "pod-b")
	k := key(t, "catalog")
	r1 := a.mustClaim(t, k, "reader-1", reader)
	r2 := a.mustClaim(t, k, "reader-2", reader)
	r3 := b.mustClaim(t, k, "reader-3", reader)
	if r1.Fence == r2.Fence || r2.Fence == r3.Fence {
		t.Fatalf("readers share fences: %d %d %d", r1.Fence, r2.Fence, r3.Fence)
	}
	if _, err := b.acquire(t, k, "writer", 0); !errors.Is(err, ErrHeld) {
		t.Fatalf("a writer's try while readers hold: %v, want ErrHeld", err)
	}
	writer := make(chan Grant, 1)
	go func() {
		g, err := b.acquire(t, k, "writer", 10*time.Second)
		if err != nil {
			t.Error(err)
		}
		writer <- g
	}()
	waitFor(t, 5*time.Second, "the writer in line", func() bool { return len(a.contenders(t, k)) == 4 })

	// No writer starvation: a reader that comes after the queued writer
	// waits behind it.
	if _, err := a.claim(k, "late-reader", reader, 0); !errors.Is(err, ErrHeld) {
		t.Fatalf("a reader's try behind a queued writer: %v, want ErrHeld", err)
	}
	late := make(chan Grant, 1)
	go func() {
		g, err := a.claim(k, "late-reader", reader, 10*time.Second)
		if err != nil {
			t.Error(err)
		}
		late <- g
	}()
	waitFor(t, 5*time.Second, "the late reader in line", func() bool { return len(a.contenders(t, k)) == 5 })
	for _, r := range []struct {
		s     *sidecar
		owner string
	}{{a, "reader-1"}, {a, "reader-2"}, {b, "reader-3"}} {
		r.s.mustRelease(t, k, r.owner)
	}
	w := <-writer
	select {
	case g := <-late:
		t.Fatalf("the late reader was granted (fence %d) while the writer holds", g.Fence)
	case <-time.After(200 * time.Millisecond):
	}
	if st, _ := a.c.Status(context.Background(), k); len(st.Holders) != 1 || st.Fence != w.Fence || st.Waiters != 1 {
		t.Errorf("status while the writer holds = %+v", st)
	}
	b.mustRelease(t, k, "writer")
	if g := <-late; g.Fence <= w.Fence {
		t.Errorf("late reader's fence %d not after the writer's %d", g.Fence, w.Fence)
	}
}

func TestClaimMismatch(t *testing.T) {
	parallel(t)
	a, b := newSidecar(t, "pod-a"), newSidecar(t, "pod-b")
	k := key(t, "limit-4")
	g := a.mustClaim(t, k, "holder", units(4, 1))
	for name, cl := range map[string]keyspace.Claim{
		"another limit": units(3, 1),
		"a mutex":       {},
		"a reader":      reader,
	} {
		writes := b.calls.Writes()
		_, err := b.claim(k, "other", cl, 0)
		var me *MismatchError
		if !errors.As(err, &me) || !errors.Is(err, ErrLimitMismatch) || me.InForce.Limit != 4 || me.Fence != g.Fence {
			t.Errorf("%s: err = %v, want a MismatchError naming limit 4", name, err)
			continue
		}
		if len(b.contenders(t, k)) != 1 {
			t.Errorf("%s: a refused claim left a key", name)
		}
		if cl.Limit > 0 && b.calls.Writes()-writes > 1 {
			t.Errorf("%s: %d writes", name, b.calls.Writes()-writes)
		}
	}
	// Waiting makes no difference.
	if _, err := b.claim(k, "other", units(5, 1), time.Second); !errors.Is(err, ErrLimitMismatch) {
		t.Errorf("a waiter with another limit: %v, want ErrLimitMismatch", err)
	}
	if keys := b.contenders(t, k); len(keys) != 1 {
		t.Errorf("contenders after a waiter's mismatch: %v", keys)
	}

	t.Run("an owner asking again with another claim", func(t *testing.T) {
		rw := key(t, "rw")
		a.mustClaim(t, rw, "me", reader)
		if _, err := a.acquire(t, rw, "me", 0); !errors.Is(err, ErrLimitMismatch) {
			t.Errorf("a reader asking to write: %v, want ErrLimitMismatch", err)
		}
		a.mustRelease(t, rw, "me")
		a.mustAcquire(t, rw, "me")
		if _, err := a.claim(rw, "me", reader, 0); !errors.Is(err, ErrLimitMismatch) {
			t.Errorf("a writer asking to read: %v, want ErrLimitMismatch", err)
		}
	})
}

func TestClaimValidated(t *testing.T) {
	parallel(t)
	a := newSidecar(t, "pod-a")
	k := key(t, "v")
	for name, cl := range map[string]keyspace.Claim{
		"negative limit":        units(-1, 0),
		"absurd limit":          units(keyspace.MaxLimit+1, 1),
		"weight over the limit": units(4, 5),
		"negative weight":       units(4, -1),
		"weight without limit":  {Weight: 2},
		"unknown mode":          {Mode: "exclusive"},
		"read semaphore":        {Mode: keyspace.Read, Limit: 4},
	} {
		writes := a.calls.Writes()
		var inv *InvalidError
		if _, err := a.claim(k, "o", cl, 0); !errors.As(err, &inv) {
			t.Errorf("%s: err = %v, want an InvalidError", name, err)
		} else if inv.Field == "" || inv.Msg == "" {
			t.Errorf("%s: %+v", name, inv)
		}
		if a.calls.Writes() != writes {
			t.Errorf("%s: wrote to etcd", name)
		}
	}
	// A limit of one taken whole is the mutex.
	g := a.mustClaim(t, k, "one", units(1, 1))
	if g.Claim != (keyspace.Claim{}) {
		t.Errorf("limit 1 granted as %+v, want the mutex", g.Claim)
	}
	if c := a.first(t, k); c.Key != a.c.Layout().ContenderKey(k, int64(a.session(t).ID())) {
		t.Errorf("limit 1's key %s is not the mutex's", c.Key)
	}
}

// TestSharedClaimLost: a unit force released or whose session ends is
// reported lost to its owner and frees its place for the waiters.
func TestSharedClaimLost(t *testing.T) {
	parallel(t)
	a, b := newSidecar(t, "pod-a"), newSidecar(t, "pod-b")
	k := key(t, "lost")
	sem := units(2, 1)
	g1 := a.mustClaim(t, k, "one", sem)
	g2 := a.mustClaim(t, k, "two", sem)
	if _, err := b.c.ForceRelease(context.Background(), k, 0, "test"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("force release of a lock with two holders, no fence: %v, want ErrInvalid", err)
	}
	if _, err := b.c.ForceRelease(context.Background(), k, g1.Fence, "test"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the loss reported", func() bool { return errors.Is(g1.Err(), ErrLost) })
	if _, err := a.c.Release(context.Background(), k, "one"); !errors.Is(err, ErrLost) {
		t.Errorf("release of a unit force released: %v, want ErrLost", err)
	}
	b.mustClaim(t, k, "three", sem)
	waiter := make(chan error, 1)
	go func() {
		_, err := b.claim(k, "four", sem, 10*time.Second)
		waiter <- err
	}()
	waitFor(t, 5*time.Second, "a waiter in line", func() bool { return len(a.contenders(t, k)) == 3 })
	a.expire(t)
	if err := <-waiter; err != nil {
		t.Fatalf("a waiter behind a crashed sidecar's unit: %v", err)
	}
	waitFor(t, 5*time.Second, "the session loss reported", func() bool { return errors.Is(g2.Err(), ErrLost) })
}

// TestEtcdMutexContendsWithReaders: etcd's concurrency.Mutex (etcdctl
// lock) is a writer to Baton's readers, and the other way round.
func TestEtcdMutexContendsWithReaders(t *testing.T) {
	parallel(t)
	needsEtcd(t)
	k := key(t, "rw-etcdctl")
	a := newSidecar(t, "pod-a")
	sess, err := concurrency.NewSession(a.cli, concurrency.WithTTL(5))
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	ctx := context.Background()
	a.mustClaim(t, k, "reader", reader)
	a.mustClaim(t, k, "units?", reader)
	m := concurrency.NewMutex(sess, a.c.Layout().MutexName(k))
	if err := m.TryLock(ctx); !errors.Is(err, concurrency.ErrLocked) {
		t.Fatalf("Mutex.TryLock while readers hold: %v, want ErrLocked", err)
	}
	locked := make(chan error, 1)
	go func() { locked <- m.Lock(ctx) }()
	waitFor(t, 5*time.Second, "the mutex in line", func() bool { return len(a.contenders(t, k)) == 3 })
	if _, err := a.claim(k, "late", reader, 0); !errors.Is(err, ErrHeld) {
		t.Fatalf("a reader behind etcdctl's queued writer: %v, want ErrHeld", err)
	}
	a.mustRelease(t, k, "reader")
	select {
	case err := <-locked:
		t.Fatalf("the mutex locked while a reader holds: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	a.mustRelease(t, k, "units?")
	if err := <-locked; err != nil {
		t.Fatal(err)
	}
	if _, err := a.claim(k, "late", reader, 0); !errors.Is(err, ErrHeld) {
		t.Fatalf("a reader while etcdctl holds: %v, want ErrHeld", err)
	}
	if err := m.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	a.mustClaim(t, k, "late", reader)
}

// unitsSeen records the Units an observer hears.
type unitsSeen struct {
	nopObserver
	mu            sync.Mutex
	held, waiting int
}

func (u *unitsSeen) Units(_ string, limit int, held bool, delta int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if held {
		u.held += delta
	} else {
		u.waiting += delta
	}
}

func (u *unitsSeen) now() (held, waiting int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.held, u.waiting
}

// TestSemaphoreUnitsObserved: the observer (the metrics) hears the units
// held and waited for.
func TestSemaphoreUnitsObserved(t *testing.T) {
	parallel(t)
	a := newSidecar(t, "pod-a")
	obs := &unitsSeen{}
	a.c.obs.Observer = obs
	k := key(t, "observed")
	a.mustClaim(t, k, "one", units(3, 2))
	done := make(chan error, 1)
	go func() {
		_, err := a.claim(k, "two", units(3, 2), 10*time.Second)
		done <- err
	}()
	waitFor(t, 5*time.Second, "2 units held, 2 waited for", func() bool { h, w := obs.now(); return h == 2 && w == 2 })
	a.mustRelease(t, k, "one")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if h, w := obs.now(); h != 2 || w != 0 {
		t.Errorf("held %d, waiting %d; want 2 and 0", h, w)
	}
	a.mustRelease(t, k, "two")
	if h, _ := obs.now(); h != 0 {
		t.Errorf("held %d after both released", h)
	}
}
