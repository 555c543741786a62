package coordinator

import (
	"context"
	"errors"
	"testing"
	"time"
)

// watchOpen reports whether the sidecar's scope watch is established.
func (s *sidecar) watchOpen() bool {
	s.c.hub.mu.Lock()
	defer s.c.hub.mu.Unlock()
	return s.c.hub.ok
}

// watchEverOpened reports whether the scope watch was ever established.
func (s *sidecar) watchEverOpened() bool {
	s.c.hub.mu.Lock()
	defer s.c.hub.mu.Unlock()
	return s.c.hub.from != 0
}

// keepWatching has s hold a lock of its own, so that its scope watch is
// open before a test counts its etcd calls (a watch opened after a read
// makes the reader read again).
func (s *sidecar) keepWatching(t *testing.T) {
	t.Helper()
	s.mustAcquire(t, key(t, "keep-watching-"+s.c.cfg.Identity.Pod), "watcher")
	waitFor(t, 5*time.Second, "the scope watch", s.watchOpen)
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
		// Deleted while young, with the watch closed: the watch opens when
		// the delay is up and reads the keys older than itself.
		a.deleteKey(t, a.contenders(t, k)[0])
		waitFor(t, 5*time.Second, "the loss of the young lock", func() bool { return g.Err() != nil })
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
