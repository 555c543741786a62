package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestControllerCounters: a second controller in the process counts on
// the first one's counters rather than failing to register.
func TestControllerCounters(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, err := NewController(reg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewController(reg)
	if err != nil {
		t.Fatal(err)
	}
	a.ForceReleased()
	b.ForceReleased()
	b.PolicyWritten()
	a.Injected("injected")
	b.Injected("injected")
	b.Injected("failed")
	want := `
# HELP baton_controller_force_releases_total Locks the controller freed by force, asked for by a Lock object's baton.dev/force-release annotation.
# TYPE baton_controller_force_releases_total counter
baton_controller_force_releases_total 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "baton_controller_force_releases_total"); err != nil {
		t.Error(err)
	}
	want = `
# HELP baton_controller_injections_total Pod admissions the sidecar injector answered, by result: injected, skipped (admitted as it was), refused (conflicting annotations or names), failed (the injector could not answer).
# TYPE baton_controller_injections_total counter
baton_controller_injections_total{result="failed"} 1
baton_controller_injections_total{result="injected"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "baton_controller_injections_total"); err != nil {
		t.Error(err)
	}
	if n := testutil.ToFloat64(a.policyWrites); n != 1 {
		t.Errorf("policy writes %v, want 1", n)
	}
}
