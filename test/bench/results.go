package main

import (
	"fmt"
	"io"
	"runtime"
	"slices"
	"time"
)

// results is everything measured.
type results struct {
	order    []string                  // contenders, first seen first
	cycles   map[string]map[int]series // contender → C → rounds
	refusals map[string]series
	entries  map[string][]float64 // raft entries per refusal, per round
	reads    map[string][]float64 // etcd reads per refusal, per round
	handoff  map[string]series
	// shared are the semaphore and read/write lock runs, with raft
	// entries and reads per operation.
	shared        map[string]series
	sharedEntries map[string][]float64
	sharedReads   map[string][]float64
	crash         []time.Duration
	crashTTL      time.Duration
	scale         []scaleResult
	scaleOut      []scaleOutResult
	cluster       map[string]map[int]series // etcd-cluster: contender → C → rounds
	footprint     []footprintResult
}

const (
	raw   = "raw etcd Txn"
	mutex = "concurrency.Mutex TryLock"
	baton = "Baton (socket)"
	// rawShapedName is rawTxn with Baton's transactions.
	rawShapedName = "raw etcd Txn, Baton's transactions"
	// bareName is the bare sidecar: HTTP in, one raw Txn per request.
	bareName = "bare sidecar (HTTP → 1 raw Txn)"
	// bareShapedName is the bare sidecar with Baton's transactions: the
	// prefix compare, the holder record, the read of the holder on refusal.
	bareShapedName = "bare sidecar, Baton's transactions"
	// batonAllProcs is Baton with --max-procs 0: Go's default GOMAXPROCS.
	batonAllProcs = "Baton, --max-procs 0 (every CPU)"
	// batonShared is Baton with the clients spread over 4 sidecars sharing
	// a scope.
	batonShared = "Baton, 4 sidecars sharing a scope"
	// batonWatchAll is batonShared with --watch-delay 0: every lock watched
	// from its grant.
	batonWatchAll = "Baton, 4 sidecars sharing a scope, --watch-delay 0"
)

// handoffOrder is the order of the hot-key contenders in the tables.
var handoffOrder = []string{"Baton try loop", "Mutex TryLock loop", "Baton blocking wait", "Mutex.Lock"}

func us(d time.Duration) string { return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond)) }

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// perOp is the median of a per-operation count, "–" when none was read.
func perOp(xs []float64) string {
	if len(xs) == 0 {
		return "–"
	}
	return fmt.Sprintf("%.3f", median(xs))
}

// print writes the tables, one line per goal and the tally.
func (r *results) print(w io.Writer, o options) {
	fmt.Fprintf(w, "# make bench\n\n%s, %d CPUs, etcd in a child process with fsync on, %d rounds of %v per contender and setting, interleaved; medians of the rounds' rates, latency quantiles over all rounds.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"), runtime.NumCPU(), o.rounds, o.slice)

	if len(r.cycles) > 0 {
		r.printCycles(w)
	}
	if len(r.refusals) > 0 {
		r.printRefusals(w)
	}
	if len(r.handoff) > 0 {
		r.printHandoff(w)
	}
	if len(r.shared) > 0 {
		r.printShared(w)
	}
	if len(r.scale) > 0 {
		r.printScale(w)
	}
	if r.crashTTL > 0 {
		r.printCrash(w)
	}
	if len(r.scaleOut) > 0 {
		r.printScaleOut(w)
	}
	if len(r.cluster) > 0 {
		r.printCluster(w)
	}
	if len(r.footprint) > 0 {
		r.printFootprint(w)
	}
	r.printCPU(w)
	r.printGoals(w)
}

func (r *results) printCycles(w io.Writer) {
	fmt.Fprintf(w, "## Acquire + release cycles (each client its own key)\n\n| contender |")
	for _, c := range concurrencies {
		fmt.Fprintf(w, " C=%d cycles/s | p50 | p99 |", c)
	}
	fmt.Fprintf(w, "\n|---|")
	for range concurrencies {
		fmt.Fprintf(w, "---|---|---|")
	}
	fmt.Fprintln(w)
	for _, name := range r.order {
		fmt.Fprintf(w, "| %s |", name)
		for _, c := range concurrencies {
			s := r.cycles[name][c]
			fmt.Fprintf(w, " %.0f | %s | %s |", s.rate(), ms(s.quantile(0.5)), ms(s.quantile(0.99)))
		}
		fmt.Fprintln(w)
	}
	for _, name := range r.order {
		n := 0
		var last error
		for _, c := range concurrencies {
			n += r.cycles[name][c].errs()
			if err := r.cycles[name][c].lastErr(); err != nil {
				last = err
			}
		}
		if n > 0 {
			fmt.Fprintf(w, "\n%s: %d cycles failed, the last with: %v\n", name, n, last)
		}
	}
}

