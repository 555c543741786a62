// Package metrics holds Baton's Prometheus collectors. Everything is
// registered on a registry passed in: no global state.
package metrics

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/baton-dev/baton/internal/version"
)

// Metrics implements coordinator.Observer and times etcd requests.
type Metrics struct {
	keyDepth int

	acquisitions *prometheus.CounterVec
	held         *prometheus.GaugeVec
	waiters      *prometheus.GaugeVec
	units        *prometheus.GaugeVec
	holdDuration *prometheus.HistogramVec
	waitDuration *prometheus.HistogramVec
	lost         *prometheus.CounterVec
	expired      *prometheus.CounterVec
	etcd         *prometheus.HistogramVec
	etcdOps      sync.Map // gRPC method → its prometheus.Observer in etcd
	batch        prometheus.Histogram
	sessionLost  prometheus.Counter
	audit        auditMetrics
}

// New registers Baton's collectors on reg. keyDepth > 0 adds a "key" label
// holding the first keyDepth segments of the lock key to the per-lock
// metrics; 0 (the default) keeps cardinality flat.
func New(reg prometheus.Registerer, keyDepth int) (*Metrics, error) {
	if keyDepth < 0 || keyDepth > 8 {
		return nil, fmt.Errorf("metrics key depth %d: must be 0 to 8", keyDepth)
	}
	var key []string
	if keyDepth > 0 {
		key = []string{"key"}
	}
	with := func(labels ...string) []string { return append(labels, key...) }
	durations := []float64{.001, .005, .01, .05, .1, .5, 1, 5, 10, 30, 60, 300, 900, 3600, 4 * 3600, 24 * 3600}
	m := &Metrics{
		keyDepth: keyDepth,
		acquisitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_acquisitions_total", Help: "Acquire requests by result: granted, refused, wait_timeout, error.",
		}, with("result")),
		held: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "baton_locks_held", Help: "Locks held by this sidecar's callers.",
		}, with()),
		waiters: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "baton_waiters", Help: "Callers of this sidecar waiting for a lock.",
		}, with()),
		units: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "baton_semaphore_units", Help: "Units of semaphores held (state=held) or waited for (state=waiting) by this sidecar's callers, by the semaphore's limit.",
		}, with("state", "limit")),
		holdDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "baton_hold_duration_seconds", Help: "How long locks were held, however they ended.", Buckets: durations,
		}, with()),
		waitDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "baton_wait_duration_seconds", Help: "How long blocking acquires waited, granted or not.", Buckets: durations,
		}, with()),
		lost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_locks_lost_total", Help: "Locks that ended without their owner's release, by reason.",
		}, with("reason")),
		expired: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_locks_expired_total", Help: "Locks released by their deadline (ttl).",
		}, with()),
		etcd: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "baton_etcd_request_duration_seconds", Help: "etcd request round trips by operation.",
			Buckets: []float64{.0005, .001, .002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"op"}),
		batch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "baton_etcd_txn_batch_size", Help: "Lock operations (tries, queueings, releases, extends) carried by each etcd transaction: more than 1 when requests arrive together (group commit).",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64},
		}),
		sessionLost: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "baton_session_lost_total", Help: "etcd sessions (leases) lost: each loses every lock it carried.",
		}),
	}
	m.audit = newAuditMetrics()
	for _, c := range []prometheus.Collector{m.acquisitions, m.held, m.waiters, m.units, m.holdDuration, m.waitDuration, m.lost, m.expired, m.etcd, m.batch, m.sessionLost,
		m.audit.denied, m.audit.forced, m.audit.policyChanges} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	return m, nil
}

// labels returns the label values for key.
func (m *Metrics) labels(key string, first ...string) []string {
	if m.keyDepth == 0 {
		return first
	}
	segs := strings.SplitN(key, "/", m.keyDepth+1)
	if len(segs) > m.keyDepth {
		segs = segs[:m.keyDepth]
	}
	return append(first, strings.Join(segs, "/"))
}

