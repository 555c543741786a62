package main

import (
	"fmt"
	"io"
	"math"
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
	failover      map[string][]time.Duration // how the leader goes → each hand-over's time without a leader
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
	// batonAgainst is Baton as the -against build serves it.
	batonAgainst = "Baton, the -against build"
	// batonAllProcs is Baton with --max-procs 0: Go's default GOMAXPROCS.
	batonAllProcs = "Baton, --max-procs 0 (every CPU)"
	// batonShared is Baton with the clients spread over 4 sidecars sharing
	// a scope.
	batonShared = "Baton, 4 sidecars sharing a scope"
	// batonWatchAll is batonShared with --watch-delay 0: every lock watched
	// from its grant.
	batonWatchAll = "Baton, 4 sidecars sharing a scope, --watch-delay 0"
)

// refusalOrder is the order of the refusals' contenders in the tables.
var refusalOrder = []string{baton, mutex, batonAgainst}

// handoffOrder is the order of the hot-key contenders in the tables.
var handoffOrder = []string{"Baton try loop", "Mutex TryLock loop", "Baton blocking wait", "Mutex.Lock"}

func us(d time.Duration) string { return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond)) }

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }

// median is the median of xs; NaN when there are none, so that a figure
// nobody measured is never read as a zero.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
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
	if len(r.failover) > 0 {
		r.printFailover(w)
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
	for _, name := range refusalOrder {
		s, ok := r.refusals[name]
		if !ok {
			continue
		}
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
	for _, name := range refusalOrder {
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
		perOpCount := func(n float64) string {
			if n < 0 {
				return "—"
			}
			return fmt.Sprintf("%.2f", n)
		}
		txns, events := x.s.perOp(func(s sample) float64 { return s.txns }), x.s.perOp(func(s sample) float64 { return s.events })
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", x.what, us(c.etcd), us(c.sidecars), us(c.clients), us(c.total()), ceiling, perOpCount(txns), perOpCount(events))
	}
}
