package lease

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// putOn attaches n keys under pfx to the leases LeaseFor picks, counting
// the session's load as it grows, and returns how many each lease got.
func putOn(t *testing.T, cli *clientv3.Client, s *Session, pfx string, load, n int) map[clientv3.LeaseID]int {
	t.Helper()
	per := map[clientv3.LeaseID]int{}
	for i := range n {
		id := s.LeaseFor(load + i)
		if _, err := cli.Put(context.Background(), fmt.Sprintf("%s/%d", pfx, load+i), "x", clientv3.WithLease(id)); err != nil {
			t.Fatal(err)
		}
		per[id]++
	}
	return per
}

// waitLeases waits until s has n leases.
func waitLeases(t *testing.T, s *Session, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(s.IDs()) < n {
		if time.Now().After(deadline) {
			t.Fatalf("session has %d leases, want %d", len(s.IDs()), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestSessionSpreadsKeysOverLeases: a session starts with one lease, adds
// leases as its load passes KeysPerLease per lease (doubling, up to
// MaxLeases), spreads new keys evenly, and Revoke deletes the keys of every
// lease.
func TestSessionSpreadsKeysOverLeases(t *testing.T) {
	cli, _ := testEtcd.Client(t)
	ctx := context.Background()
	cfg := testConfig()
	cfg.KeysPerLease, cfg.MaxLeases = 4, 8
	s, err := Open(ctx, cli, cfg)
	if err != nil {
		t.Fatal(err)
	}
	pfx := "/spread/" + t.Name()

	if per := putOn(t, cli, s, pfx, 0, 4); len(per) != 1 || per[s.ID()] != 4 {
		t.Fatalf("first %d keys went to %v; want all on the first lease", cfg.KeysPerLease, per)
	}
	if got := len(s.IDs()); got != 1 {
		t.Fatalf("%d leases before the load reached KeysPerLease; want 1", got)
	}
	s.LeaseFor(4) // 4 keys on 1 lease: time for a second
	waitLeases(t, s, 2)
	s.LeaseFor(8)
	waitLeases(t, s, 4)
	per := putOn(t, cli, s, pfx, 8, 40) // asks for 8 leases, the cap
	waitLeases(t, s, 8)
	if got := len(s.IDs()); got != cfg.MaxLeases {
		t.Fatalf("%d leases; want MaxLeases %d", got, cfg.MaxLeases)
	}
	for id, n := range per {
		if !s.Owns(id) {
			t.Fatalf("LeaseFor returned %x, not a lease of the session", int64(id))
		}
		if n > 40/4+1 {
			t.Errorf("lease %x got %d of 40 keys spread over at least 4 leases", int64(id), n)
		}
	}
	for _, id := range s.IDs() {
		ttl, err := cli.TimeToLive(ctx, id)
		if err != nil || ttl.TTL <= 0 {
			t.Fatalf("lease %x is not alive: TTL %v, %v", int64(id), ttl.TTL, err)
		}
	}

	time.Sleep(2500 * time.Millisecond) // past the TTL: only renewals keep them
	if !s.Alive() {
		t.Fatal("session ended while etcd was reachable")
	}
	if n := count(t, cli, pfx); n != 44 {
		t.Fatalf("%d keys after a TTL; want 44 (the leases are renewed)", n)
	}
	if err := s.Revoke(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(t, cli, pfx); n != 0 {
		t.Fatalf("%d keys left after Revoke", n)
	}
	for _, id := range s.IDs() {
		if ttl, err := cli.TimeToLive(ctx, id); err != nil || ttl.TTL != -1 {
			t.Errorf("lease %x after Revoke: TTL %v, %v; want revoked", int64(id), ttl.TTL, err)
		}
	}
}

// TestSessionEndsWithAnyLease: losing one lease of a session ends it; its
// other leases are no longer renewed.
func TestSessionEndsWithAnyLease(t *testing.T) {
	cli, _ := testEtcd.Client(t)
	ctx := context.Background()
	cfg := testConfig()
	cfg.KeysPerLease = 1
	s, err := Open(ctx, cli, cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.LeaseFor(1)
	waitLeases(t, s, 2)
	second := s.IDs()[1]
	if _, err := cli.Revoke(ctx, second); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the session lives on without one of its leases")
	}
	if got := s.LeaseFor(100); !s.Owns(got) || len(s.IDs()) != 2 {
		t.Errorf("an ended session grew: %d leases", len(s.IDs()))
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		ttl, err := cli.TimeToLive(ctx, s.ID())
		if err == nil && ttl.TTL == -1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the first lease is still renewed after the session ended: TTL %v, %v", ttl.TTL, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestResumeKeepsTheLeasesStillAlive: a restarted process resumes the
// leases of its predecessor that etcd still has, and fails only when none
// is left.
func TestResumeKeepsTheLeasesStillAlive(t *testing.T) {
	cli, _ := testEtcd.Client(t)
	ctx := context.Background()
	cfg := testConfig()
	// The leases outlive the session's own TTL, so a slow machine between
	// the grant and the resume cannot leave them with less than the loss
	// margin (a resumed lease with too little left is rightly given up).
	const grantTTL = 4
	granted := time.Now()
	var ids []clientv3.LeaseID
	for range 3 {
		g, err := cli.Grant(ctx, grantTTL)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, g.ID)
	}
	if _, err := cli.Revoke(ctx, ids[1]); err != nil {
		t.Fatal(err)
	}
	s, err := Resume(ctx, cli, cfg, ids...)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.IDs(); len(got) != 2 || got[0] != ids[0] || got[1] != ids[2] || !s.Resumed() {
		t.Fatalf("resumed %x (resumed=%v); want %x", got, s.Resumed(), []clientv3.LeaseID{ids[0], ids[2]})
	}
	// Past the granted TTL, only renewals can have kept them.
	time.Sleep(time.Until(granted.Add(grantTTL*time.Second + 500*time.Millisecond)))
	if !s.Alive() {
		t.Fatal("the resumed session ended")
	}
	for _, id := range []clientv3.LeaseID{ids[0], ids[2]} {
		if ttl, err := cli.TimeToLive(ctx, id); err != nil || ttl.TTL <= 0 {
			t.Errorf("resumed lease %x not renewed: TTL %v, %v", int64(id), ttl.TTL, err)
		}
	}
	if err := s.Revoke(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := Resume(ctx, cli, cfg, ids...); !errors.Is(err, ErrLeaseGone) {
		t.Fatalf("Resume of revoked leases: %v; want ErrLeaseGone", err)
	}
}

func count(t *testing.T, cli *clientv3.Client, pfx string) int64 {
	t.Helper()
	r, err := cli.Get(context.Background(), pfx, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return r.Count
}