// Acquired counts an acquire by result; wait is how long a blocking one
// waited (0 for tries).
func (m *Metrics) Acquired(key, result string, waited bool, wait time.Duration) {
	m.acquisitions.WithLabelValues(m.labels(key, result)...).Inc()
	if waited {
		m.waitDuration.WithLabelValues(m.labels(key)...).Observe(wait.Seconds())
	}
}

// Waiting moves the waiters gauge.
func (m *Metrics) Waiting(key string, delta int) {
	m.waiters.WithLabelValues(m.labels(key)...).Add(float64(delta))
}

// Granted counts a lock now held.
func (m *Metrics) Granted(key string) { m.held.WithLabelValues(m.labels(key)...).Inc() }

// Ended records a lock's end: reason is "" for its owner's release, else
// a loss reason (expired, lease_lost, force_released, shutdown).
func (m *Metrics) Ended(key, reason string, heldFor time.Duration) {
	m.held.WithLabelValues(m.labels(key)...).Dec()
	m.holdDuration.WithLabelValues(m.labels(key)...).Observe(heldFor.Seconds())
	if reason == "" {
		return
	}
	m.lost.WithLabelValues(m.labels(key, reason)...).Inc()
	if reason == "expired" {
		m.expired.WithLabelValues(m.labels(key)...).Inc()
	}
}

// InitLossReasons makes the series of baton_locks_lost_total of each
// reason exist at 0, when there is no key label: Prometheus sees a
// counter's first increase only from a sample before it, so an alert on
// losses would miss the first ones of a reason.
func (m *Metrics) InitLossReasons(reasons ...string) {
	if m.keyDepth > 0 {
		return
	}
	for _, r := range reasons {
		m.lost.WithLabelValues(r)
	}
}

// Units moves the units of semaphores of limit held or waited for.
func (m *Metrics) Units(key string, limit int, held bool, delta int) {
	state := "waiting"
	if held {
		state = "held"
	}
	m.units.WithLabelValues(m.labels(key, state, strconv.Itoa(limit))...).Add(float64(delta))
}

// Committed records the size of a batch of lock operations that one etcd
// transaction carried.
func (m *Metrics) Committed(n int) { m.batch.Observe(float64(n)) }

// SessionLost counts a lost etcd session.
func (m *Metrics) SessionLost() { m.sessionLost.Inc() }

// UnaryClientInterceptor times every etcd request by its method name (Txn,
// Range, LeaseGrant, ...). Give it to the etcd client's dial options.
func (m *Metrics) UnaryClientInterceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		start := time.Now()
		err := invoker(ctx, method, req, reply, cc, opts...)
		m.etcdOp(method).Observe(time.Since(start).Seconds())
		return err
	}
}

// etcdOp returns the observer of a gRPC method's requests, labelled with
// its last segment (Txn, Range, LeaseGrant...): looked up once per method,
// not hashed again on every request.
func (m *Metrics) etcdOp(method string) prometheus.Observer {
	if o, ok := m.etcdOps.Load(method); ok {
		return o.(prometheus.Observer)
	}
	o := m.etcd.WithLabelValues(method[strings.LastIndexByte(method, '/')+1:])
	m.etcdOps.Store(method, o)
	return o
}

// RegisterBuildInfo registers baton_build_info on reg: always 1, labelled
// with the build's version, commit, Go and etcd versions, so that a
// dashboard can tell which Baton each sidecar and controller runs.
func RegisterBuildInfo(reg prometheus.Registerer, v version.Info) error {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "baton_build_info",
		Help: "Which Baton this process runs: always 1, labelled with its version, commit, Go and etcd versions.",
		ConstLabels: prometheus.Labels{
			"version": v.Version, "commit": v.Commit, "go_version": v.Go, "etcd_version": v.Etcd,
		},
	})
	g.Set(1)
	return reg.Register(g)
}
