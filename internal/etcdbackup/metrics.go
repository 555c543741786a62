package etcdbackup

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/baton-dev/baton/internal/metrics"
)

// Metrics is an Observer that makes what Run did Prometheus series, which
// the alert BatonEtcdBackupMissing reads. It lives here rather than in
// package metrics, which the lean sidecar builds: this package brings in
// etcd's server side (bbolt, etcdutl). The last backup is the newest
// snapshot kept as Run finds them: at its start too, so that a restarted
// backup pod does not read as one that never wrote a backup, and one
// taken by hand counts.
type Metrics struct {
	every, last, revision, size, kept prometheus.Gauge
	taken                             *prometheus.CounterVec
}

var _ Observer = (*Metrics)(nil)

// NewMetrics registers the backups' series on reg, taking over those
// registered there before.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	}
	b := &Metrics{
		every:    gauge("baton_etcd_backup_interval_seconds", "How often a snapshot of etcd is taken (etcd.backup.every)."),
		last:     gauge("baton_etcd_backup_last_success_timestamp_seconds", "When the newest snapshot of etcd kept was taken (on the schedule or by hand), in Unix seconds; 0 while none is kept."),
		revision: gauge("baton_etcd_backup_last_revision", "etcd's revision that the newest snapshot kept holds."),
		size:     gauge("baton_etcd_backup_last_size_bytes", "Size of the newest snapshot of etcd kept."),
		kept:     gauge("baton_etcd_backups_kept", "Snapshots of etcd kept in the backups' volume."),
		taken: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_etcd_backups_total", Help: "Snapshots of etcd taken on the schedule, by result (ok, failed); one that failed is tried again a minute later.",
		}, []string{"result"}),
	}
	for _, g := range []*prometheus.Gauge{&b.every, &b.last, &b.revision, &b.size, &b.kept} {
		var err error
		if *g, err = metrics.Register(reg, *g); err != nil {
			return nil, err
		}
	}
	var err error
	if b.taken, err = metrics.Register(reg, b.taken); err != nil {
		return nil, err
	}
	for _, result := range []string{"ok", "failed"} {
		b.taken.WithLabelValues(result)
	}
	return b, nil
}

// Scheduled implements Observer.
func (b *Metrics) Scheduled(every time.Duration) { b.every.Set(every.Seconds()) }

// Kept implements Observer: the last backup is the newest kept.
func (b *Metrics) Kept(newest *Backup, kept int) {
	b.kept.Set(float64(kept))
	if newest == nil {
		b.last.Set(0)
		b.revision.Set(0)
		b.size.Set(0)
		return
	}
	b.newest(*newest)
}

// Took implements Observer.
func (b *Metrics) Took(bk Backup, _ time.Duration) {
	b.taken.WithLabelValues("ok").Inc()
	b.newest(bk)
}

// Failed implements Observer.
func (b *Metrics) Failed(error) { b.taken.WithLabelValues("failed").Inc() }

func (b *Metrics) newest(bk Backup) {
	b.last.Set(float64(bk.Taken.UnixNano()) / 1e9)
	b.revision.Set(float64(bk.Revision))
	b.size.Set(float64(bk.Size))
}
