package metrics

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Controller counts what the controller's audit log records: force
// releases asked for by annotation and lock policies written into etcd.
type Controller struct {
	forced       prometheus.Counter
	policyWrites prometheus.Counter
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
	}
	for _, p := range []*prometheus.Counter{&c.forced, &c.policyWrites} {
		err := reg.Register(*p)
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			*p = are.ExistingCollector.(prometheus.Counter)
		} else if err != nil {
			return nil, fmt.Errorf("register controller metrics: %w", err)
		}
	}
	return c, nil
}

// ForceReleased counts a force release by annotation.
func (c *Controller) ForceReleased() { c.forced.Inc() }

// PolicyWritten counts a namespace's policy written into etcd.
func (c *Controller) PolicyWritten() { c.policyWrites.Inc() }
