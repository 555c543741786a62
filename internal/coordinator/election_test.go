package coordinator

import (
	"context"
	"errors"
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
