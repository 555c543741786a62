package coordinator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/keyspace"
)

// TestHoldsNeverShare: the same owner gets its grant back from one plain
// acquire to the next, but a hold (a hold stream, baton run) never shares
// its lock, not even with another hold or a plain acquire of its own owner:
// a try is refused naming the holder, a wait waits for it to end.
func TestHoldsNeverShare(t *testing.T) {
	parallel(t)
	a := newSidecar(t, "pod-a")
	hold := func(k keyspace.Key, owner string, wait time.Duration) (Grant, error) {
		return a.c.Acquire(context.Background(), AcquireRequest{Key: k, Owner: owner, Wait: wait, Hold: true})
	}

	t.Run("plain acquires of one owner get the grant back", func(t *testing.T) {
		k := key(t, "plain")
		g := a.mustAcquire(t, k, "deploy-1")
		again := a.mustAcquire(t, k, "deploy-1")
		if !again.Repeated || again.Fence != g.Fence {
			t.Errorf("again: %+v; want the same grant, repeated", again)
		}
		a.mustRelease(t, k, "deploy-1")
	})

	t.Run("a second hold of the same owner is refused", func(t *testing.T) {
		k := key(t, "two-holds")
		first, err := hold(k, "deploy-1", 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range []bool{true, false} {
			_, err := a.c.Acquire(context.Background(), AcquireRequest{Key: k, Owner: "deploy-1", Hold: h})
			var he *HeldError
			if !errors.As(err, &he) || !he.Twin || he.Fence != first.Fence || he.Holder.Owner != "deploy-1" || !strings.Contains(err.Error(), "never share") {
				t.Errorf("hold %v of the same owner: %v; want a refusal naming the first hold", h, err)
			}
		}
		a.mustRelease(t, k, "deploy-1")
	})

	t.Run("a hold of the owner of a plain lock is refused", func(t *testing.T) {
		k := key(t, "plain-then-hold")
		a.mustAcquire(t, k, "deploy-1")
		if _, err := hold(k, "deploy-1", 0); !errors.Is(err, ErrHeld) {
			t.Errorf("hold after a plain acquire of the same owner: %v; want ErrHeld", err)
		}
		a.mustRelease(t, k, "deploy-1")
	})

	t.Run("a second hold of the same owner waits its turn", func(t *testing.T) {
		k := key(t, "wait")
		first, err := hold(k, "deploy-1", 0)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan Grant, 1)
		go func() {
			g, err := hold(k, "deploy-1", 10*time.Second)
			if err != nil {
				t.Error(err)
			}
			got <- g
		}()
		select {
		case g := <-got:
			t.Fatalf("granted while the first hold runs: %+v", g)
		case <-time.After(300 * time.Millisecond):
		}
		a.mustRelease(t, k, "deploy-1")
		second := <-got
		if second.Fence <= first.Fence || second.Repeated {
			t.Errorf("second hold: %+v; want a grant of its own after fence %d", second, first.Fence)
		}
		a.mustRelease(t, k, "deploy-1")
	})

	t.Run("a semaphore's second hold of one owner is refused too", func(t *testing.T) {
		k := key(t, "sem")
		cl := keyspace.Claim{Limit: 3, Weight: 1}
		if _, err := a.c.Acquire(context.Background(), AcquireRequest{Key: k, Owner: "deploy-1", Claim: cl, Hold: true}); err != nil {
			t.Fatal(err)
		}
		_, err := a.c.Acquire(context.Background(), AcquireRequest{Key: k, Owner: "deploy-1", Claim: cl, Hold: true})
		if !errors.Is(err, ErrHeld) {
			t.Errorf("a second unit by the same owner's hold: %v; want ErrHeld", err)
		}
		a.mustRelease(t, k, "deploy-1")
	})
}

