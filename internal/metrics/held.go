package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// HeldLocks is what the gauges of the held locks read at each scrape: the
// coordinator.
type HeldLocks interface {
	// VisitHeld calls f for each lock held now: its key, when it was
	// granted, when it expires, and the window its last grant, extend or
	// renewal set.
	VisitHeld(f func(key string, acquiredAt, expiresAt time.Time, ttl time.Duration))
	// Ready reports nil when the sidecar can grant locks.
	Ready() error
}

// heldCollector reads the held locks at each scrape: what an alert on a lock
// about to expire, or held for too long, and one on a sidecar that cannot
// grant, need. A gauge kept up to date at each grant could not know how
// far a lock has run through its ttl; reading the locks when Prometheus asks
// costs nothing between scrapes.
type heldCollector struct {
	m     *Metrics
	src   HeldLocks
	now   func() time.Time
	ratio *prometheus.Desc
	age   *prometheus.Desc
	ready *prometheus.Desc
}

// RegisterHeld registers on reg the gauges read from src at each scrape:
// baton_lock_ttl_used_ratio, baton_lock_oldest_held_seconds (with the key
// label of New's keyDepth) and baton_ready.
func (m *Metrics) RegisterHeld(reg prometheus.Registerer, src HeldLocks, now func() time.Time) error {
	var key []string
	if m.keyDepth > 0 {
		key = []string{"key"}
	}
	return reg.Register(&heldCollector{m: m, src: src, now: now,
		ratio: prometheus.NewDesc("baton_lock_ttl_used_ratio",
			"The largest share of its ttl that a lock held by this sidecar's callers has run through since it was granted, extended or renewed: 1 is its deadline. 0 when none is held.", key, nil),
		age: prometheus.NewDesc("baton_lock_oldest_held_seconds",
			"How long the oldest lock held by this sidecar's callers has been held. 0 when none is held.", key, nil),
		ready: prometheus.NewDesc("baton_ready",
			"1 while this sidecar can grant locks (a live etcd session, its scope and its lock policy), else 0.", nil, nil),
	})
}

// Describe implements prometheus.Collector.
func (c *heldCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.ratio
	ch <- c.age
	ch <- c.ready
}

// heldStats are the held locks of one label's keys.
type heldStats struct{ ratio, age float64 }

// Collect implements prometheus.Collector.
func (c *heldCollector) Collect(ch chan<- prometheus.Metric) {
	now := c.now()
	by := map[string]*heldStats{}
	if c.m.keyDepth == 0 {
		by[""] = &heldStats{} // a sidecar holding nothing says so
	}
	c.src.VisitHeld(func(key string, acquiredAt, expiresAt time.Time, ttl time.Duration) {
		label := ""
		if c.m.keyDepth > 0 {
			label = c.m.labels(key)[0]
		}
		s := by[label]
		if s == nil {
			s = &heldStats{}
			by[label] = s
		}
		s.ratio = max(s.ratio, usedRatio(now, expiresAt, ttl))
		s.age = max(s.age, now.Sub(acquiredAt).Seconds())
	})
	for label, s := range by {
		var values []string
		if c.m.keyDepth > 0 {
			values = []string{label}
		}
		ch <- prometheus.MustNewConstMetric(c.ratio, prometheus.GaugeValue, s.ratio, values...)
		ch <- prometheus.MustNewConstMetric(c.age, prometheus.GaugeValue, s.age, values...)
	}
	up := 0.0
	if c.src.Ready() == nil {
		up = 1
	}
	ch <- prometheus.MustNewConstMetric(c.ready, prometheus.GaugeValue, up)
}

// usedRatio is how much of its window ttl a lock expiring at expiresAt has
// used at now, from 0 to 1.
func usedRatio(now, expiresAt time.Time, ttl time.Duration) float64 {
	if ttl <= 0 {
		return 0
	}
	left := expiresAt.Sub(now)
	return min(1, max(0, 1-left.Seconds()/ttl.Seconds()))
}
