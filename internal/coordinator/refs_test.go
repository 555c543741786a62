package coordinator

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestEntriesGoWhenUnused: a lock's entry lives while a caller, a holder or
// a queued caller uses it, and goes once none does, whichever way the
// acquire ended (a grant's reference passes to its holder), so a sidecar
// that served many keys keeps nothing of those it no longer holds.
func TestEntriesGoWhenUnused(t *testing.T) {
	parallel(t)
	a, b := newSidecar(t, "pod-a"), newSidecar(t, "pod-b")
	ctx := context.Background()
	refs := func(name string) (int, bool) {
		a.c.mu.Lock()
		defer a.c.mu.Unlock()
		e := a.c.locks[name]
		if e == nil {
			return 0, false
		}
		return int(e.refs), true
	}

	k := key(t, "used")
	a.mustAcquire(t, k, "o")
	if n, ok := refs("used"); !ok || n != 1 {
		t.Fatalf("a held lock's entry: refs %d (found %v); want the holder's 1", n, ok)
	}
	a.c.mu.Lock()
	kept := a.c.locks["used"].trying
	a.c.mu.Unlock()
	if kept != nil {
		t.Fatal("a held lock's entry keeps the try that granted it: a sidecar holding many locks would keep one each")
	}
	if g, err := a.c.Acquire(ctx, AcquireRequest{Key: k, Owner: "o"}); err != nil || !g.Repeated {
		t.Fatalf("the owner's repeated acquire: %+v, %v", g, err)
	}
	if _, err := a.c.Acquire(ctx, AcquireRequest{Key: k, Owner: "other"}); !errors.Is(err, ErrHeld) {
		t.Fatalf("another owner's try: %v", err)
	}
	if _, err := a.c.Acquire(ctx, AcquireRequest{Key: k, Owner: "other", Wait: 50 * time.Millisecond}); !errors.Is(err, ErrHeld) {
		t.Fatalf("another owner's wait: %v", err)
	}
	// A wait's record write, due a little later, keeps a reference until
	// it is done.
	waitFor(t, 5*time.Second, "after a repeated acquire, a refusal and a wait that ran out, only the holder's reference", func() bool {
		n, _ := refs("used")
		return n == 1
	})
	a.mustRelease(t, k, "o")

	elsewhere := key(t, "elsewhere")
	b.mustAcquire(t, elsewhere, "holder")
	for range 3 {
		if _, err := a.c.Acquire(ctx, AcquireRequest{Key: elsewhere, Owner: "o"}); !errors.Is(err, ErrHeld) {
			t.Fatalf("a try of a lock held elsewhere: %v", err)
		}
	}
	granted := make(chan error, 1)
	go func() {
		_, err := a.c.Acquire(ctx, AcquireRequest{Key: elsewhere, Owner: "waiter", Wait: 10 * time.Second})
		granted <- err
	}()
	waitFor(t, 5*time.Second, "queued", func() bool { return len(a.contenders(t, elsewhere)) == 2 })
	b.mustRelease(t, elsewhere, "holder")
	if err := <-granted; err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "a waiter granted: only the holder's reference", func() bool {
		n, _ := refs("elsewhere")
		return n == 1
	})
	a.mustRelease(t, elsewhere, "waiter")

	sk := key(t, "shared")
	a.mustClaim(t, sk, "r1", reader)
	a.mustClaim(t, sk, "r2", reader)
	a.mustRelease(t, sk, "r1")
	a.mustRelease(t, sk, "r2")

	waitFor(t, 5*time.Second, "every entry gone", func() bool {
		a.c.mu.Lock()
		defer a.c.mu.Unlock()
		return len(a.c.locks) == 0
	})
	if n := a.c.load.Load(); n != 0 {
		t.Errorf("the count of entries, read without the mutex, is %d with none left", n)
	}
}
