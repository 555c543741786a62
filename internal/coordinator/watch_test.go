package coordinator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/keyspace"
)

// watchOpen reports whether one of the sidecar's lock watches is
// established.
func (s *sidecar) watchOpen() bool {
	return len(s.watchedLocks()) > 0
}

// watchedLocks returns the locks whose watch is established.
func (s *sidecar) watchedLocks() []string {
	var ks []string
	s.c.hub.locks.Range(func(_, v any) bool {
		if lw := v.(*lockWatch); lw.open.Load() != 0 {
			ks = append(ks, lw.key.String())
		}
		return true
	})
	return ks
}

// watchEverOpened reports whether a lock watch was ever established.
func (s *sidecar) watchEverOpened() bool {
	return s.c.hub.opened.Load() > 0
}

// keepWatching has lock k's watch open in s for as long as the test runs,
// before the test counts its etcd calls (a watch opened after a read makes
// the reader read again).
func (s *sidecar) keepWatching(t *testing.T, k keyspace.Key) {
	t.Helper()
	s.c.hub.need(k, 0)
	t.Cleanup(func() { s.c.hub.unneed(k) })
	waitFor(t, 5*time.Second, "the lock's watch", func() bool { return slices.Contains(s.watchedLocks(), k.String()) })
}

// TestWatchOnlyWhileNeeded: an idle sidecar does not watch its scope (it
// would receive every delete in it); holding a lock past the watch delay or
// awaiting one opens the watch, which closes a linger after the last lock
// ends; deletes in the meantime are heard.
func TestWatchOnlyWhileNeeded(t *testing.T) {
	parallel(t)
	const linger = 200 * time.Millisecond
	short := func(c *Config) { c.WatchLinger, c.WatchDelay = linger, 100*time.Millisecond }
	a, b := newSidecar(t, "pod-a", short), newSidecar(t, "pod-b", short)
	ctx := context.Background()
	time.Sleep(2 * linger)
	if a.watchOpen() || b.watchOpen() {
		t.Fatal("idle sidecars watch their scope")
	}

	// A holder opens the watch and hears a force release.
	k := key(t, "lazy")
	g := a.mustAcquire(t, k, "victim")
	waitFor(t, 5*time.Second, "the holder's watch", a.watchOpen)
	if b.watchOpen() {
		t.Error("a sidecar that holds nothing watches")
	}
	a.deleteKey(t, a.contenders(t, k)[0])
	select {
	case <-g.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the holder was not told its key was deleted")
	}
	if _, err := a.c.Release(ctx, k, "victim"); err == nil {
		t.Fatal("release of a force-released lock succeeded")
	}
	waitFor(t, 5*time.Second, "the watch to close after the linger", func() bool { return !a.watchOpen() })

	// A waiter on an idle sidecar is handed the lock.
	handOff(t, a, b, k, 0)
	if !b.watchOpen() {
		t.Error("a holder's watch is closed")
	}
	if _, err := b.c.Release(ctx, k, "second"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "both watches closed", func() bool { return !a.watchOpen() && !b.watchOpen() })
	if err := a.c.Ready(); err != nil {
		t.Errorf("an idle sidecar is not ready: %v", err)
	}
}

