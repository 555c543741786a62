package coordinator

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestKeepRenews: a kept hold outlives its window many times over: its
// deadline moves on before it comes, and nobody else gets the lock.
func TestKeepRenews(t *testing.T) {
	parallel(t)
	a, b := newSidecar(t, "pod-a"), newSidecar(t, "pod-b")
	k := key(t, uniq("kept"))
	g, err := a.c.Acquire(context.Background(), AcquireRequest{Key: k, Owner: "run-1", TTL: time.Second, Hold: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h := a.c.Keep(ctx, g)
	time.Sleep(2500 * time.Millisecond) // two and a half windows
	if _, err := b.acquire(t, k, "other", 0); !errors.Is(err, ErrHeld) {
		t.Fatalf("a try two windows after the grant: %v; want held", err)
	}
	if got := h.Grant().ExpiresAt; !got.After(g.ExpiresAt.Add(time.Second)) {
		t.Errorf("deadline %v; want moved on from %v by more than a window", got, g.ExpiresAt)
	}
	select {
	case <-h.Done():
		t.Fatalf("the hold ended: %v", h.Err())
	default:
	}
	a.mustRelease(t, k, "run-1")
	<-h.Done()
	if err := h.Err(); err != nil {
		t.Errorf("released by its owner: Err() = %v, want nil", err)
	}
}

// TestKeepLetsGoWhenItsHolderGoes: when the hold's context ends, its lock
// is let go as abandoned, its lock delay holding it back from everyone,
// and Done closes once it is let go.
func TestKeepLetsGoWhenItsHolderGoes(t *testing.T) {
	parallel(t)
	a, b := newSidecar(t, "pod-a"), newSidecar(t, "pod-b")
	const delay = 800 * time.Millisecond
	k := key(t, uniq("gone"))
	g, err := a.c.Acquire(context.Background(), AcquireRequest{Key: k, Owner: "run-1", Hold: true, LockDelay: delay})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	h := a.c.Keep(ctx, g)
	cancel(errors.New("the test's caller hung up"))
	<-h.Done()
	gone := time.Now()
	if err := h.Err(); err != nil {
		t.Errorf("let go: Err() = %v, want nil", err)
	}
	if _, err := b.acquire(t, k, "next", 0); !errors.Is(err, ErrHeld) {
		t.Errorf("a try right after the holder went: %v; want held back by the lock delay", err)
	}
	if _, err := b.acquire(t, k, "next", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(gone); d < delay-50*time.Millisecond {
		t.Errorf("granted %v after the holder went, within the lock delay %v", d, delay)
	}
}

// TestKeepTellsItsLoss: a hold whose lock is force released ends, and
// says why.
func TestKeepTellsItsLoss(t *testing.T) {
	parallel(t)
	a, b := newSidecar(t, "pod-a"), newSidecar(t, "pod-b")
	k := key(t, uniq("forced"))
	g, err := a.c.Acquire(context.Background(), AcquireRequest{Key: k, Owner: "run-1", Hold: true})
	if err != nil {
		t.Fatal(err)
	}
	h := a.c.Keep(context.Background(), g)
	if _, err := b.c.ForceRelease(context.Background(), k, g.Fence, "operator"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the hold did not end after its lock was force released")
	}
	var lost *LostError
	if !errors.As(h.Err(), &lost) || lost.Reason != ForceReleased {
		t.Errorf("Err() = %v; want lost, force released", h.Err())
	}
}

// TestKeepRelease: a hold released (its holder never heard of the grant)
// lets its lock go with no lock delay: the next caller gets it at once.
func TestKeepRelease(t *testing.T) {
	parallel(t)
	a, b := newSidecar(t, "pod-a"), newSidecar(t, "pod-b")
	k := key(t, uniq("untold"))
	g, err := a.c.Acquire(context.Background(), AcquireRequest{Key: k, Owner: "run-1", Hold: true, LockDelay: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	h := a.c.Keep(context.Background(), g)
	h.Release("the test's caller never heard of the grant")
	if err := h.Err(); err != nil {
		t.Errorf("released: Err() = %v, want nil", err)
	}
	b.mustAcquire(t, k, "next")
}
