//go:build e2e

package e2e

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
)

// report gathers the scenarios' outcomes for the summary printed at the end
// of the run.
var report = &suiteReport{}

type suiteReport struct {
	mu       sync.Mutex
	outcomes []*outcome
	skipped  []string
}

func (r *suiteReport) add(o *outcome) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.outcomes = append(r.outcomes, o)
}

func (r *suiteReport) skip(name, why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.skipped = append(r.skipped, fmt.Sprintf("%s: skipped: %s", name, why))
}

// finish prints the summary and, when path is set, writes it there.
func (r *suiteReport) finish(w io.Writer, path string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.outcomes) == 0 && len(r.skipped) == 0 {
		return nil
	}
	slices.SortStableFunc(r.outcomes, func(a, b *outcome) int { return scenarioNumber(a.name) - scenarioNumber(b.name) })
	var b strings.Builder
	mode := "short (make test)"
	if soak {
		mode = "soak (BATON_SOAK=1)"
	}
	fmt.Fprintf(&b, "# Baton reliability suite\n\n")
	fmt.Fprintf(&b, "Run: %s, %s, race detector %v, %d CPUs, lease TTL %v. Produced by `make test-e2e`.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), mode, raceEnabled, runtime.NumCPU(), leaseTTL)
	fmt.Fprintf(&b, "| Scenario | attempts | ok | refused | unknown | stale accepted | stale rejected | lost updates | reacquire p50 / p99 / max | detection lead min / p50 | belief overlaps | leftover keys / leases | porcupine |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, o := range r.outcomes {
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d | %d | %d | %s | %s | %s | %d / %d | %s |\n",
			o.name, o.attempts, o.ok, o.fail, o.unknown, o.store.staleAccepted, o.store.staleRejected, o.store.lostUpdates,
			quantiles(o.gaps, 0.5, 0.99, 1), quantiles(o.leads, 0, 0.5), overlapText(o), o.keys, o.leases, porcupineText(o))
	}
	b.WriteString("\n")
	for _, o := range r.outcomes {
		if len(o.notes) == 0 && len(o.acquire) == 0 {
			continue
		}
		fmt.Fprintf(&b, "- **%s** (%v): acquire latency p0/p50/p95/p99/max %s", o.name, o.took.Round(100*time.Millisecond), quantiles(o.acquire, 0, 0.5, 0.95, 0.99, 1))
		for _, n := range o.notes {
			fmt.Fprintf(&b, "; %s", n)
		}
		if len(o.losses) > 0 {
			fmt.Fprintf(&b, "; holders lost the lock: %s", counts(o.losses))
		}
		if len(o.reasons) > 0 {
			fmt.Fprintf(&b, "; not granted: %s", counts(o.reasons))
		}
		b.WriteString(".\n")
	}
	for _, s := range r.skipped {
		fmt.Fprintf(&b, "- %s\n", s)
	}
	fmt.Fprint(w, "\n"+b.String())
	if path == "" {
		return nil
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

func overlapText(o *outcome) string {
	if o.overlaps == 0 {
		return "0"
	}
	return fmt.Sprintf("%d (max %v)", o.overlaps, o.overlapMax.Round(time.Millisecond))
}

func porcupineText(o *outcome) string {
	if o.porcupine == "" {
		return "–"
	}
	return fmt.Sprintf("%s (%v)", o.porcupine, o.porcupineTime.Round(time.Millisecond))
}

// quantiles formats the q-quantiles of ds ("–" when empty).
func quantiles(ds []time.Duration, qs ...float64) string {
	if len(ds) == 0 {
		return "–"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	var parts []string
	for _, q := range qs {
		i := int(q * float64(len(s)-1))
		parts = append(parts, fmtDur(s[i]))
	}
	return strings.Join(parts, " / ")
}

func fmtDur(d time.Duration) string {
	switch {
	case d < 0:
		return "−" + fmtDur(-d)
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	}
	return d.Round(10 * time.Millisecond).String()
}

// soak is true under BATON_SOAK=1: longer versions and S14.
var soak = os.Getenv("BATON_SOAK") == "1"

// scale returns short in make test and long under soak.
func scale[T any](short, long T) T {
	if soak {
		return long
	}
	return short
}

// counts formats a histogram of reasons.
func counts(m map[string]int) string {
	var rs []string
	for r, n := range m {
		rs = append(rs, fmt.Sprintf("%s ×%d", r, n))
	}
	slices.Sort(rs)
	return strings.Join(rs, ", ")
}

// scenarioNumber is N of a name "SN ...", for the report's order.
func scenarioNumber(name string) int {
	n := 0
	for _, c := range strings.TrimPrefix(name, "S") {
		if c < '0' || c > '9' {
			break
		}
		n = 10*n + int(c-'0')
	}
	return n
}