// TestWatchOnlyTheLocksHere: a sidecar watches the locks it holds or
// awaits, not its scope: the releases of another lock in the same scope
// never reach it, however often that lock changes hands elsewhere, and a
// delete of its own key still does.
func TestWatchOnlyTheLocksHere(t *testing.T) {
	parallel(t)
	now := func(c *Config) { c.WatchDelay = 0 }
	a, b := newSidecar(t, "pod-a", now), newSidecar(t, "pod-b", now)
	mine, theirs := key(t, "mine"), key(t, "theirs")
	g := a.mustAcquire(t, mine, "a")
	waitFor(t, 5*time.Second, "the held lock's watch", func() bool { return slices.Equal(a.watchedLocks(), []string{mine.String()}) })
	b.keepWatching(t, theirs)
	const cycles = 20
	for range cycles {
		b.mustAcquire(t, theirs, "b")
		if _, err := b.c.Release(context.Background(), theirs, "b"); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 5*time.Second, "b's watch to deliver its releases", func() bool { return b.calls.deletes.Load() >= cycles })
	time.Sleep(100 * time.Millisecond) // what a scope watch would deliver to a has come by now
	if got := a.calls.deletes.Load(); got != 0 {
		t.Errorf("a sidecar holding %s was sent %d deletes of %s", mine, got, theirs)
	}
	if got := a.watchedLocks(); !slices.Equal(got, []string{mine.String()}) {
		t.Errorf("a watches %v; want only %s", got, mine)
	}
	a.deleteKey(t, a.contenders(t, mine)[0])
	select {
	case <-g.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the holder was not told its key was deleted")
	}
	if got := a.calls.deletes.Load(); got != 1 {
		t.Errorf("a was sent %d deletes; want 1, its own key's", got)
	}
}

// TestConfigWatchLinger: the linger must be at least 10ms.
func TestConfigWatchLinger(t *testing.T) {
	parallel(t)
	c := Default()
	c.WatchLinger = time.Millisecond
	if err := c.Validate(); err == nil {
		t.Error("a 1ms watch linger is valid")
	}
}

