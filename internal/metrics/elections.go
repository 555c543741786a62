package metrics

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Elections implements coordinator.Observer for the coordinator of
// elections: which of them this sidecar's candidates lead or wait in, by
// the election's name (elections are few, and named by whoever runs
// them: the name is always a label). Summed over a namespace's sidecars,
// an election led by nobody while candidates wait is one without a
// leader (the BatonElectionWithoutLeader alert).
type Elections struct {
	leading    *prometheus.GaugeVec
	candidates *prometheus.GaugeVec
	elected    *prometheus.CounterVec
	lost       *prometheus.CounterVec
	leaderless *prometheus.HistogramVec
}

// NewElections registers the elections' collectors on reg.
func NewElections(reg prometheus.Registerer) (*Elections, error) {
	e := &Elections{
		leading: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "baton_election_leading", Help: "1 while a candidate of this sidecar leads the election, else 0.",
		}, []string{"election"}),
		candidates: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "baton_election_candidates", Help: "Candidates of this sidecar campaigning in the election, not leading it.",
		}, []string{"election"}),
		elected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_election_elected_total", Help: "Times a candidate of this sidecar was elected (or its leadership taken over by a restarted sidecar): summed over the sidecars, about the election's changes of leader.",
		}, []string{"election"}),
		lost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "baton_election_leaderships_lost_total", Help: "Leaderships of this sidecar's candidates that ended without their resignation, by reason.",
		}, []string{"election", "reason"}),
		leaderless: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "baton_election_leaderless_seconds",
			Help:    "Time the election had no leader before a candidate of this sidecar, standing by, was elected: from when the last candidate ahead of it went (its key deleted in etcd, or the turn passed on in this sidecar) to its grant, a lock delay included.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"election"}),
	}
	for _, c := range []prometheus.Collector{e.leading, e.candidates, e.elected, e.lost, e.leaderless} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register the elections' metrics: %w", err)
		}
	}
	return e, nil
}

// Acquired implements coordinator.Observer: nothing to count.
func (e *Elections) Acquired(string, string, bool, time.Duration) {}

// Waiting counts the candidates campaigning.
func (e *Elections) Waiting(name string, delta int) {
	e.candidates.WithLabelValues(name).Add(float64(delta))
	e.leading.WithLabelValues(name).Add(0) // the series exists while it campaigns
}

// Granted counts a candidate of this sidecar elected: it leads.
func (e *Elections) Granted(name string) {
	e.leading.WithLabelValues(name).Inc()
	e.elected.WithLabelValues(name).Inc()
}

// Ended counts a leadership ended; reason is "" for a resignation.
func (e *Elections) Ended(name, reason string, _ time.Duration) {
	e.leading.WithLabelValues(name).Dec()
	if reason != "" {
		e.lost.WithLabelValues(name, reason).Inc()
	}
}

// Leaderless implements coordinator.LeaderlessObserver: how long the
// election had no leader before this sidecar's candidate led.
func (e *Elections) Leaderless(name string, d time.Duration) {
	e.leaderless.WithLabelValues(name).Observe(d.Seconds())
}

// Units implements coordinator.Observer: an election has none.
func (e *Elections) Units(string, int, bool, int) {}
