package coordinator

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// uniq makes a key name unique to this run of the test: lock-delay
// markers and run-once records outlive a test's sidecars, and -count
// reuses its store.
func uniq(name string) string { return fmt.Sprintf("%s-%d", name, time.Now().UnixNano()) }

// markerThere reads whether k has a lock-delay marker.
func (s *sidecar) markerThere(t *testing.T, k string) bool {
	t.Helper()
	_, found, err := s.raw.Read(context.Background(), s.c.Layout().Delay(key(t, k)))
	if err != nil {
		t.Fatal(err)
	}
	return found
}

func TestLockDelay(t *testing.T) {
	parallel(t)
	a, b := newSidecar(t, "pod-a"), newSidecar(t, "pod-b")
	const delay = time.Second
	run := uniq("run")
	name := func(k string) string { return run + "/" + k }
	acquire := func(s *sidecar, k, owner string, wait time.Duration) (Grant, error) {
		return s.c.Acquire(context.Background(), AcquireRequest{Key: key(t, name(k)), Owner: owner, LockDelay: delay, Wait: wait})
	}

	t.Run("a clean release hands over at once", func(t *testing.T) {
		if _, err := acquire(a, "clean", "one", 0); err != nil {
			t.Fatal(err)
		}
		if !a.markerThere(t, name("clean")) {
			t.Fatal("no marker while held")
		}
		a.mustRelease(t, key(t, name("clean")), "one")
		if a.markerThere(t, name("clean")) {
			t.Error("a clean release left its marker")
		}
		if _, err := acquire(b, "clean", "two", 0); err != nil {
			t.Fatalf("right after a clean release: %v", err)
		}
	})

	t.Run("a lost holder holds the lock back for its delay", func(t *testing.T) {
		held, err := acquire(a, "lost", "one", 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.c.ForceRelease(context.Background(), key(t, name("lost")), held.Fence, "test"); err != nil {
			t.Fatal(err)
		}
		lost := time.Now()
		// A try meanwhile is refused, naming the lost holder.
		_, err = b.acquire(t, key(t, name("lost")), "try", 0)
		var de *DelayedError
		if !errors.As(err, &de) || !errors.Is(err, ErrHeld) || de.Mark.Owner != "one" || de.Mark.Fence != held.Fence || de.Until.Before(lost) {
			t.Errorf("a try while held back: %v", err)
		}
		if keys := b.contenders(t, key(t, name("lost"))); len(keys) != 0 {
			t.Errorf("a try held back left a key: %v", keys)
		}
		next, err := b.acquire(t, key(t, name("lost")), "waiter", 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if got := time.Since(lost); got < delay {
			t.Errorf("granted %v after the holder was lost, within its lock delay of %v", got, delay)
		}
		if v, found, _ := b.raw.Read(context.Background(), b.c.Layout().Delay(key(t, name("lost")))); found {
			t.Errorf("a marker %s is left for the plain lock of fence %d", v, next.Fence)
		}
	})

	t.Run("an expired holder and a crashed one too", func(t *testing.T) {
		if _, err := a.c.Acquire(context.Background(), AcquireRequest{Key: key(t, name("expired")), Owner: "one", LockDelay: delay, TTL: time.Second}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if _, err := acquire(b, "expired", "two", 10*time.Second); err != nil {
			t.Fatal(err)
		}
		if got := time.Since(start); got < delay {
			t.Errorf("granted %v after asking, within the expired holder's ttl and lock delay", got)
		}
		if _, err := acquire(a, "crash", "one", 0); err != nil {
			t.Fatal(err)
		}
		a.expire(t)
		crashed := time.Now()
		if _, err := acquire(b, "crash", "next", 10*time.Second); err != nil {
			t.Fatal(err)
		}
		if got := time.Since(crashed); got < delay {
			t.Errorf("granted %v after the holder's session ended, within its lock delay of %v", got, delay)
		}
	})
}

func TestLockDelayInput(t *testing.T) {
	parallel(t)
	a := newSidecar(t, "pod-a")
	for name, req := range map[string]AcquireRequest{
		"over the cap": {Key: key(t, "d"), Owner: "o", LockDelay: 2 * time.Minute},
		"negative":     {Key: key(t, "d"), Owner: "o", LockDelay: -time.Second},
		"a reader":     {Key: key(t, "d"), Owner: "o", LockDelay: time.Second, Claim: reader},
	} {
		writes := a.calls.Writes()
		var inv *InvalidError
		if _, err := a.c.Acquire(context.Background(), req); !errors.As(err, &inv) || inv.Field != "lock_delay" {
			t.Errorf("%s: %v, want an InvalidError of lock_delay", name, err)
		}
		if a.calls.Writes() != writes {
			t.Errorf("%s: wrote to etcd", name)
		}
	}
	// A lock without a delay writes no marker: one write to take it.
	writes := a.calls.Writes()
	plain := uniq("plain")
	a.mustAcquire(t, key(t, plain), "o")
	if got := a.calls.Writes() - writes; got != 1 || a.markerThere(t, plain) {
		t.Errorf("a plain grant: %d writes, marker %v", got, a.markerThere(t, plain))
	}
}

// TestLockDelayHoldsBackReaders: readers and semaphore units respect a lost
// writer's lock delay too.
func TestLockDelayHoldsBackReaders(t *testing.T) {
	parallel(t)
	a, b := newSidecar(t, "pod-a"), newSidecar(t, "pod-b")
	k := key(t, uniq("catalog"))
	held, err := a.c.Acquire(context.Background(), AcquireRequest{Key: k, Owner: "writer", LockDelay: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.c.ForceRelease(context.Background(), k, held.Fence, "test"); err != nil {
		t.Fatal(err)
	}
	lost := time.Now()
	var de *DelayedError
	if _, err := b.claim(k, "reader-1", reader, 0); !errors.As(err, &de) || de.Mark.Owner != "writer" {
		t.Fatalf("a reader's try while held back: %v", err)
	}
	if _, err := b.claim(k, "reader-2", reader, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if got := time.Since(lost); got < time.Second {
		t.Errorf("a reader granted %v after the writer was lost, within its lock delay of 1s", got)
	}
}