// TestWatchDelay: a lock released within the watch delay never opens the
// scope's watch, yet a young lock's loss is never hidden: asked for again
// by its owner, it is looked up in etcd; still held past the delay, it is
// watched and its loss reported; listened to (Done) or force released
// through its own sidecar, at once.
func TestWatchDelay(t *testing.T) {
	parallel(t)
	ctx := context.Background()
	never := func(c *Config) { c.WatchDelay = time.Minute }
	t.Run("short locks never open the watch", func(t *testing.T) {
		a := newSidecar(t, "pod-short", never)
		k := key(t, "short")
		for range 20 {
			a.mustAcquire(t, k, "o")
			if _, err := a.c.Release(ctx, k, "o"); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(200 * time.Millisecond)
		if a.watchEverOpened() {
			t.Error("locks released within the watch delay opened the watch")
		}
	})
	t.Run("asked again, a young lock is looked up in etcd", func(t *testing.T) {
		a := newSidecar(t, "pod-again", never)
		k := key(t, "again")
		g := a.mustAcquire(t, k, "o")
		ranges, txns := a.calls.Reads(), a.calls.Writes()
		if again := a.mustAcquire(t, k, "o"); again.Fence != g.Fence {
			t.Fatalf("held, asked again: fence %d, want %d", again.Fence, g.Fence)
		}
		if r, x := a.calls.Reads()-ranges, a.calls.Writes()-txns; r != 1 || x != 0 {
			t.Errorf("asked again: %d reads and %d transactions; want 1 read", r, x)
		}
		a.deleteKey(t, a.contenders(t, k)[0])
		other := newSidecar(t, "pod-other", never)
		other.mustAcquire(t, k, "thief")
		_, err := a.acquire(t, k, "o", 0)
		var he *HeldError
		if !errors.As(err, &he) || he.Holder.Owner != "thief" {
			t.Fatalf("asked again after a force release: %v; want refused, held by thief", err)
		}
		var le *LostError
		if !errors.As(g.Err(), &le) || le.Reason != ForceReleased {
			t.Errorf("the young lock ended with %v; want lost (force_released)", g.Err())
		}
		if a.watchEverOpened() {
			t.Error("the watch opened")
		}
	})
	t.Run("young locks are watched in batches, none before three quarters of its delay", func(t *testing.T) {
		a := newSidecar(t, "pod-batch", func(c *Config) { c.WatchDelay = time.Second })
		watched := func(g Grant) bool {
			a.c.mu.Lock()
			defer a.c.mu.Unlock()
			return g.h.watched
		}
		first := a.mustAcquire(t, key(t, "batch-1"), "o")
		time.Sleep(100 * time.Millisecond)
		second := a.mustAcquire(t, key(t, "batch-2"), "o") // due within a quarter of the first
		time.Sleep(500 * time.Millisecond)
		third := a.mustAcquire(t, key(t, "batch-3"), "o") // due well after
		waitFor(t, 5*time.Second, "the first lock watched", func() bool { return watched(first) })
		a.c.mu.Lock()
		second1, third1 := second.h.watched, third.h.watched
		a.c.mu.Unlock()
		if since := time.Since(first.AcquiredAt); since < 750*time.Millisecond {
			t.Errorf("the first lock was watched %v after its grant, before three quarters of its 1s delay", since)
		}
		if !second1 {
			t.Error("the second lock, due 100ms after the first, was not taken in the first's batch")
		}
		if third1 {
			t.Error("the third lock, due 600ms after the first, was taken in the first's batch")
		}
		waitFor(t, 5*time.Second, "the third lock watched", func() bool { return watched(third) })
		if since := time.Since(third.AcquiredAt); since < 750*time.Millisecond {
			t.Errorf("the third lock was watched %v after its grant, before three quarters of its 1s delay", since)
		}
	})
	t.Run("held past the delay, a lock is watched", func(t *testing.T) {
		a := newSidecar(t, "pod-old", func(c *Config) { c.WatchDelay = 200 * time.Millisecond })
		k := key(t, "old")
		g := a.mustAcquire(t, k, "o")
		reads := a.calls.Reads()
		// Deleted while young, with no watch: the lock's watch opens when
		// the delay is up, from just after the grant, and delivers the
		// delete; the only read is of the lease, to tell why.
		a.deleteKey(t, a.contenders(t, k)[0])
		waitFor(t, 5*time.Second, "the loss of the young lock", func() bool { return g.Err() != nil })
		if got := a.calls.Reads() - reads; got != 1 {
			t.Errorf("the young lock's loss took %d reads; want 1, of its lease (the delete comes with the watch)", got)
		}
		var le *LostError
		if !errors.As(g.Err(), &le) || le.Reason != ForceReleased {
			t.Errorf("ended with %v; want lost (force_released)", g.Err())
		}
		if since := time.Since(g.AcquiredAt); since < 200*time.Millisecond {
			t.Errorf("the young lock's loss was found %v after its grant, before its watch delay", since)
		}
		// Deleted once watched: the watch reports it.
		g = a.mustAcquire(t, k, "o")
		waitFor(t, 5*time.Second, "the watch", a.watchOpen)
		a.deleteKey(t, a.contenders(t, k)[0])
		waitFor(t, 5*time.Second, "the loss of the watched lock", func() bool { return g.Err() != nil })
	})
	t.Run("Done opens the watch at once", func(t *testing.T) {
		a := newSidecar(t, "pod-done", never)
		k := key(t, "done")
		g := a.mustAcquire(t, k, "o")
		done := g.Done()
		waitFor(t, 5*time.Second, "the watch", a.watchOpen)
		a.deleteKey(t, a.contenders(t, k)[0])
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("the holder was not told its key was deleted")
		}
	})
	t.Run("force released through its own sidecar", func(t *testing.T) {
		a := newSidecar(t, "pod-force", never)
		k := key(t, "force")
		g := a.mustAcquire(t, k, "o")
		if _, err := a.c.ForceRelease(ctx, k, g.Fence, "test"); err != nil {
			t.Fatal(err)
		}
		var le *LostError
		if !errors.As(g.Err(), &le) || le.Reason != ForceReleased {
			t.Errorf("ended with %v; want lost (force_released) at once", g.Err())
		}
		if a.mustAcquire(t, k, "o").Fence <= g.Fence {
			t.Error("the force-released lock was handed back")
		}
	})
}

// TestConfigWatchDelay: the delay is 0 to 1m.
func TestConfigWatchDelay(t *testing.T) {
	parallel(t)
	for _, d := range []time.Duration{-time.Millisecond, time.Minute + time.Millisecond} {
		c := Default()
		c.WatchDelay = d
		if err := c.Validate(); err == nil {
			t.Errorf("a %v watch delay is valid", d)
		}
	}
	c := Default()
	c.WatchDelay = 0
	if err := c.Validate(); err != nil {
		t.Errorf("a 0 watch delay: %v", err)
	}
}

