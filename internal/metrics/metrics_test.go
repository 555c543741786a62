package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestKeyLabelDepth(t *testing.T) {
	for depth, want := range map[int]string{1: "tenant-a", 2: "tenant-a/billing", 3: "tenant-a/billing/run", 8: "tenant-a/billing/run"} {
		m, err := New(prometheus.NewRegistry(), depth)
		if err != nil {
			t.Fatal(err)
		}
		if got := m.labels("tenant-a/billing/run", "granted"); len(got) != 2 || got[1] != want {
			t.Errorf("depth %d: labels %v, want key %q", depth, got, want)
		}
	}
	if _, err := New(prometheus.NewRegistry(), -1); err == nil {
		t.Error("negative depth accepted")
	}
}

func TestNoKeyLabelByDefault(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg, 0)
	if err != nil {
		t.Fatal(err)
	}
	m.Acquired("a/b", "granted", false, 0)
	m.Granted("a/b")
	m.Ended("a/b", "lease_lost", time.Second)
	m.SessionLost()
	want := `
# HELP baton_locks_lost_total Locks that ended without their owner's release, by reason.
# TYPE baton_locks_lost_total counter
baton_locks_lost_total{reason="lease_lost"} 1
# HELP baton_session_lost_total etcd sessions (leases) lost: each loses every lock it carried.
# TYPE baton_session_lost_total counter
baton_session_lost_total 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "baton_locks_lost_total", "baton_session_lost_total"); err != nil {
		t.Error(err)
	}
	if _, err := New(reg, 0); err == nil {
		t.Error("registering twice on one registry succeeded")
	}
}

// TestBatchSize: each etcd transaction's count of lock operations lands in
// the batch size histogram's buckets.
func TestBatchSize(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1, 1, 5, 64} {
		m.Committed(n)
	}
	want := `
# HELP baton_etcd_txn_batch_size Lock operations (tries, queueings, releases, extends) carried by each etcd transaction: more than 1 when requests arrive together (group commit).
# TYPE baton_etcd_txn_batch_size histogram
baton_etcd_txn_batch_size_bucket{le="1"} 2
baton_etcd_txn_batch_size_bucket{le="2"} 2
baton_etcd_txn_batch_size_bucket{le="4"} 2
baton_etcd_txn_batch_size_bucket{le="8"} 3
baton_etcd_txn_batch_size_bucket{le="16"} 3
baton_etcd_txn_batch_size_bucket{le="32"} 3
baton_etcd_txn_batch_size_bucket{le="64"} 4
baton_etcd_txn_batch_size_bucket{le="+Inf"} 4
baton_etcd_txn_batch_size_sum 71
baton_etcd_txn_batch_size_count 4
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "baton_etcd_txn_batch_size"); err != nil {
		t.Error(err)
	}
}

// TestSemaphoreUnits: units held and waited for move by limit.
func TestSemaphoreUnits(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg, 0)
	if err != nil {
		t.Fatal(err)
	}
	m.Units("tenant-a/pipelines", 4, true, 2)
	m.Units("tenant-a/pipelines", 4, true, 1)
	m.Units("tenant-b/pipelines", 4, false, 1)
	m.Units("tenant-a/pipelines", 4, true, -1)
	want := `
# HELP baton_semaphore_units Units of semaphores held (state=held) or waited for (state=waiting) by this sidecar's callers, by the semaphore's limit.
# TYPE baton_semaphore_units gauge
baton_semaphore_units{limit="4",state="held"} 2
baton_semaphore_units{limit="4",state="waiting"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "baton_semaphore_units"); err != nil {
		t.Error(err)
	}
}