func (r *results) printRefusals(w io.Writer) {
	fmt.Fprintf(w, "\n## Refusal of a lock held elsewhere (16 clients)\n\n| contender | refusals/s | p50 | etcd raft entries per refusal | etcd reads per refusal |\n|---|---|---|---|---|\n")
	for _, name := range []string{baton, mutex} {
		s := r.refusals[name]
		fmt.Fprintf(w, "| %s | %.0f | %s | %.3f | %s |\n", name, s.rate(), ms(s.quantile(0.5)), median(r.entries[name]), perOp(r.reads[name]))
	}
}

func (r *results) printHandoff(w io.Writer) {
	fmt.Fprintf(w, "\n## One hot key, 16 clients (Baton: 4 sidecars × 4)\n\n| contender | grants/s | p50 | p99 |\n|---|---|---|---|\n")
	for _, name := range handoffOrder {
		s := r.handoff[name]
		fmt.Fprintf(w, "| %s | %.0f | %s | %s |\n", name, s.rate(), ms(s.quantile(0.5)), ms(s.quantile(0.99)))
	}
}

func (r *results) printFootprint(w io.Writer) {
	fmt.Fprintf(w, "\n## One idle sidecar (%v after one acquire + release)\n\n| build | binary | RSS |\n|---|---|---|\n", idleFor)
	for _, f := range r.footprint {
		fmt.Fprintf(w, "| %s | %.1f MB | %.1f MiB |\n", f.name, float64(f.size)/1e6, float64(f.rss)/(1<<20))
	}
}

func (r *results) printScale(w io.Writer) {
	fmt.Fprintf(w, "\n## Many locks held by one sidecar\n\n| locks | acquire/s (64 clients) | sidecar RSS | leases kept alive | SIGTERM → exit | SIGTERM → all keys gone | slowest etcd write meanwhile |\n|---|---|---|---|---|---|---|\n")
	for _, s := range r.scale {
		fmt.Fprintf(w, "| %d | %.0f | %.1f MiB | %d | %s | %s | %s |\n", s.n, s.rate, float64(s.rss)/(1<<20), s.leases, ms(s.exit), ms(s.released), ms(s.worstWrite))
	}
}

func (r *results) printCrash(w io.Writer) {
	fmt.Fprintf(w, "\n## Crash release (lease TTL %v)\n\nSIGKILL of the holder's sidecar → the waiter's grant: ", r.crashTTL)
	for i, d := range r.crash {
		if i > 0 {
			fmt.Fprint(w, ", ")
		}
		fmt.Fprint(w, ms(d))
	}
	fmt.Fprintln(w)
}

