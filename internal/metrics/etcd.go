package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/baton-dev/baton/internal/etcdmaint"
)

// Etcd is what Baton's etcd maintenance (package etcdmaint) saw of the
// etcd it keeps, and did: the series of the space alerts, which hold for
// the embedded etcd too, whose own metrics nobody scrapes.
type Etcd struct {
	size, inUse, quota, up *prometheus.GaugeVec
	alarms                 *prometheus.GaugeVec
	alarmsSeen, defrags    *prometheus.CounterVec
}

var _ etcdmaint.Observer = (*Etcd)(nil)

// NewEtcd registers the maintenance's series on reg, taking over those
// registered there before (tests run several maintainers in a process).
func NewEtcd(reg prometheus.Registerer) (*Etcd, error) {
	member := []string{"member"}
	e := &Etcd{
		size: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "baton_etcd_db_size_bytes", Help: "Size of each etcd member's database file, as Baton's etcd maintenance last saw it; etcd's space quota counts it.",
		}, member),
		inUse: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "baton_etcd_db_size_in_use_bytes", Help: "Part of each etcd member's database file in use; the rest is given back by a defragmentation.",
		}, member),
		quota: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "baton_etcd_quota_bytes", Help: "Each etcd member's space quota (--quota-backend-bytes): at it, etcd raises its NOSPACE alarm.",
		}, member),
		up: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "baton_etcd_member_up", Help: "1 when the etcd member answered Baton's etcd maintenance's last look, 0 when it did not.",
		}, member),
		alarms: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "baton_etcd_alarm", Help: "1 for each alarm raised on an etcd member (NOSPACE: it takes no writes; CORRUPT: it serves nothing), as Baton's etcd maintenance last saw them.",
		}, []string{"member", "alarm"}),
		alarmsSeen: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_etcd_alarms_seen_total", Help: "Looks of Baton's etcd maintenance that found an alarm raised on an etcd member, by member and alarm (NOSPACE, CORRUPT): it rises while one is raised, and never falls.",
		}, []string{"member", "alarm"}),
		defrags: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_etcd_defragmentations_total", Help: "Defragmentations of etcd members by Baton's etcd maintenance, by reason (fragmented, near_quota, no_space) and result (ok, failed).",
		}, []string{"reason", "result"}),
	}
	for _, g := range []**prometheus.GaugeVec{&e.size, &e.inUse, &e.quota, &e.up, &e.alarms} {
		existing, err := register(reg, *g)
		if err != nil {
			return nil, err
		}
		*g = existing.(*prometheus.GaugeVec)
	}
	for _, c := range []**prometheus.CounterVec{&e.alarmsSeen, &e.defrags} {
		existing, err := register(reg, *c)
		if err != nil {
			return nil, err
		}
		*c = existing.(*prometheus.CounterVec)
	}
	for _, why := range []etcdmaint.Reason{etcdmaint.Fragmented, etcdmaint.NearQuota, etcdmaint.NoSpace} {
		for _, result := range []string{"ok", "failed"} {
			e.defrags.WithLabelValues(string(why), result)
		}
	}
	return e, nil
}

// Saw implements etcdmaint.Observer.
func (e *Etcd) Saw(members []etcdmaint.Member) {
	e.alarms.Reset()
	for _, m := range members {
		if m.Err != nil {
			e.up.WithLabelValues(m.Name).Set(0)
			continue
		}
		e.up.WithLabelValues(m.Name).Set(1)
		e.size.WithLabelValues(m.Name).Set(float64(m.Size))
		e.inUse.WithLabelValues(m.Name).Set(float64(m.InUse))
		e.quota.WithLabelValues(m.Name).Set(float64(m.Quota))
		for _, a := range [...]string{"NOSPACE", "CORRUPT"} { // etcd's alarms
			e.alarmsSeen.WithLabelValues(m.Name, a) // at 0, so that an alert on its increase sees the first
		}
		for _, a := range m.Alarms {
			e.alarms.WithLabelValues(m.Name, a).Set(1)
			e.alarmsSeen.WithLabelValues(m.Name, a).Inc()
		}
	}
}

// Defragmented implements etcdmaint.Observer.
func (e *Etcd) Defragmented(_ string, why etcdmaint.Reason, _ time.Duration, err error) {
	result := "ok"
	if err != nil {
		result = "failed"
	}
	e.defrags.WithLabelValues(string(why), result).Inc()
}
