package metrics

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/baton-dev/baton/internal/etcdmaint"
)

// TestEtcdSeries: each member's sizes and alarms as the last pass saw
// them (an alarm gone is 0), a member that did not answer as down with its
// alarms, and defragmentations by reason and result.
func TestEtcdSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	e, err := NewEtcd(reg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewEtcd(reg); err != nil {
		t.Fatalf("a second maintainer's series: %v", err)
	}
	e.Saw([]etcdmaint.Member{{Name: "etcd-0", Size: 100, InUse: 40, Quota: 1000, Alarms: []string{"NOSPACE"}}})
	e.Saw([]etcdmaint.Member{{Name: "etcd-0", Size: 50, InUse: 40, Quota: 1000}, {Name: "etcd-1", Err: errors.New("down")}})
	e.Defragmented("etcd-0", etcdmaint.NoSpace, time.Second, nil)
	e.Defragmented("etcd-0", etcdmaint.Fragmented, time.Second, errors.New("timed out"))
	want := `
# HELP baton_etcd_db_size_bytes Size of each etcd member's database file, as Baton's etcd maintenance last saw it; etcd's space quota counts it.
# TYPE baton_etcd_db_size_bytes gauge
baton_etcd_db_size_bytes{member="etcd-0"} 50
# HELP baton_etcd_member_up 1 when the etcd member answered Baton's etcd maintenance's last look, 0 when it did not.
# TYPE baton_etcd_member_up gauge
baton_etcd_member_up{member="etcd-0"} 1
baton_etcd_member_up{member="etcd-1"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "baton_etcd_db_size_bytes", "baton_etcd_member_up"); err != nil {
		t.Error(err)
	}
	if n := testutil.ToFloat64(e.defrags.WithLabelValues("no_space", "ok")); n != 1 {
		t.Errorf("no_space defragmentations %v, want 1", n)
	}
	if n := testutil.ToFloat64(e.defrags.WithLabelValues("fragmented", "failed")); n != 1 {
		t.Errorf("failed defragmentations %v, want 1", n)
	}
	e.Saw([]etcdmaint.Member{{Name: "etcd-0", Size: 50, InUse: 40, Quota: 1000}, {Name: "etcd-1", Err: errors.New("down"), Alarms: []string{"CORRUPT"}}})
	if n := testutil.ToFloat64(e.alarms.WithLabelValues("etcd-1", "CORRUPT")); n != 1 {
		t.Errorf("the CORRUPT alarm of a member that does not answer: %v, want 1", n)
	}
	if n := testutil.CollectAndCount(e.alarms); n != 4 {
		t.Errorf("%d alarm series, want each alarm of each member (4)", n)
	}
	if n := testutil.CollectAndCount(e.defrags); n != 6 {
		t.Errorf("%d defragmentation series, want every reason and result from the start (6)", n)
	}
}
