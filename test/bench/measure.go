package main

import (
	"context"
	"slices"
	"sync"
	"time"
)

// sample is one timed run of a contender.
type sample struct {
	ops     int
	errs    int
	lastErr error // the last error, for the report
	took    time.Duration
	lat     []time.Duration
	cpu     cpuSplit // CPU used during the run, by tier
	events  float64  // watch events etcd sent during the run; -1 when unknown
	txns    float64  // transactions etcd served during the run; -1 when unknown
}

func (s sample) rate() float64 { return float64(s.ops) / s.took.Seconds() }

// run is runFor with the CPU time of etcd, the sidecars and the bench's
// clients measured around it.
func (w *world) run(ctx context.Context, c int, op func(ctx context.Context, i int) error) sample {
	counted := []string{watchEventsMetric, txnsMetric}
	before, counts := w.cpuNow(), w.metrics(ctx, counted...)
	s := runFor(ctx, c, w.o.slice, op)
	s.cpu = w.cpuNow().sub(before)
	after := w.metrics(ctx, counted...)
	diff := func(i int) float64 {
		if counts[i] < 0 || after[i] < 0 {
			return -1
		}
		return after[i] - counts[i]
	}
	s.events, s.txns = diff(0), diff(1)
	return s
}

// runFor runs c goroutines, each calling op(ctx, i) in a loop, for d. An
// op's error counts but does not stop the run.
func runFor(ctx context.Context, c int, d time.Duration, op func(ctx context.Context, i int) error) sample {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var (
		mu  sync.Mutex
		all sample
		wg  sync.WaitGroup
	)
	start := time.Now()
	for i := range c {
		wg.Go(func() {
			var s sample
			for ctx.Err() == nil {
				t0 := time.Now()
				err := op(ctx, i)
				if ctx.Err() != nil {
					break // the run ended mid-operation: not counted
				}
				if err != nil {
					s.errs++
					s.lastErr = err
					continue
				}
				s.ops++
				s.lat = append(s.lat, time.Since(t0))
			}
			mu.Lock()
			all.ops += s.ops
			all.errs += s.errs
			if s.lastErr != nil {
				all.lastErr = s.lastErr
			}
			all.lat = append(all.lat, s.lat...)
			mu.Unlock()
		})
	}
	wg.Wait()
	all.took = time.Since(start)
	return all
}

// series is the samples of one contender at one setting over the rounds.
type series []sample

// rate is the median rate over the rounds.
func (s series) rate() float64 {
	var rs []float64
	for _, x := range s {
		rs = append(rs, x.rate())
	}
	slices.Sort(rs)
	if len(rs) == 0 {
		return 0
	}
	return rs[len(rs)/2]
}

// quantile of the latencies of all rounds.
func (s series) quantile(q float64) time.Duration {
	var all []time.Duration
	for _, x := range s {
		all = append(all, x.lat...)
	}
	if len(all) == 0 {
		return 0
	}
	slices.Sort(all)
	return all[int(q*float64(len(all)-1))]
}

// cpuPerOp is the CPU time each tier used per operation, over all rounds.
func (s series) cpuPerOp() cpuSplit {
	var sum cpuSplit
	ops := 0
	for _, x := range s {
		sum = sum.add(x.cpu)
		ops += x.ops
	}
	if ops == 0 {
		return cpuSplit{}
	}
	n := time.Duration(ops)
	return cpuSplit{sum.etcd / n, sum.sidecars / n, sum.clients / n}
}

// perOp is a count of each sample (watch events, transactions) per
// operation, over all rounds; -1 when unknown.
func (s series) perOp(count func(sample) float64) float64 {
	var sum float64
	ops := 0
	for _, x := range s {
		if count(x) < 0 {
			return -1
		}
		sum += count(x)
		ops += x.ops
	}
	if ops == 0 {
		return -1
	}
	return sum / float64(ops)
}

func (s series) errs() int {
	n := 0
	for _, x := range s {
		n += x.errs
	}
	return n
}

// lastErr is the last error of the last round that had one.
func (s series) lastErr() error {
	var err error
	for _, x := range s {
		if x.lastErr != nil {
			err = x.lastErr
		}
	}
	return err
}
