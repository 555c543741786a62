package etcdbackup

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestMetrics: a restart reads the newest snapshot kept as the
// last backup; each snapshot written moves it on; failures are counted,
// and both results exist from the start.
func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	b, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(b.taken); n != 2 {
		t.Errorf("%d series of baton_etcd_backups_total before any backup, want ok and failed (2)", n)
	}
	b.Scheduled(time.Hour)
	b.Kept(nil, 0)
	if v := testutil.ToFloat64(b.last); v != 0 {
		t.Errorf("last backup %v with none kept, want 0", v)
	}
	taken := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	b.Kept(&Backup{Taken: taken, Revision: 7, Size: 4096}, 3)
	b.Failed(errors.New("etcd did not answer"))
	b.Took(Backup{Taken: taken.Add(time.Hour), Revision: 9, Size: 8192}, time.Second)
	b.Kept(&Backup{Taken: taken.Add(time.Hour), Revision: 9, Size: 8192}, 4)
	want := `
# HELP baton_etcd_backup_interval_seconds How often a snapshot of etcd is taken (etcd.backup.every).
# TYPE baton_etcd_backup_interval_seconds gauge
baton_etcd_backup_interval_seconds 3600
# HELP baton_etcd_backup_last_revision etcd's revision that the newest snapshot kept holds.
# TYPE baton_etcd_backup_last_revision gauge
baton_etcd_backup_last_revision 9
# HELP baton_etcd_backup_last_size_bytes Size of the newest snapshot of etcd kept.
# TYPE baton_etcd_backup_last_size_bytes gauge
baton_etcd_backup_last_size_bytes 8192
# HELP baton_etcd_backups_kept Snapshots of etcd kept in the backups' volume.
# TYPE baton_etcd_backups_kept gauge
baton_etcd_backups_kept 4
# HELP baton_etcd_backups_total Snapshots of etcd taken on the schedule, by result (ok, failed); one that failed is tried again a minute later.
# TYPE baton_etcd_backups_total counter
baton_etcd_backups_total{result="failed"} 1
baton_etcd_backups_total{result="ok"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "baton_etcd_backup_interval_seconds", "baton_etcd_backup_last_revision",
		"baton_etcd_backup_last_size_bytes", "baton_etcd_backups_kept", "baton_etcd_backups_total"); err != nil {
		t.Error(err)
	}
	if v, want := testutil.ToFloat64(b.last), float64(taken.Add(time.Hour).Unix()); v != want {
		t.Errorf("last backup at %v, want %v", v, want)
	}
}
