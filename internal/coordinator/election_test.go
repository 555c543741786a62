package coordinator

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/keyspace"
)

func elections(c *Config) { c.Space = keyspace.Elections }

// TestProclaim: a leader's value is in its key's record from its grant;
// a proclaim rewrites it, keeping the fence; an extend (a hold's renewal)
// keeps the value proclaimed; only the leader proclaims, and only in an
// election; a lock takes no value, an election no run-once or shares.
func TestProclaim(t *testing.T) {
	parallel(t)
	ctx := context.Background()
	k := key(t, "scheduler")
	a, b := newSidecar(t, "pod-a", elections), newSidecar(t, "pod-b", elections)
	g, err := a.c.Acquire(ctx, AcquireRequest{Key: k, Owner: "replica-1", Value: "10.0.0.1"})
	if err != nil || g.Value != "10.0.0.1" {
		t.Fatalf("campaign: %+v %v", g, err)
	}
	if v := a.first(t, k).Holder.Value; v != "10.0.0.1" {
		t.Fatalf("the leader's record has value %q", v)
	}
	if _, err := b.c.Proclaim(ctx, k, "replica-2", "me"); !errors.Is(err, ErrNotOwner) {
		t.Errorf("a proclaim by another sidecar's owner: %v; want not owner", err)
	}
	if _, err := a.c.Proclaim(ctx, k, "replica-9", "me"); !errors.Is(err, ErrNotOwner) {
		t.Errorf("a proclaim by another owner: %v; want not owner", err)
	}
	p, err := a.c.Proclaim(ctx, k, "replica-1", "10.0.0.1:9090")
	if err != nil || p.Fence != g.Fence || p.Value != "10.0.0.1:9090" {
		t.Fatalf("proclaim: %+v %v; want the fence %d kept", p, err, g.Fence)
	}
	if _, err := a.c.Extend(ctx, k, "replica-1", time.Minute); err != nil {
		t.Fatal(err)
	}
	if v := b.first(t, k).Holder.Value; v != "10.0.0.1:9090" {
		t.Errorf("after an extend the record's value is %q; want the proclaimed one", v)
	}
	if _, err := a.c.Proclaim(ctx, key(t, "nobody"), "replica-1", "x"); !errors.Is(err, ErrNotHeld) {
		t.Errorf("a proclaim of an election nobody leads: %v", err)
	}
	for _, req := range []AcquireRequest{
		{Key: k, Owner: "o", Once: &Once{}},
		{Key: k, Owner: "o", Claim: keyspace.Claim{Mode: keyspace.Read}},
		{Key: k, Owner: "o", Value: string(make([]byte, keyspace.MaxValue+1))},
	} {
		if _, err := b.c.Acquire(ctx, req); !errors.Is(err, ErrInvalid) {
			t.Errorf("campaign %+v: %v; want invalid", req, err)
		}
	}
	locks := newSidecar(t, "pod-c")
	if _, err := locks.c.Acquire(ctx, AcquireRequest{Key: k, Owner: "o", Value: "v"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("a lock with a value: %v; want invalid", err)
	}
	if _, err := locks.c.Proclaim(ctx, k, "o", "v"); !errors.Is(err, ErrInvalid) {
		t.Errorf("a proclaim on the locks: %v; want invalid", err)
	}
}

// TestExtendLeavesTheRecordInStep: after an extend, the holder's record in
// etcd is what the holder says, so the lock keeps no copy of it and
// schedules no write of it (a hold renews every third of its ttl: 100 000
// holds must not each keep a record and a timer).
func TestExtendLeavesTheRecordInStep(t *testing.T) {
	parallel(t)
	ctx := context.Background()
	k := key(t, "renewed")
	a := newSidecar(t, "pod-a")
	if _, err := a.c.Acquire(ctx, AcquireRequest{Key: k, Owner: "o"}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := a.c.Extend(ctx, k, "o", time.Minute); err != nil {
			t.Fatal(err)
		}
		a.c.mu.Lock()
		e := a.c.locks[k.String()]
		kept, due := e.rec != nil, e.publishDue
		a.c.unlock()
		if kept || due {
			t.Fatalf("after an extend the lock keeps a record (%v) or schedules a write of it (%v)", kept, due)
		}
	}
}

// leaderless is an Observer that hears how long elections had no leader.
type leaderless struct {
	nopObserver
	mu    sync.Mutex
	heard map[string][]time.Duration
}

func (o *leaderless) Leaderless(name string, d time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.heard[name] = append(o.heard[name], d)
}

func (o *leaderless) of(name string) []time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]time.Duration(nil), o.heard[name]...)
}