// TestAbandon: a hold whose caller went away without releasing is let go
// with its lock delay kept (the caller's work may still run); without a
// lock delay it is a release.
func TestAbandon(t *testing.T) {
	parallel(t)
	a, b := newSidecar(t, "pod-a"), newSidecar(t, "pod-b")
	const delay = 800 * time.Millisecond
	k := key(t, uniq("abandoned"))
	g, err := a.c.Acquire(context.Background(), AcquireRequest{Key: k, Owner: "run-1", Hold: true, LockDelay: delay})
	if err != nil {
		t.Fatal(err)
	}
	if g.LockDelay != delay {
		t.Errorf("grant's lock delay %v, want %v", g.LockDelay, delay)
	}
	if _, err := a.c.Abandon(context.Background(), k, "run-1"); err != nil {
		t.Fatal(err)
	}
	gone := time.Now()
	if _, err := b.acquire(t, k, "next", 0); !errors.Is(err, ErrHeld) {
		t.Errorf("a try right after the abandon: %v; want held back", err)
	}
	if _, err := b.acquire(t, k, "next", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(gone); d < delay {
		t.Errorf("granted %v after the abandon, within the lock delay %v", d, delay)
	}
	b.mustRelease(t, k, "next")

	plain := key(t, uniq("no-delay"))
	a.mustAcquire(t, plain, "run-2")
	if _, err := a.c.Abandon(context.Background(), plain, "run-2"); err != nil {
		t.Fatal(err)
	}
	b.mustAcquire(t, plain, "next")
}

// TestValidFor: a held lock tells how long it is certainly its holder's if
// the sidecar stopped now: within a lease TTL, plus its lock delay; 0 once
// it ended.
func TestValidFor(t *testing.T) {
	parallel(t)
	a := newSidecar(t, "pod-a")
	k := key(t, uniq("valid"))
	g, err := a.c.Acquire(context.Background(), AcquireRequest{Key: k, Owner: "o", Hold: true, LockDelay: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	ttl := g.LeaseTTL()
	if v := g.ValidFor(now); v <= 3*time.Second || v > ttl+3*time.Second+100*time.Millisecond {
		t.Errorf("valid for %v; want more than the lock delay and at most the lease TTL %v more", v, ttl)
	}
	a.mustRelease(t, k, "o")
	if v := g.ValidFor(time.Now()); v != 0 {
		t.Errorf("valid for %v after the release; want 0", v)
	}
}

// TestWaitForever: a hold may wait without a limit, or longer than the
// sidecar's maximum wait; a plain acquire may not.
func TestWaitForever(t *testing.T) {
	parallel(t)
	a := newSidecar(t, "pod-a", func(c *Config) { c.MaxWait = time.Second })
	k := key(t, "standby")
	a.mustAcquire(t, k, "leader")
	for _, w := range []time.Duration{WaitForever, time.Hour} {
		_, err := a.c.Acquire(context.Background(), AcquireRequest{Key: k, Owner: "plain", Wait: w})
		var inv *InvalidError
		if !errors.As(err, &inv) || inv.Field != "wait" || !strings.Contains(err.Error(), "hold stream") {
			t.Errorf("plain wait %v: %v; want invalid wait pointing at hold streams", w, err)
		}
	}
	got := make(chan error, 1)
	go func() {
		_, err := a.c.Acquire(context.Background(), AcquireRequest{Key: k, Owner: "standby", Wait: WaitForever, Hold: true})
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("a standby returned while the leader holds: %v", err)
	case <-time.After(1500 * time.Millisecond): // past the sidecar's maximum wait
	}
	a.mustRelease(t, k, "leader")
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	a.mustRelease(t, k, "standby")
}

// TestBurstRefusalsNameTheHolder: a burst of tries of one free lock on one
// sidecar grants one, and every refusal names it (owner and fence), also
// those refused while the winner's try was still in flight.
func TestBurstRefusalsNameTheHolder(t *testing.T) {
	parallel(t)
	a := newSidecar(t, "pod-a")
	for round := range 5 {
		k := key(t, uniq("burst"))
		type result struct {
			g   Grant
			err error
		}
		results := make(chan result, 30)
		startGun := make(chan struct{})
		for i := range 30 {
			go func() {
				<-startGun
				g, err := a.c.Acquire(context.Background(), AcquireRequest{Key: k, Owner: fmt.Sprintf("webhook-%d", i)})
				results <- result{g, err}
			}()
		}
		close(startGun)
		var winner Grant
		var refusals []*HeldError
		for range 30 {
			r := <-results
			var he *HeldError
			switch {
			case r.err == nil:
				if winner.Fence != 0 {
					t.Fatalf("round %d: two grants: %+v and %+v", round, winner, r.g)
				}
				winner = r.g
			case errors.As(r.err, &he):
				refusals = append(refusals, he)
			default:
				t.Fatalf("round %d: %v", round, r.err)
			}
		}
		if winner.Fence == 0 || len(refusals) != 29 {
			t.Fatalf("round %d: winner %+v, %d refusals", round, winner, len(refusals))
		}
		for _, he := range refusals {
			if he.Holder.Owner != winner.Owner || he.Fence != winner.Fence {
				t.Errorf("round %d: a refusal names %q (fence %d): %v; want the winner %s (fence %d)", round, he.Holder.Owner, he.Fence, he, winner.Owner, winner.Fence)
			}
		}
		a.mustRelease(t, k, winner.Owner)
	}
}
