package metrics

import "github.com/prometheus/client_golang/prometheus"

// auditMetrics count what the sidecar's audit log records: calls the lock
// policy refused, force releases, and changes of the policy in force.
type auditMetrics struct {
	denied        *prometheus.CounterVec
	forced        prometheus.Counter
	policyChanges prometheus.Counter
}

func newAuditMetrics() auditMetrics {
	a := auditMetrics{
		denied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_policy_denials_total", Help: "Calls the lock policy refused (403 forbidden), by action: lock or force_release.",
		}, []string{"action"}),
		forced: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "baton_force_releases_total", Help: "Locks this sidecar's callers freed by force (DELETE ...?force=true).",
		}),
		policyChanges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "baton_policy_changes_total", Help: "Changes of the lock policy in force in this sidecar, including its first reading and losing it.",
		}),
	}
	for _, action := range []string{"lock", "force_release"} {
		a.denied.WithLabelValues(action) // every series from the start, at 0
	}
	return a
}

// Denied counts a call the lock policy refused.
func (m *Metrics) Denied(action string) { m.audit.denied.WithLabelValues(action).Inc() }

// ForceReleased counts a force release.
func (m *Metrics) ForceReleased() { m.audit.forced.Inc() }

// PolicyChanged counts a change of the policy in force.
func (m *Metrics) PolicyChanged() { m.audit.policyChanges.Inc() }
