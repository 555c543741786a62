package coordinator

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/policy"
)

// TestPolicy: with a policy, an acquire it refuses (try or wait) and a
// force release it refuses come back forbidden and write nothing; allowed
// ones proceed; releasing one's own lock is never refused; and a sidecar
// that knows no policy fails closed, not ready.
func TestPolicy(t *testing.T) {
	parallel(t)
	a := newSidecar(t, "pod-a")
	b := newSidecar(t, "pod-b")
	guard := policy.NewGuard("runner", "test", slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	a.c.guard.Policy = guard
	if err := a.c.Ready(); !errors.Is(err, ErrUnavailable) || !errors.Is(err, policy.ErrNoPolicy) {
		t.Fatalf("ready with no policy known: %v", err)
	}
	if _, err := a.acquire(t, key(t, "tf/x"), "o", 0); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "not read yet") {
		t.Fatalf("acquire with no policy known: %v", err)
	}
	guard.Set(policy.Document{Policies: []policy.Policy{{Name: "p", Rules: []policy.Rule{{ServiceAccounts: []string{"runner"}, Keys: []string{"tf/"}, ForceRelease: true}}}}}, "1")
	if err := a.c.Ready(); err != nil {
		t.Fatal(err)
	}

	g := a.mustAcquire(t, key(t, "tf/x"), "o")
	for _, wait := range []time.Duration{0, time.Second} {
		_, err := a.acquire(t, key(t, "other"), "o", wait)
		var f *policy.Forbidden
		if !errors.As(err, &f) || !errors.Is(err, ErrForbidden) || f.Key != "other" {
			t.Errorf("acquire outside the policy (wait %v): %v", wait, err)
		}
	}
	if cs := b.contenders(t, key(t, "other")); len(cs) != 0 {
		t.Errorf("refused acquires left keys: %v", cs)
	}
	b.mustAcquire(t, key(t, "shared"), "ob")
	if _, err := a.c.ForceRelease(context.Background(), key(t, "shared"), 0, "test"); !errors.Is(err, ErrForbidden) {
		t.Errorf("force release outside the rule: %v", err)
	}
	if first := b.first(t, key(t, "shared")); first == nil {
		t.Error("a refused force release deleted the holder")
	}
	// A narrower policy refuses new acquires, never the holder's release.
	guard.Set(policy.Document{Policies: []policy.Policy{{Name: "p", Rules: []policy.Rule{{ServiceAccounts: []string{"runner"}, Keys: []string{"deploy/"}}}}}}, "2")
	if _, err := a.acquire(t, key(t, "tf/y"), "o", 0); !errors.Is(err, ErrForbidden) {
		t.Errorf("acquire after the change: %v", err)
	}
	if _, err := a.c.Release(context.Background(), g.Key, g.Owner); err != nil {
		t.Errorf("release of a lock the policy no longer covers: %v", err)
	}
}

