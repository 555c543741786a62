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
	defrags                *prometheus.CounterVec
}

var _ etcdmaint.Observer = (*Etcd)(nil)

// NewEtcd registers the maintenance's series on reg, taking over those
// registered there before (tests run several maintainers in a process).
func NewEtcd(reg prometheus.Registerer) (*Etcd, error) {
	member := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, []string{"member"})
	}
	e := &Etcd{
		size:  member("baton_etcd_db_size_bytes", "Size of each etcd member's database file, as Baton's etcd maintenance last saw it; etcd's space quota counts it."),
		inUse: member("baton_etcd_db_size_in_use_bytes", "Part of each etcd member's database file in use; the rest is given back by a defragmentation."),
		quota: member("baton_etcd_quota_bytes", "Each etcd member's space quota (--quota-backend-bytes): at it, etcd raises its NOSPACE alarm."),
		up:    member("baton_etcd_member_up", "1 when the etcd member answered Baton's etcd maintenance's last look, 0 when it did not."),
		alarms: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "baton_etcd_alarm", Help: "1 while the alarm is raised on the etcd member (NOSPACE: it takes no writes; CORRUPT: it serves nothing), 0 while not, as Baton's etcd maintenance last saw them: from the start of its look that found one to the next.",
		}, []string{"member", "alarm"}),
		defrags: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_etcd_defragmentations_total", Help: "Defragmentations of etcd members by Baton's etcd maintenance, by reason (fragmented, near_quota, no_space) and result (ok, failed).",
		}, []string{"reason", "result"}),
	}
	for _, g := range []**prometheus.GaugeVec{&e.size, &e.inUse, &e.quota, &e.up, &e.alarms} {
		var err error
		if *g, err = Register(reg, *g); err != nil {
			return nil, err
		}
	}
	var err error
	if e.defrags, err = Register(reg, e.defrags); err != nil {
		return nil, err
	}
	for _, why := range []etcdmaint.Reason{etcdmaint.Fragmented, etcdmaint.NearQuota, etcdmaint.NoSpace} {
		for _, result := range []string{"ok", "failed"} {
			e.defrags.WithLabelValues(string(why), result)
		}
	}
	return e, nil
}

// Saw implements etcdmaint.Observer. Each member's alarms are series of
// their own, 0 or 1, and of a member that did not answer too (etcd lists
// its alarms through the others).
func (e *Etcd) Saw(members []etcdmaint.Member) {
	e.alarms.Reset()
	for _, m := range members {
		for _, a := range [...]string{"NOSPACE", "CORRUPT"} { // etcd's alarms
			e.alarms.WithLabelValues(m.Name, a).Set(0)
		}
		for _, a := range m.Alarms {
			e.alarms.WithLabelValues(m.Name, a).Set(1)
		}
		if m.Err != nil {
			e.up.WithLabelValues(m.Name).Set(0)
			continue
		}
		e.up.WithLabelValues(m.Name).Set(1)
		e.size.WithLabelValues(m.Name).Set(float64(m.Size))
		e.inUse.WithLabelValues(m.Name).Set(float64(m.InUse))
		e.quota.WithLabelValues(m.Name).Set(float64(m.Quota))
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