// TestLeaderlessTold: the sidecar of a candidate elected after standing by
// tells how long the election had no leader, its lock delay included after
// a leadership ended otherwise than by resigning; a candidate elected at
// once tells nothing.
func TestLeaderlessTold(t *testing.T) {
	parallel(t)
	ctx := context.Background()
	k := key(t, "scheduler")
	o := &leaderless{heard: map[string][]time.Duration{}}
	w := newWorld(t)
	a := newSidecarOn(t, w, "pod-a", elections)
	b := newSidecarWith(t, w, "pod-b", []Option{WithObserver(o)}, elections)
	if _, err := b.c.Acquire(ctx, AcquireRequest{Key: key(t, "free"), Owner: "replica-2", Hold: true}); err != nil {
		t.Fatal(err)
	}
	if heard := o.of("free"); len(heard) != 0 {
		t.Errorf("a candidate elected at once told %v", heard)
	}
	standBy := func() chan Grant {
		elected := make(chan Grant, 1)
		go func() {
			g, err := b.c.Acquire(ctx, AcquireRequest{Key: k, Owner: "replica-2", Hold: true, Wait: WaitForever})
			if err != nil {
				t.Error(err)
			}
			elected <- g
		}()
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if st, err := a.c.Status(ctx, k); err == nil && st.Waiters == 1 {
				break
			}
		}
		return elected
	}

	g, err := a.c.Acquire(ctx, AcquireRequest{Key: k, Owner: "replica-1"})
	if err != nil {
		t.Fatal(err)
	}
	elected := standBy()
	if _, err := a.c.Release(ctx, k, "replica-1"); err != nil {
		t.Fatal(err)
	}
	g2 := <-elected
	if heard := o.of("scheduler"); len(heard) != 1 || heard[0] < 0 {
		t.Fatalf("after a resignation the new leader's sidecar told %v; want one time without a leader", heard)
	}
	if _, err := b.c.Release(ctx, k, "replica-2"); err != nil || g2.Fence <= g.Fence {
		t.Fatal(err, g2.Fence, g.Fence)
	}

	const delay = time.Second
	g, err = a.c.Acquire(ctx, AcquireRequest{Key: k, Owner: "replica-1", LockDelay: delay})
	if err != nil {
		t.Fatal(err)
	}
	elected = standBy()
	if _, err := b.c.ForceRelease(ctx, k, g.Fence, "test"); err != nil {
		t.Fatal(err)
	}
	<-elected
	if heard := o.of("scheduler"); len(heard) != 2 || heard[1] < delay {
		t.Errorf("after a leader was forced out under a lock delay of %v the new leader's sidecar told %v; want the delay counted", delay, heard)
	}

	// Two candidates of one sidecar: the second waits in the sidecar's
	// own line, not in etcd, and is told too.
	local := key(t, "local")
	if _, err := b.c.Acquire(ctx, AcquireRequest{Key: local, Owner: "replica-3", Hold: true}); err != nil {
		t.Fatal(err)
	}
	next := make(chan error, 1)
	go func() {
		_, err := b.c.Acquire(ctx, AcquireRequest{Key: local, Owner: "replica-4", Hold: true, Wait: WaitForever})
		next <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if st, err := b.c.Status(ctx, local); err == nil && st.Waiters == 1 {
			break
		}
	}
	if _, err := b.c.Release(ctx, local, "replica-3"); err != nil {
		t.Fatal(err)
	}
	if err := <-next; err != nil {
		t.Fatal(err)
	}
	if heard := o.of("local"); len(heard) != 1 {
		t.Errorf("a candidate elected after another of its sidecar resigned: told %v, want one time without a leader", heard)
	}
}