// TestPolicyAtTheGrant: a waiter that queued while the policy allowed it
// is refused when its turn comes under a policy that no longer does (a
// grant is a use of the lock): it is told why, its key is deleted, and the
// next waiter is served.
func TestPolicyAtTheGrant(t *testing.T) {
	parallel(t)
	a, b, c := newSidecar(t, "pod-a"), newSidecar(t, "pod-b"), newSidecar(t, "pod-c")
	guard := policy.NewGuard("runner", "test", slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	a.c.guard.Policy = guard
	allow := func(rev string, keys ...string) {
		guard.Set(policy.Document{Policies: []policy.Policy{{Name: "p", Rules: []policy.Rule{{ServiceAccounts: []string{"runner"}, Keys: keys}}}}}, rev)
	}
	allow("1", "demo/")
	for _, shared := range []bool{false, true} {
		k := key(t, "demo/job")
		var cl keyspace.Claim
		if shared {
			k, cl = key(t, "demo/sem"), keyspace.Claim{Limit: 2, Weight: 2}
		}
		allow("1", "demo/")
		b.mustClaim(t, k, "holder", cl)
		refused := make(chan error, 1)
		go func() {
			_, err := a.c.Acquire(context.Background(), AcquireRequest{Key: k, Owner: "waiter", Wait: 10 * time.Second, Claim: cl})
			refused <- err
		}()
		waitFor(t, 5*time.Second, "the waiter to queue", func() bool { return len(b.contenders(t, k)) == 2 })
		allow("2", "other/") // demo/ is no longer this pod's
		third := make(chan error, 1)
		go func() {
			_, err := c.c.Acquire(context.Background(), AcquireRequest{Key: k, Owner: "third", Wait: 10 * time.Second, Claim: cl})
			third <- err
		}()
		waitFor(t, 5*time.Second, "the third to queue", func() bool { return len(b.contenders(t, k)) == 3 })
		b.mustRelease(t, k, "holder")
		err := <-refused
		var f *policy.Forbidden
		if !errors.As(err, &f) || !strings.Contains(err.Error(), "when its turn came") {
			t.Errorf("shared %v: the waiter queued before the policy changed: %v; want refused at its grant", shared, err)
		}
		if err := <-third; err != nil {
			t.Errorf("shared %v: the next waiter: %v", shared, err)
		}
		c.mustRelease(t, k, "third")
		if cs := b.contenders(t, k); len(cs) != 0 {
			t.Errorf("shared %v: keys left: %v", shared, cs)
		}
	}
}

// TestWaitRidesOutAnUnknownPolicy: while etcd is out of reach the policy
// cannot be known and the sidecar fails closed; a caller that asked to
// wait waits for it within its wait (granted once etcd is back, 503 when
// the wait runs out first), and a try is answered 503 at once.
func TestWaitRidesOutAnUnknownPolicy(t *testing.T) {
	w := newOwnWorld(t)
	a := newSidecarOn(t, w, "pod-a")
	guard := policy.NewGuard("runner", "test", slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	a.c.guard.Policy = guard
	guard.Set(policy.Document{}, "1")
	k := key(t, "ride/out")

	w.down(t)
	guard.Fail(errors.New("etcd is out of reach"))
	if _, err := a.acquire(t, k, "try", 0); !errors.Is(err, ErrUnavailable) {
		t.Errorf("a try while the policy is unknown: %v", err)
	}
	began := time.Now()
	if _, err := a.acquire(t, k, "short", 700*time.Millisecond); !errors.Is(err, ErrUnavailable) || time.Since(began) < 600*time.Millisecond {
		t.Errorf("a wait of 700ms while etcd stays away: %v after %v; want 503 once the wait ran out", err, time.Since(began))
	}
	got := make(chan error, 1)
	go func() {
		_, err := a.acquire(t, k, "patient", 20*time.Second)
		got <- err
	}()
	time.Sleep(500 * time.Millisecond)
	select {
	case err := <-got:
		t.Fatalf("the wait ended while etcd was away: %v", err)
	default:
	}
	w.up(t)
	guard.Set(policy.Document{}, "2")
	if err := <-got; err != nil {
		t.Fatalf("the wait after etcd came back: %v", err)
	}
	a.mustRelease(t, k, "patient")
}

// TestWaiterKeepsItsPlaceWhilePolicyUnknown: a waiter whose turn comes
// while the policy cannot be known keeps its key and waits for the policy,
// within its wait; it is granted once the policy allows it again.
func TestWaiterKeepsItsPlaceWhilePolicyUnknown(t *testing.T) {
	parallel(t)
	a, b := newSidecar(t, "pod-a"), newSidecar(t, "pod-b")
	guard := policy.NewGuard("runner", "test", slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	a.c.guard.Policy = guard
	guard.Set(policy.Document{}, "1")
	k := key(t, "unknown/at-turn")
	b.mustAcquire(t, k, "holder")
	got := make(chan error, 1)
	go func() {
		_, err := a.c.Acquire(context.Background(), AcquireRequest{Key: k, Owner: "waiter", Wait: 20 * time.Second})
		got <- err
	}()
	waitFor(t, 5*time.Second, "the waiter to queue", func() bool { return len(b.contenders(t, k)) == 2 })
	guard.Fail(errors.New("the policy file is being rewritten"))
	b.mustRelease(t, k, "holder")
	select {
	case err := <-got:
		t.Fatalf("the waiter ended while the policy was unknown: %v", err)
	case <-time.After(700 * time.Millisecond):
	}
	if cs := b.contenders(t, k); len(cs) != 1 {
		t.Errorf("the waiter's key: %v; want it kept", cs)
	}
	guard.Set(policy.Document{}, "2")
	if err := <-got; err != nil {
		t.Fatalf("the waiter once the policy is known again: %v", err)
	}
	a.mustRelease(t, k, "waiter")
}
