package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Controller counts what the controller's audit log records: force
// releases asked for by annotation and lock policies written into etcd;
// and what its injector answered.
type Controller struct {
	forced       prometheus.Counter
	policyWrites prometheus.Counter
	injections   *prometheus.CounterVec
}

// NewController registers the controller's counters on reg, taking over
// those a controller before it in the process registered (tests run
// several).
func NewController(reg prometheus.Registerer) (*Controller, error) {
	c := &Controller{
		forced: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "baton_controller_force_releases_total", Help: "Locks the controller freed by force, asked for by a Lock object's baton.dev/force-release annotation.",
		}),
		policyWrites: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "baton_controller_policy_writes_total", Help: "Namespaces' lock policies written into (or deleted from) etcd after their LockPolicy objects changed.",
		}),
		injections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_controller_injections_total", Help: "Pod admissions the sidecar injector answered, by result: injected, skipped (admitted as it was), refused (conflicting annotations or names), failed (the injector could not answer).",
		}, []string{"result"}),
	}
	for _, p := range []*prometheus.Counter{&c.forced, &c.policyWrites} {
		var err error
		if *p, err = Register(reg, *p); err != nil {
			return nil, err
		}
	}
	var err error
	if c.injections, err = Register(reg, c.injections); err != nil {
		return nil, err
	}
	return c, nil
}

// InitInjections makes the series of baton_controller_injections_total
// of each result exist at 0, so that an alert on their increase sees the
// first one.
func (c *Controller) InitInjections(results ...string) {
	for _, r := range results {
		c.injections.WithLabelValues(r)
	}
}

// Injected counts an admission the injector answered with result.
func (c *Controller) Injected(result string) { c.injections.WithLabelValues(result).Inc() }

// ForceReleased counts a force release by annotation.
func (c *Controller) ForceReleased() { c.forced.Inc() }

// PolicyWritten counts a namespace's policy written into etcd.
func (c *Controller) PolicyWritten() { c.policyWrites.Inc() }
