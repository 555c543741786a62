package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"time"
)

// verdict is one line of the goals: a goal met or missed, or a note that
// is no goal.
type verdict struct {
	goal bool // a goal, not a note
	met  bool
	text string
}

func (v verdict) String() string {
	switch {
	case !v.goal:
		return "- " + v.text
	case v.met:
		return "- met: " + v.text
	default:
		return "- MISSED: " + v.text
	}
}

// goals collects the verdicts of a run.
type goals []verdict

// check states a goal: met when ok and every figure it shows is a
// measurement. A figure that is not (a count or a ratio that came out
// negative, NaN or infinite because something was not read) misses the
// goal whatever ok says, and the line says which: a bench that cannot
// measure a goal has not met it.
func (g *goals) check(ok bool, format string, args ...any) {
	text := fmt.Sprintf(format, args...)
	if bad := unmeasured(args); bad != "" {
		ok = false
		text += " [not measured: " + bad + "]"
	}
	*g = append(*g, verdict{goal: true, met: ok, text: text})
}

// note adds a line that states a figure without a goal.
func (g *goals) note(format string, args ...any) {
	*g = append(*g, verdict{text: fmt.Sprintf(format, args...)})
}

// unmeasured names the first figure among args that cannot be a
// measurement: every count, rate, ratio and duration the bench shows is
// finite and not negative. "" when all are.
func unmeasured(args []any) string {
	for i, a := range args {
		var bad bool
		switch x := a.(type) {
		case float64:
			bad = math.IsNaN(x) || math.IsInf(x, 0) || x < 0
		case int:
			bad = x < 0
		case int64:
			bad = x < 0
		case time.Duration:
			bad = x < 0
		}
		if bad {
			return fmt.Sprintf("figure %d is %v", i+1, a)
		}
	}
	return ""
}

// p50 is s's median latency, as a figure for ratio.
func p50(s series) float64 { return float64(s.quantile(0.5)) }

// ratio is a/b, NaN unless both were measured (above zero): a ratio of
// something not read is no figure.
func ratio(a, b float64) float64 {
	if a <= 0 || b <= 0 || math.IsNaN(a) || math.IsNaN(b) {
		return math.NaN()
	}
	return a / b
}

// printGoals writes one line per goal of the steps that ran, and the tally.
func (r *results) printGoals(w io.Writer) {
	fmt.Fprintf(w, "\n## Goals\n\n")
	met, total := 0, 0
	for _, v := range r.goals() {
		fmt.Fprintln(w, v)
		if v.goal {
			total++
			if v.met {
				met++
			}
		}
	}
	fmt.Fprintf(w, "\nbench: %d of %d goals met\n", met, total)
}

// goals states the goals of the steps that ran.
func (r *results) goals() goals {
	var g goals
	r.cycleGoals(&g)
	r.againstCycleNotes(&g)
	if len(r.refusals) > 0 {
		br, mr := r.refusals[baton].rate(), r.refusals[mutex].rate()
		x := ratio(br, mr)
		g.check(x >= 3, "Baton refusals/s are %.2f× Mutex TryLock's (%.0f vs %.0f; goal ≥ 3×)", x, br, mr)
		e := median(r.entries[baton])
		g.check(e < 0.01, "Baton writes %.3f etcd raft entries per refusal (goal 0)", e)
		if ag, ok := r.refusals[batonAgainst]; ok {
			g.note("the -against build: refusals/s %.2f× Mutex TryLock's, %.0f/s (this build: %.2f×, %.0f/s)", ratio(ag.rate(), mr), ag.rate(), x, br)
		}
	}
	if len(r.handoff) > 0 {
		tl := r.handoff["Baton try loop"].rate()
		g.check(tl >= 100, "16 clients on one key across 4 sidecars, try in a loop: %.0f grants/s (goal ≥ 100/s, no livelock; Mutex TryLock: %.0f/s)", tl, r.handoff["Mutex TryLock loop"].rate())
		bw, ml := r.handoff["Baton blocking wait"].rate(), r.handoff["Mutex.Lock"].rate()
		x := ratio(bw, ml)
		g.check(x >= 2, "hot-key hand-off with blocking waiters is %.1f× Mutex.Lock's (%.0f vs %.0f grants/s; goal ≥ 2×)", x, bw, ml)
	}
	if len(r.shared) > 0 {
		r.sharedGoals(&g)
	}
	if len(r.scale) > 0 {
		s := r.scale[len(r.scale)-1]
		g.check(s.rss > 0 && s.rss <= 150<<20, "%d held locks: sidecar RSS %.1f MiB (goal ≤ 150 MiB)", s.n, float64(s.rss)/(1<<20))
		g.check(s.released > 0 && s.released <= 1500*time.Millisecond, "%d held locks: all released %s after SIGTERM (goal ≤ 1.5 s)", s.n, ms(s.released))
		g.check(s.worstWrite > 0 && s.worstWrite <= 100*time.Millisecond, "%d held locks: slowest etcd write during the release %s (goal ≤ 100 ms)", s.n, ms(s.worstWrite))
	}
	if len(r.footprint) > 0 {
		lean, full := r.footprint[0], "not run"
		if len(r.footprint) > 1 {
			full = fmt.Sprintf("%.1f MiB", float64(r.footprint[1].rss)/(1<<20))
		}
		g.check(lean.rss > 0 && lean.rss <= 20<<20, "an idle sidecar in a pod (the lean build) on an external etcd: RSS %.1f MiB, binary %.1f MB (goal ≤ 20 MiB; the full build: %s)", float64(lean.rss)/(1<<20), float64(lean.size)/1e6, full)
		if d := r.footprint[len(r.footprint)-1]; d.name == daprName {
			g.note("the sidecar of a pod that speaks Dapr (baton-dapr, Dapr's API on): RSS %.1f MiB, %.2f× the lean build's; binary %.1f MB", float64(d.rss)/(1<<20), ratio(float64(d.rss), float64(lean.rss)), float64(d.size)/1e6)
		}
	}
	r.scaleOutGoals(&g)
	if r.crashTTL > 0 {
		worst := slices.Max(append([]time.Duration{0}, r.crash...))
		g.check(len(r.crash) > 0 && worst <= r.crashTTL+500*time.Millisecond, "crash release at most %s with a %v lease (goal ≤ TTL + 0.5 s)", ms(worst), r.crashTTL)
	}
	return g
}