// TestManyLocksWatchTheScope: past MaxLockWatches locks, the sidecar
// watches its scope with one watch instead of a watch per lock, and keeps
// no record of each lock held meanwhile; losses and hand-offs are heard
// all the same, and once few locks need watching and those held meanwhile
// are gone, the lock watches take over again.
func TestManyLocksWatchTheScope(t *testing.T) {
	parallel(t)
	const max = 2
	few := func(c *Config) { c.WatchDelay, c.WatchLinger, c.MaxLockWatches = 0, 100*time.Millisecond, max }
	a, b := newSidecar(t, "pod-a", few), newSidecar(t, "pod-b", few)
	ctx := context.Background()
	scopeOpen := a.c.hub.scopeCovers
	lockWatches := func() int {
		n := 0
		a.c.hub.locks.Range(func(_, v any) bool {
			lw := v.(*lockWatch)
			lw.mu.Lock()
			if lw.running {
				n++
			}
			lw.mu.Unlock()
			return true
		})
		return n
	}
	var ks []keyspace.Key
	var gs []Grant
	for i := range max + 1 {
		ks = append(ks, key(t, fmt.Sprintf("many-%d", i)))
		gs = append(gs, a.mustAcquire(t, ks[i], "o"))
	}
	waitFor(t, 5*time.Second, "the scope's watch, and no lock's", func() bool { return scopeOpen() && lockWatches() == 0 })
	later := key(t, "many-later")
	a.mustAcquire(t, later, "o")
	a.c.hub.mu.Lock()
	_, recorded := a.c.hub.locks.Load(later)
	holds := a.c.hub.scopeHolds
	a.c.hub.mu.Unlock()
	if recorded || holds != 1 {
		t.Errorf("a lock held while the scope is watched: recorded %v, %d scope holds; want no record, 1 hold", recorded, holds)
	}

	// A loss is heard on the scope's watch.
	a.deleteKey(t, a.contenders(t, ks[0])[0])
	select {
	case <-gs[0].Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a holder was not told its key was deleted, on the scope's watch")
	}
	// A waiter is handed a lock on it.
	b.mustAcquire(t, ks[0], "b")
	granted := make(chan error, 1)
	go func() {
		_, err := a.acquire(t, ks[0], "waiter", 10*time.Second)
		granted <- err
	}()
	waitFor(t, 5*time.Second, "the waiter's key", func() bool { return len(a.contenders(t, ks[0])) == 2 })
	if _, err := b.c.Release(ctx, ks[0], "b"); err != nil {
		t.Fatal(err)
	}
	if err := <-granted; err != nil {
		t.Fatalf("the waiter: %v", err)
	}

	// Down to no lock: the scope's watch closes, and a lock held then has
	// its own watch, which hears its loss.
	for _, l := range []struct {
		k     keyspace.Key
		owner string
	}{{ks[1], "o"}, {ks[2], "o"}, {later, "o"}, {ks[0], "waiter"}} {
		if _, err := a.c.Release(ctx, l.k, l.owner); err != nil {
			t.Fatalf("release %s: %v", l.k, err)
		}
	}
	waitFor(t, 5*time.Second, "the scope's watch closed", func() bool { return a.c.hub.scope.Load() == nil })
	g := a.mustAcquire(t, ks[0], "again")
	waitFor(t, 5*time.Second, "the lock's own watch", func() bool { return slices.Equal(a.watchedLocks(), []string{ks[0].String()}) })
	a.deleteKey(t, a.contenders(t, ks[0])[0])
	select {
	case <-g.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the holder was not told its key was deleted, on its lock's watch")
	}
}

// TestConfigMaxLockWatches: at least 1.
func TestConfigMaxLockWatches(t *testing.T) {
	c := Default()
	c.MaxLockWatches = 0
	if err := c.Validate(); err == nil {
		t.Error("0 max lock watches is valid")
	}
}
