package metrics

import (
	"errors"
	"fmt"

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
		existing, err := register(reg, *p)
		if err != nil {
			return nil, err
		}
		*p = existing.(prometheus.Counter)
	}
	existing, err := register(reg, c.injections)
	if err != nil {
		return nil, err
	}
	c.injections = existing.(*prometheus.CounterVec)
	return c, nil
}

// register registers col on reg, or returns the collector registered
// there before it under its name.
func register(reg prometheus.Registerer, col prometheus.Collector) (prometheus.Collector, error) {
	err := reg.Register(col)
	var are prometheus.AlreadyRegisteredError
	switch {
	case errors.As(err, &are):
		return are.ExistingCollector, nil
	case err != nil:
		return nil, fmt.Errorf("register controller metrics: %w", err)
	}
	return col, nil
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
