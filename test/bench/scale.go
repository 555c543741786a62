package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// scaleResult is one sidecar holding n locks.
type scaleResult struct {
	n          int
	rate       float64 // acquisitions per second, 64 clients
	rss        int64
	leases     int // leases the sidecar keeps alive
	exit       time.Duration
	released   time.Duration // SIGTERM → no key left
	worstWrite time.Duration // slowest etcd write meanwhile
}

// scale: one sidecar acquires n distinct locks (64 clients), then is
// SIGTERMed while a probe writes to etcd every 5 ms.
func (w *world) scale(ctx context.Context, r *results) error {
	sizes := []int{w.o.scaleMax}
	if w.o.scaleMax > 10_000 {
		sizes = []int{10_000, w.o.scaleMax}
	}
	for _, n := range sizes {
		res, err := w.scaleOnce(ctx, n)
		if err != nil {
			return err
		}
		r.scale = append(r.scale, res)
	}
	return nil
}

func (w *world) scaleOnce(ctx context.Context, n int) (scaleResult, error) {
	res := scaleResult{n: n}
	leasesBefore, err := w.cli.Leases(ctx)
	if err != nil {
		return res, err
	}
	extra := strings.Fields(w.o.scaleArgs)
	profAddr := ""
	if w.o.heap != "" && n == w.o.scaleMax {
		if profAddr, err = freeAddr(); err != nil {
			return res, err
		}
		extra = append(extra, "--metrics-addr", profAddr, "--pprof")
	}
	s, err := w.startSidecar(fmt.Sprintf("scale%d", n), extra...)
	if err != nil {
		return res, err
	}
	start := time.Now()
	if err := fill(ctx, s, n); err != nil {
		return res, err
	}
	res.rate = float64(n) / time.Since(start).Seconds()
	res.rss = s.rss()
	if profAddr != "" {
		if err := fetchPprof(profAddr, "heap", w.o.heap); err != nil {
			return res, fmt.Errorf("heap profile: %w", err)
		}
	}
	leasesAfter, err := w.cli.Leases(ctx)
	if err != nil {
		return res, err
	}
	res.leases = len(leasesAfter.Leases) - len(leasesBefore.Leases)
	return res, w.releaseAll(ctx, s, &res)
}

// fill has 64 clients of s acquire n distinct locks.
func fill(ctx context.Context, s *sidecar, n int) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	for i := range 64 {
		wg.Go(func() {
			for {
				j := next.Add(1) - 1
				if j >= int64(n) {
					return
				}
				if err := s.call(ctx, "POST", fmt.Sprintf("/v1/locks/sc%d", j), fmt.Sprintf(`{"owner":"o%d","ttl":"1h"}`, i), 200); err != nil {
					failed.Store(err)
					return
				}
			}
		})
	}
	wg.Wait()
	err, _ := failed.Load().(error)
	return err
}

// releaseAll SIGTERMs s, which releases every lock, while a probe measures
// etcd's write latency, and notes in res how long that took.
func (w *world) releaseAll(ctx context.Context, s *sidecar, res *scaleResult) error {
	stop := make(chan struct{})
	var worst atomic.Int64
	var pwg sync.WaitGroup
	pwg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			t0 := time.Now()
			if _, err := w.cli.Put(ctx, "/bench/probe", "x"); err == nil {
				if d := int64(time.Since(t0)); d > worst.Load() {
					worst.Store(d)
				}
			}
		}
	})
	time.Sleep(200 * time.Millisecond)
	worst.Store(0)
	// The keys are gone when etcd's watch has delivered the delete of each,
	// which may be before the process has exited: counted from the watch,
	// which costs etcd a few responses, where polling a count of 100 000
	// keys would compete with the revokes it measures.
	const prefix = "/baton/v1/bench/locks/sc"
	before, err := w.cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	deletes := w.cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(before.Header.Revision+1), clientv3.WithFilterPut())
	t0 := time.Now()
	exited := make(chan time.Duration, 1)
	go func() { exited <- s.term() }()
	for gone := int64(0); gone < before.Count; {
		resp, ok := <-deletes
		if !ok || resp.Err() != nil {
			why := cmp.Or(resp.Err(), wctx.Err(), errors.New("the watch ended"))
			return fmt.Errorf("%d of %d keys still there after SIGTERM: %w", before.Count-gone, before.Count, why)
		}
		gone += int64(len(resp.Events))
	}
	res.released = time.Since(t0)
	res.exit = <-exited
	left, err := w.cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return fmt.Errorf("count the keys left after SIGTERM: %w", err)
	}
	if left.Count != 0 {
		return fmt.Errorf("every key's delete seen after SIGTERM, and %d keys still there", left.Count)
	}
	time.Sleep(200 * time.Millisecond)
	close(stop)
	pwg.Wait()
	res.worstWrite = time.Duration(worst.Load())
	return nil
}
