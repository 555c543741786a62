package main

import (
	"fmt"
	"io"
	"math"
	"strconv"
)

// printScaleOut writes the scale-out step's table: what etcd does per lock
// operation as the sidecars in one scope grow in number, and what it
// serves them.
func (r *results) printScaleOut(w io.Writer) {
	fmt.Fprintf(w, "\n## Many sidecars in one scope (%d locks held by each, %d cycles/s in all for %v: half tries, half hand-offs between two sidecars after %v)\n\n",
		heldPerEngine, scaleOutRate, scaleOutWindow, handOffHold)
	fmt.Fprintf(w, "| sidecars | via proxies | cycles | errors | etcd CPU per lock op | watch events per lock op | keep-alives/s at etcd | grant p50 | grant p99 | hand-off p50 | hand-off p99 | watch streams / watchers / keep-alive streams at etcd | bench RSS per sidecar |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range r.scaleOut {
		via := "-"
		if s.proxies > 0 {
			via = strconv.Itoa(s.proxies)
		}
		fmt.Fprintf(w, "| %d | %s | %d | %d | %s | %.1f | %s | %s | %s | %s | %s | %s / %s / %s | %.0f KiB |\n", s.n, via, s.cycles, s.errs, us(s.cpuPerOp()), s.eventsPerOp(),
			count(s.keepAlives/s.took.Seconds()), ms(s.quantile(0.5)), ms(s.quantile(0.99)), ms(s.handOffQuantile(0.5)), ms(s.handOffQuantile(0.99)),
			count(s.streams.watch), count(s.streams.watchers), count(s.streams.keepAlive), float64(s.memPerEng)/1024)
	}
}

// count shows a count, "—" for one that could not be read.
func count(n float64) string {
	if n < 0 || math.IsNaN(n) {
		return "—"
	}
	return strconv.FormatFloat(n, 'f', 0, 64)
}

// scaleOutGoals states the scale-out goals, each a ratio of the largest
// size to the smallest in one run (both reaching etcd directly), and what
// etcd serves the largest through proxies.
func (r *results) scaleOutGoals(g *goals) {
	var direct, proxied []scaleOutResult
	for _, s := range r.scaleOut {
		if s.proxies > 0 {
			proxied = append(proxied, s)
		} else {
			direct = append(direct, s)
		}
	}
	if len(direct) >= 2 {
		lo, hi := direct[0], direct[len(direct)-1]
		cpu := ratio(float64(hi.cpuPerOp()), float64(lo.cpuPerOp()))
		g.check(cpu <= 1.5, "etcd CPU per lock operation at %d sidecars in one scope is %.2f× that at %d (%s vs %s; goal ≤ 1.5×)", hi.n, cpu, lo.n, us(hi.cpuPerOp()), us(lo.cpuPerOp()))
		g.check(hi.eventsPerOp() <= 2, "watch events per lock operation at %d sidecars in one scope: %.1f (at %d: %.1f; goal ≤ 2)", hi.n, hi.eventsPerOp(), lo.n, lo.eventsPerOp())
		p99 := ratio(float64(hi.quantile(0.99)), float64(lo.quantile(0.99)))
		g.check(p99 <= 2, "grant p99 at %d sidecars in one scope is %.2f× that at %d (%s vs %s; goal ≤ 2×)", hi.n, p99, lo.n, ms(hi.quantile(0.99)), ms(lo.quantile(0.99)))
		h99 := ratio(float64(hi.handOffQuantile(0.99)), float64(lo.handOffQuantile(0.99)))
		g.check(h99 <= 2, "hand-off p99 at %d sidecars in one scope is %.2f× that at %d (%s vs %s; goal ≤ 2×)", hi.n, h99, lo.n, ms(hi.handOffQuantile(0.99)), ms(lo.handOffQuantile(0.99)))
	}
	// A proxy opens two watch streams: one carries every watch of its
	// sidecars, the other its own watch for the loss of etcd's leader.
	for _, s := range proxied {
		g.check(s.streams.watch >= 1 && s.streams.watch <= 2*float64(s.proxies) && s.streams.keepAlive >= 1 && s.streams.keepAlive <= float64(s.proxies),
			"%d sidecars through %d of etcd's gRPC proxies: etcd serves them %.0f watch streams and %.0f keep-alive streams (goal: per proxy, one watch stream for its sidecars' watches beside its own leader watch, and one keep-alive stream)",
			s.n, s.proxies, s.streams.watch, s.streams.keepAlive)
	}
}