// againstCycleNotes states, for the -against build, the figures of the
// cycles' goals that it gave beside this build: before and after a
// change, in one run. (The refusals' are stated with their goal.)
func (r *results) againstCycleNotes(g *goals) {
	if rw, ag, bt := r.cycles[raw], r.cycles[batonAgainst], r.cycles[baton]; rw != nil && ag != nil && bt != nil {
		g.note("the -against build: cycle at C=1 %.2f× raw Txn's (this build: %.2f×), throughput at C=64 %.2f× (this build: %.2f×)",
			ratio(p50(ag[1]), p50(rw[1])), ratio(p50(bt[1]), p50(rw[1])), ratio(ag[64].rate(), rw[64].rate()), ratio(bt[64].rate(), rw[64].rate()))
		if br := r.cycles[bareName]; br != nil {
			f := float64(br[1].cpuPerOp().sidecars)
			a, b := ag[1].cpuPerOp().sidecars, bt[1].cpuPerOp().sidecars
			g.note("the -against build: sidecar CPU per cycle at C=1 %.2f× the bare sidecar's, %s (this build: %.2f×, %s)", ratio(float64(a), f), us(a), ratio(float64(b), f), us(b))
		}
	}
}

// cycleGoals states the goals of the acquire + release cycles.
func (r *results) cycleGoals(g *goals) {
	if rw, bt := r.cycles[raw], r.cycles[baton]; rw != nil && bt != nil {
		// The bare sidecar's ratios on the same line: the floor of any
		// design with a process between the app and etcd, on these cores.
		floor1, floor64 := "", ""
		if br := r.cycles[bareName]; br != nil {
			floor1 = fmt.Sprintf("; the bare sidecar: %.2f×", ratio(p50(br[1]), p50(rw[1])))
			floor64 = fmt.Sprintf("; the bare sidecar: %.2f×", ratio(br[64].rate(), rw[64].rate()))
		}
		x := ratio(p50(bt[1]), p50(rw[1]))
		g.check(x <= 1.20, "Baton cycle at C=1 is %.2f× raw Txn's (p50 %s vs %s; goal ≤ 1.20×%s)", x, ms(bt[1].quantile(0.5)), ms(rw[1].quantile(0.5)), floor1)
		tr := ratio(bt[64].rate(), rw[64].rate())
		g.check(tr >= 0.85, "Baton throughput at C=64 is %.2f× raw Txn's (%.0f vs %.0f cycles/s; goal ≥ 0.85×%s)", tr, bt[64].rate(), rw[64].rate(), floor64)
	}
	if bt, br := r.cycles[baton], r.cycles[bareName]; bt != nil && br != nil {
		// The sidecar's own CPU per cycle against the least a sidecar can
		// spend; beside it, against the bare sidecar with Baton's
		// transactions, which tells the lock protocol's share from the
		// rest of the path.
		b, f := bt[1].cpuPerOp().sidecars, br[1].cpuPerOp().sidecars
		shaped := ""
		if bs := r.cycles[bareShapedName]; bs != nil {
			fs := bs[1].cpuPerOp().sidecars
			shaped = fmt.Sprintf("; %.2f× the bare sidecar with Baton's transactions, %s", ratio(float64(b), float64(fs)), us(fs))
		}
		x := ratio(float64(b), float64(f))
		g.check(x <= 1.15, "sidecar CPU per cycle at C=1 is %.2f× the bare sidecar's (%s vs %s; goal ≤ 1.15×%s)", x, us(b), us(f), shaped)
	}
}