// printGoals writes one line per goal of the steps that ran, and the tally.
func (r *results) printGoals(w io.Writer) {
	fmt.Fprintf(w, "\n## Goals\n\n")
	met, total := 0, 0
	goal := func(ok bool, format string, args ...any) {
		total++
		mark := "MISSED"
		if ok {
			met++
			mark = "met"
		}
		fmt.Fprintf(w, "- %s: %s\n", mark, fmt.Sprintf(format, args...))
	}
	if rw, bt := r.cycles[raw], r.cycles[baton]; rw != nil && bt != nil {
		// The bare sidecar's ratios on the same line: the floor of any
		// design with a process between the app and etcd, on these cores.
		floor1, floor64 := "", ""
		if br := r.cycles[bareName]; br != nil {
			floor1 = fmt.Sprintf("; the bare sidecar: %.2f×", float64(br[1].quantile(0.5))/float64(rw[1].quantile(0.5)))
			floor64 = fmt.Sprintf("; the bare sidecar: %.2f×", br[64].rate()/rw[64].rate())
		}
		ratio := float64(bt[1].quantile(0.5)) / float64(rw[1].quantile(0.5))
		goal(ratio <= 1.20, "Baton cycle at C=1 is %.2f× raw Txn's (p50 %s vs %s; goal ≤ 1.20×%s)", ratio, ms(bt[1].quantile(0.5)), ms(rw[1].quantile(0.5)), floor1)
		tr := bt[64].rate() / rw[64].rate()
		goal(tr >= 0.85, "Baton throughput at C=64 is %.2f× raw Txn's (%.0f vs %.0f cycles/s; goal ≥ 0.85×%s)", tr, bt[64].rate(), rw[64].rate(), floor64)
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
			shaped = fmt.Sprintf("; %.2f× the bare sidecar with Baton's transactions, %s", float64(b)/float64(fs), us(fs))
		}
		goal(f > 0 && float64(b) <= 1.15*float64(f), "sidecar CPU per cycle at C=1 is %.2f× the bare sidecar's (%s vs %s; goal ≤ 1.15×%s)", float64(b)/float64(f), us(b), us(f), shaped)
	}
	if len(r.refusals) > 0 {
		br, mr := r.refusals[baton].rate(), r.refusals[mutex].rate()
		goal(br >= 3*mr, "Baton refusals/s are %.2f× Mutex TryLock's (%.0f vs %.0f; goal ≥ 3×)", br/mr, br, mr)
		e := median(r.entries[baton])
		goal(e < 0.01, "Baton writes %.3f etcd raft entries per refusal (goal 0)", e)
	}
	if len(r.handoff) > 0 {
		tl := r.handoff["Baton try loop"].rate()
		goal(tl >= 100, "16 clients on one key across 4 sidecars, try in a loop: %.0f grants/s (goal ≥ 100/s, no livelock; Mutex TryLock: %.0f/s)", tl, r.handoff["Mutex TryLock loop"].rate())
		bw, ml := r.handoff["Baton blocking wait"].rate(), r.handoff["Mutex.Lock"].rate()
		goal(bw >= 2*ml, "hot-key hand-off with blocking waiters is %.1f× Mutex.Lock's (%.0f vs %.0f grants/s; goal ≥ 2×)", bw/ml, bw, ml)
	}
	if len(r.shared) > 0 {
		r.sharedGoals(goal)
	}
	if len(r.scale) > 0 {
		s := r.scale[len(r.scale)-1]
		goal(s.rss <= 150<<20, "%d held locks: sidecar RSS %.1f MiB (goal ≤ 150 MiB)", s.n, float64(s.rss)/(1<<20))
		goal(s.released <= 1500*time.Millisecond, "%d held locks: all released %s after SIGTERM (goal ≤ 1.5 s)", s.n, ms(s.released))
		goal(s.worstWrite <= 100*time.Millisecond, "%d held locks: slowest etcd write during the release %s (goal ≤ 100 ms)", s.n, ms(s.worstWrite))
	}
	if len(r.footprint) > 0 {
		lean := r.footprint[0]
		goal(lean.rss <= 20<<20, "an idle sidecar in a pod (the lean build) on an external etcd: RSS %.1f MiB, binary %.1f MB (goal ≤ 20 MiB; the full build: %.1f MiB)", float64(lean.rss)/(1<<20), float64(lean.size)/1e6, float64(r.footprint[1].rss)/(1<<20))
		if d := r.footprint[len(r.footprint)-1]; d.name == daprName {
			fmt.Fprintf(w, "- the sidecar of a pod that speaks Dapr (baton-dapr, Dapr's API on): RSS %.1f MiB, %.2f× the lean build's; binary %.1f MB\n", float64(d.rss)/(1<<20), float64(d.rss)/float64(lean.rss), float64(d.size)/1e6)
		}
	}
	r.scaleOutGoals(goal)
	if r.crashTTL > 0 {
		worst := slices.Max(append([]time.Duration{0}, r.crash...))
		goal(len(r.crash) > 0 && worst <= r.crashTTL+500*time.Millisecond, "crash release at most %s with a %v lease (goal ≤ TTL + 0.5 s)", ms(worst), r.crashTTL)
	}
	fmt.Fprintf(w, "\nbench: %d of %d goals met\n", met, total)
}

// printCPU writes the CPU time each tier spent per operation, and the rate
// that this machine's cores would allow if nothing but that ran: where the
// cores are the limit, no contender can beat its ceiling.
func (r *results) printCPU(w io.Writer) {
	type row struct {
		what string
		s    series
	}
	var rows []row
	for _, c := range []int{1, 64} {
		for _, name := range r.order {
			rows = append(rows, row{fmt.Sprintf("cycle C=%d: %s", c, name), r.cycles[name][c]})
		}
	}
	for _, name := range []string{baton, mutex} {
		if s, ok := r.refusals[name]; ok {
			rows = append(rows, row{"refusal: " + name, s})
		}
	}
	for _, name := range handoffOrder {
		if s, ok := r.handoff[name]; ok {
			rows = append(rows, row{"hot key: " + name, s})
		}
	}
	for _, name := range sharedOrder {
		if s, ok := r.shared[name]; ok {
			rows = append(rows, row{"shared: " + name, s})
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "\n## CPU time per operation (etcd, sidecars, the bench's clients)\n\n"+
		"Read from /proc around each run (10 ms ticks); the ceiling is %d cores divided by the total.\n\n"+
		"The last columns count, per operation, the transactions etcd served and the watch events it sent (to every watching sidecar).\n\n"+
		"| operation | etcd | sidecars | clients | total | ceiling on %d cores | etcd transactions | watch events |\n|---|---|---|---|---|---|---|---|\n", runtime.NumCPU(), runtime.NumCPU())
	for _, x := range rows {
		c := x.s.cpuPerOp()
		ceiling := "—"
		if c.total() > 0 {
			ceiling = fmt.Sprintf("%.0f/s", float64(runtime.NumCPU())*float64(time.Second)/float64(c.total()))
		}
		count := func(n float64) string {
			if n < 0 {
				return "—"
			}
			return fmt.Sprintf("%.2f", n)
		}
		txns, events := x.s.perOp(func(s sample) float64 { return s.txns }), x.s.perOp(func(s sample) float64 { return s.events })
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", x.what, us(c.etcd), us(c.sidecars), us(c.clients), us(c.total()), ceiling, count(txns), count(events))
	}
}
