package metrics

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// heldLocks is a set of held locks as the coordinator reports them.
type heldLocks struct {
	locks []heldLock
	down  error
}

type heldLock struct {
	key                   string
	acquiredAt, expiresAt time.Time
	ttl                   time.Duration
}

func (h *heldLocks) VisitHeld(f func(key string, acquiredAt, expiresAt time.Time, ttl time.Duration)) {
	for _, l := range h.locks {
		f(l.key, l.acquiredAt, l.expiresAt, l.ttl)
	}
}

func (h *heldLocks) Ready() error { return h.down }

// TestHeldGauges: at each scrape, the largest share of its ttl a held lock
// has run through and the oldest lock's age, per key label; a lock
// extended starts its window again; and whether the sidecar can grant.
func TestHeldGauges(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	src := &heldLocks{locks: []heldLock{
		// 80 s into a 100 s ttl: 0.8.
		{"tenant-a/report", now.Add(-80 * time.Second), now.Add(20 * time.Second), 100 * time.Second},
		// Held an hour, extended 10 s ago by 1m: 10/60 of its window.
		{"tenant-a/renewed", now.Add(-time.Hour), now.Add(50 * time.Second), time.Minute},
		// Past its deadline, not yet ended: 1, no more.
		{"tenant-b/late", now.Add(-2 * time.Minute), now.Add(-time.Second), time.Minute},
	}}
	reg := prometheus.NewRegistry()
	m, err := New(reg, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.RegisterHeld(reg, src, func() time.Time { return now }); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP baton_lock_oldest_held_seconds How long the oldest lock held by this sidecar's callers has been held. 0 when none is held.
# TYPE baton_lock_oldest_held_seconds gauge
baton_lock_oldest_held_seconds{key="tenant-a"} 3600
baton_lock_oldest_held_seconds{key="tenant-b"} 120
# HELP baton_lock_ttl_used_ratio The largest share of its ttl that a lock held by this sidecar's callers has run through since it was granted, extended or renewed: 1 is its deadline. 0 when none is held.
# TYPE baton_lock_ttl_used_ratio gauge
baton_lock_ttl_used_ratio{key="tenant-a"} 0.8
baton_lock_ttl_used_ratio{key="tenant-b"} 1
# HELP baton_ready 1 while this sidecar can grant locks (a live etcd session, its scope and its lock policy), else 0.
# TYPE baton_ready gauge
baton_ready 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "baton_lock_ttl_used_ratio", "baton_lock_oldest_held_seconds", "baton_ready"); err != nil {
		t.Error(err)
	}

	// No key label, nothing held, etcd out of reach.
	reg = prometheus.NewRegistry()
	if m, err = New(reg, 0); err != nil {
		t.Fatal(err)
	}
	if err := m.RegisterHeld(reg, &heldLocks{down: errors.New("no session")}, func() time.Time { return now }); err != nil {
		t.Fatal(err)
	}
	want = `
# HELP baton_lock_oldest_held_seconds How long the oldest lock held by this sidecar's callers has been held. 0 when none is held.
# TYPE baton_lock_oldest_held_seconds gauge
baton_lock_oldest_held_seconds 0
# HELP baton_lock_ttl_used_ratio The largest share of its ttl that a lock held by this sidecar's callers has run through since it was granted, extended or renewed: 1 is its deadline. 0 when none is held.
# TYPE baton_lock_ttl_used_ratio gauge
baton_lock_ttl_used_ratio 0
# HELP baton_ready 1 while this sidecar can grant locks (a live etcd session, its scope and its lock policy), else 0.
# TYPE baton_ready gauge
baton_ready 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "baton_lock_ttl_used_ratio", "baton_lock_oldest_held_seconds", "baton_ready"); err != nil {
		t.Error(err)
	}
}

// TestCountersStartAtZero: the loss counters of every reason (without key
// labels) and the injector's of every result exist at 0 before the first
// count, so that Prometheus sees the first increase.
func TestCountersStartAtZero(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg, 0)
	if err != nil {
		t.Fatal(err)
	}
	m.InitLossReasons("expired", "lease_lost")
	c, err := NewController(reg)
	if err != nil {
		t.Fatal(err)
	}
	c.InitInjections("injected", "failed")
	c.Injected("injected")
	want := `
# HELP baton_controller_injections_total Pod admissions the sidecar injector answered, by result: injected, skipped (admitted as it was), refused (conflicting annotations or names), failed (the injector could not answer).
# TYPE baton_controller_injections_total counter
baton_controller_injections_total{result="failed"} 0
baton_controller_injections_total{result="injected"} 1
# HELP baton_locks_lost_total Locks that ended without their owner's release, by reason.
# TYPE baton_locks_lost_total counter
baton_locks_lost_total{reason="expired"} 0
baton_locks_lost_total{reason="lease_lost"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "baton_locks_lost_total", "baton_controller_injections_total"); err != nil {
		t.Error(err)
	}
	// With key labels there is no series to start: the key is not known.
	reg = prometheus.NewRegistry()
	if m, err = New(reg, 1); err != nil {
		t.Fatal(err)
	}
	m.InitLossReasons("expired")
	if n, err := testutil.GatherAndCount(reg, "baton_locks_lost_total"); err != nil || n != 0 {
		t.Errorf("%d loss series with key labels before any loss (%v), want none", n, err)
	}
}
