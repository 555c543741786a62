package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
)

// Names of the shared-claims contenders.
const (
	semWait   = "semaphore N=4, blocking wait"
	semTry    = "semaphore N=4, try loop"
	mutexWait = "lock (N=1), blocking wait"
	semFull   = "refusal: full semaphore (N=4)"
	rwHeld    = "refusal: reader, write-held lock"
)

// sharedOrder is the order of the shared-claims rows in the tables.
var sharedOrder = []string{semWait, semTry, mutexWait, semFull, rwHeld}

// shared: 16 clients on 4 sidecars take units of one semaphore of 4 (a
// blocking wait, a try loop) against the plain lock on the same sidecars;
// and 16 clients refused by a full semaphore and by a read/write lock a
// writer holds, with etcd's raft entries and reads per refusal.
func (w *world) shared(ctx context.Context, r *results) error {
	scs, err := w.startSidecars("sem", 4)
	if err != nil {
		return err
	}
	defer termAll(scs)
	const c = 16
	cycle := func(key, body string, refused bool) func(context.Context, int) error {
		return func(ctx context.Context, i int) error {
			s := scs[i%len(scs)]
			err := s.call(ctx, "POST", "/v1/locks/"+key, fmt.Sprintf(body, i), http.StatusOK)
			if err != nil && refused {
				return errRefused
			}
			if err != nil {
				return err
			}
			return s.call(context.WithoutCancel(ctx), "DELETE", fmt.Sprintf("/v1/locks/%s?owner=o%d", key, i), "", http.StatusOK)
		}
	}
	holder, refuser := scs[0], scs[1]
	for i := range 4 {
		if err := holder.call(ctx, "POST", "/v1/locks/sem-full", fmt.Sprintf(`{"owner":"h%d","limit":4,"ttl":"1h"}`, i), http.StatusOK); err != nil {
			return err
		}
	}
	if err := holder.call(ctx, "POST", "/v1/locks/rw-held", `{"owner":"writer","mode":"write","ttl":"1h"}`, http.StatusOK); err != nil {
		return err
	}
	refusal := func(key, body string) func(context.Context, int) error {
		return func(ctx context.Context, i int) error {
			return refuser.call(ctx, "POST", "/v1/locks/"+key, fmt.Sprintf(body, i), http.StatusConflict)
		}
	}
	r.shared = map[string]series{}
	r.sharedEntries = map[string][]float64{}
	r.sharedReads = map[string][]float64{}
	for range w.o.rounds {
		for _, x := range []struct {
			name string
			op   func(context.Context, int) error
		}{
			{semWait, cycle("sem-hot", `{"owner":"o%d","limit":4,"ttl":"1m","wait":"30s"}`, false)},
			{semTry, cycle("sem-try", `{"owner":"o%d","limit":4,"ttl":"1m"}`, true)},
			{mutexWait, cycle("mutex-hot", `{"owner":"o%d","ttl":"1m","wait":"30s"}`, false)},
			{semFull, refusal("sem-full", `{"owner":"r%d","limit":4}`)},
			{rwHeld, refusal("rw-held", `{"owner":"r%d","mode":"read"}`)},
		} {
			before, err := w.raftIndex(ctx)
			if err != nil {
				return err
			}
			reads := w.metric(ctx, rangesMetric)
			s := w.run(ctx, c, x.op)
			after, err := w.raftIndex(ctx)
			if err != nil {
				return err
			}
			r.shared[x.name] = append(r.shared[x.name], s)
			if s.ops > 0 {
				r.sharedEntries[x.name] = append(r.sharedEntries[x.name], float64(after-before)/float64(s.ops))
			}
			if now := w.metric(ctx, rangesMetric); reads >= 0 && now >= 0 {
				r.sharedReads[x.name] = append(r.sharedReads[x.name], (now-reads)/float64(max(1, s.ops)))
			}
		}
	}
	return nil
}

func (r *results) printShared(w io.Writer) {
	fmt.Fprintf(w, "\n## Semaphores and read/write locks, 16 clients (4 sidecars × 4)\n\n| contender | grants or refusals/s | p50 | p99 | etcd raft entries per op | etcd reads per op |\n|---|---|---|---|---|---|\n")
	for _, name := range sharedOrder {
		s := r.shared[name]
		fmt.Fprintf(w, "| %s | %.0f | %s | %s | %.3f | %s |\n", name, s.rate(), ms(s.quantile(0.5)), ms(s.quantile(0.99)), median(r.sharedEntries[name]), perOp(r.sharedReads[name]))
	}
	for _, name := range sharedOrder {
		if n := r.shared[name].errs(); n > 0 && name != semTry {
			fmt.Fprintf(w, "\n%s: %d operations failed, the last with: %v\n", name, n, r.shared[name].lastErr())
		}
	}
}

// sharedGoals checks the shared claims' goals.
func (r *results) sharedGoals(g *goals) {
	// Both are bound by the CPU of this machine's cores, not by the line:
	// a grant of a unit must cost no more than a grant of the lock.
	sw, mw := r.shared[semWait].rate(), r.shared[mutexWait].rate()
	sc, mc := r.shared[semWait].cpuPerOp().total(), r.shared[mutexWait].cpuPerOp().total()
	x, cx := ratio(sw, mw), ratio(float64(sc), float64(mc))
	g.check(x >= 1 && cx <= 1.1, "a semaphore of 4 with 16 blocking contenders: %.0f grants/s, %.2f× the plain lock's on the same sidecars (%.0f/s), %s of CPU per grant against its %s, %.2f× (goal: at least its rate, at most 1.1× its CPU)",
		sw, x, mw, us(sc), us(mc), cx)
	g.check(r.shared[semTry].rate() >= 100, "a semaphore of 4 with 16 contenders trying in a loop: %.0f grants/s (goal ≥ 100/s, no livelock)", r.shared[semTry].rate())
	for _, name := range []string{semFull, rwHeld} {
		e := median(r.sharedEntries[name])
		g.check(e < 0.01, "%s writes %.3f etcd raft entries per refusal (goal 0)", name, e)
	}
}
