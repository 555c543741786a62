package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/baton-dev/baton/internal/coordinator"
	"github.com/baton-dev/baton/internal/engine"
	"github.com/baton-dev/baton/internal/keyspace"
)

// keepAlivesMetric counts the lease keep-alive requests etcd received.
const keepAlivesMetric = `grpc_server_msg_received_total{grpc_method="LeaseKeepAlive",grpc_service="etcdserverpb.Lease",grpc_type="bidi_stream"}`

// The scale-out workload: every engine holds heldPerEngine locks for the
// whole run; the engines together take and release others at
// scaleOutRate cycles per second, for scaleOutWindow.
const (
	heldPerEngine  = 2
	scaleOutRate   = 100
	scaleOutWindow = 10 * time.Second
)

// scaleOutResult is one size of the scale-out step.
type scaleOutResult struct {
	n          int
	proxies    int             // etcd gRPC proxies the engines reach etcd through; 0: direct
	streams    etcdStreams     // what etcd serves the engines, in the window
	cycles     int             // acquire + release cycles in the window
	errs       int             // cycles that failed
	etcdCPU    time.Duration   // etcd's CPU in the window
	events     float64         // watch events etcd sent in the window
	keepAlives float64         // keep-alive requests etcd received in the window
	lat        []time.Duration // immediate grants
	handOff    []time.Duration // from a release to its waiter's grant
	memPerEng  int64           // the bench's RSS per engine
	took       time.Duration
}

// ops is the lock operations of the window: an acquire and a release a cycle.
func (r scaleOutResult) ops() float64 { return float64(2 * r.cycles) }

func (r scaleOutResult) cpuPerOp() time.Duration {
	return time.Duration(float64(r.etcdCPU) / max(r.ops(), 1))
}

// eventsPerOp is the watch events etcd sent per lock operation; NaN when
// they were not read or nothing ran.
func (r scaleOutResult) eventsPerOp() float64 {
	if r.events < 0 || r.cycles == 0 {
		return math.NaN()
	}
	return r.events / r.ops()
}

func (r scaleOutResult) quantile(q float64) time.Duration { return quantileOf(r.lat, q) }

func (r scaleOutResult) handOffQuantile(q float64) time.Duration { return quantileOf(r.handOff, q) }

func quantileOf(lat []time.Duration, q float64) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	s := slices.Clone(lat)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// replica is one sidecar's lock engine, wired as `baton serve` wires it
// (package engine): its own etcd client and connection, its own session,
// policy and coordinator, in this process.
type replica struct {
	eng   *engine.Engine
	coord *coordinator.Coordinator
}

// scaleOut: many sidecars in one scope on one etcd, as a namespace with
// thousands of replicas has, each with its session, its keep-alives and
// its watch. For each size, N engines hold a few locks each while the
// engines together churn others at a fixed total rate; what etcd does per
// lock operation should not grow with N.
func (w *world) scaleOut(ctx context.Context, r *results) error {
	for _, f := range strings.Split(w.o.scaleOut, ",") {
		size, via, proxied := strings.Cut(strings.TrimSpace(f), "/")
		n, err := strconv.Atoi(size)
		p := 0
		if proxied {
			p, err = strconv.Atoi(via)
		}
		if err != nil || n < 1 || p < 0 || (proxied && p < 1) {
			return fmt.Errorf("-scale-out %q: want sizes such as 10,100,1000, each N or N/P for N engines through P of etcd's gRPC proxies", w.o.scaleOut)
		}
		res, err := w.scaleOutOnce(ctx, n, p)
		if err != nil {
			return fmt.Errorf("%d engines: %w", n, err)
		}
		r.scaleOut = append(r.scaleOut, res)
	}
	return nil
}

func (w *world) scaleOutOnce(ctx context.Context, n, proxies int) (scaleOutResult, error) {
	res := scaleOutResult{n: n, proxies: proxies}
	base := w.settledStreams(ctx)
	endpoints := []string{w.etcd.endpoint}
	if proxies > 0 {
		procs, eps, err := w.startProxies(proxies)
		if err != nil {
			return res, err
		}
		defer stopAll(procs)
		endpoints = eps
	}
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	engines := make([]*replica, 0, n)
	defer func() {
		stop() // each engine lets its locks go, revoking its session's leases
		wg.Wait()
		for _, e := range engines {
			e.eng.Close()
		}
	}()
	runtime.GC()
	rssBefore := selfRSS()
	scope := fmt.Sprintf("bench-scaleout-%d-%d", n, proxies)
	for i := range n {
		e, err := newEngine(endpoints[i%len(endpoints)], scope, i)
		if err != nil {
			return res, err
		}
		engines = append(engines, e)
		wg.Go(func() { _ = e.eng.Run(runCtx, engine.Hooks{}) })
	}
	// Each engine takes its held locks (once ready): a sidecar whose app
	// holds something, so its session and watch are in use.
	if err := forEach(ctx, engines, func(ctx context.Context, i int, e *replica) error {
		for e.coord.Ready() != nil {
			select {
			case <-ctx.Done():
				return fmt.Errorf("engine %d not ready: %w", i, e.coord.Ready())
			case <-time.After(20 * time.Millisecond):
			}
		}
		for j := range heldPerEngine {
			if _, err := e.coord.Acquire(ctx, coordinator.AcquireRequest{Key: key(fmt.Sprintf("held/%d-%d", i, j)), Owner: "holder", TTL: time.Hour}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return res, err
	}
	time.Sleep(time.Second) // the held locks' watches open (the watch delay)
	runtime.GC()
	res.memPerEng = (selfRSS() - rssBefore) / int64(n)
	churn(ctx, engines, time.Second) // warm-up, not measured
	res.streams = w.streamsNow(ctx).minus(base)

	counted := []string{watchEventsMetric, keepAlivesMetric}
	before, cpu0 := w.metrics(ctx, counted...), cpuTime(w.etcd.cmd.Process.Pid)
	c := churn(ctx, engines, scaleOutWindow)
	res.lat, res.handOff, res.cycles, res.errs, res.took = c.lat, c.handOff, c.cycles, c.errs, c.took
	after, cpu1 := w.metrics(ctx, counted...), cpuTime(w.etcd.cmd.Process.Pid)
	res.etcdCPU = cpu1 - cpu0
	diff := func(i int) float64 {
		if before[i] < 0 || after[i] < 0 {
			return -1 // not read: the goals say so
		}
		return after[i] - before[i]
	}
	res.events, res.keepAlives = diff(0), diff(1)
	return res, nil
}

// churn takes and releases locks through random engines at scaleOutRate
// cycles per second for window, each cycle on a lock of its own. Every
// other cycle is a try released at once; the others come in pairs, a hand
// off between two engines: both ask with a wait, one is granted, holds the
// lock for handOffHold, releases it, and the other, queued meanwhile, is
// granted by its watch. It returns each immediate grant's latency, and
// each hand-off's from the release to the waiter's grant.
func churn(ctx context.Context, engines []*replica, window time.Duration) (c churned) {
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	record := func(lat *[]time.Duration, d time.Duration, n int, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			c.errs += n
			return
		}
		c.cycles += n
		*lat = append(*lat, d)
	}
	tick := time.NewTicker(time.Second / scaleOutRate)
	defer tick.Stop()
	start := time.Now()
	for seq := 0; time.Since(start) < window; seq++ {
		<-tick.C
		k := key(fmt.Sprintf("churn/%d-%d", start.UnixNano(), seq))
		switch seq % 4 {
		case 0, 2:
			e := engines[rand.IntN(len(engines))]
			wg.Go(func() {
				d, err := cycle(ctx, e, k)
				record(&c.lat, d, 1, err)
			})
		case 1:
			a, b := engines[rand.IntN(len(engines))], engines[rand.IntN(len(engines))]
			wg.Go(func() {
				d, took, err := handOff(ctx, a, b, k)
				record(&c.lat, d, 1, err)
				record(&c.handOff, took, 1, err)
			})
		}
	}
	wg.Wait()
	c.took = time.Since(start)
	return c
}

// churned is what one churn did.
type churned struct {
	lat, handOff []time.Duration
	cycles, errs int
	took         time.Duration
}

// handOffHold is how long the first holder of a hand-off holds the lock.
const handOffHold = 20 * time.Millisecond

// handOff has engine a take lock k and b wait for it; a releases it after
// handOffHold. It returns a's grant latency and the time from a's release
// to b's grant.
func handOff(ctx context.Context, a, b *replica, k keyspace.Key) (grant, handOff time.Duration, err error) {
	t0 := time.Now()
	g, err := a.coord.Acquire(ctx, coordinator.AcquireRequest{Key: k, Owner: "first", TTL: time.Minute, Wait: time.Second})
	if err != nil {
		return 0, 0, err
	}
	grant = time.Since(t0)
	pos := coordinator.NewPosition()
	type granted struct {
		at  time.Time
		err error
	}
	waiter := make(chan granted, 1)
	go func() {
		g, err := b.coord.Acquire(ctx, coordinator.AcquireRequest{Key: k, Owner: "second", TTL: time.Minute, Wait: 5 * time.Second, Position: pos})
		at := time.Now()
		if err == nil {
			_, err = b.coord.Release(ctx, k, g.Owner)
		}
		waiter <- granted{at, err}
	}()
	select {
	case <-pos.Changed(): // queued: the waiter knows its place
	case w := <-waiter:
		_, _ = a.coord.Release(ctx, k, g.Owner)
		if w.err != nil {
			return grant, 0, fmt.Errorf("the waiter: %w", w.err)
		}
		return grant, 0, fmt.Errorf("the waiter was granted %q before its release", k)
	}
	time.Sleep(handOffHold)
	released := time.Now()
	if _, err := a.coord.Release(ctx, k, g.Owner); err != nil {
		return grant, 0, err
	}
	w := <-waiter
	if w.err != nil {
		return grant, 0, fmt.Errorf("the waiter: %w", w.err)
	}
	return grant, w.at.Sub(released), nil
}

// cycle takes lock k through e with a try and releases it, returning the
// grant's latency.
func cycle(ctx context.Context, e *replica, k keyspace.Key) (time.Duration, error) {
	t0 := time.Now()
	g, err := e.coord.Acquire(ctx, coordinator.AcquireRequest{Key: k, Owner: "churner", TTL: time.Minute})
	d := time.Since(t0)
	if err == nil {
		_, err = e.coord.Release(ctx, k, g.Owner)
	}
	return d, err
}

// newEngine builds a sidecar's lock engine as `baton serve` does (package
// engine: its metrics, policy and fences' floor included), on its own etcd
// client.
func newEngine(endpoint, scope string, i int) (*replica, error) {
	cfg := engine.Default()
	cfg.Coordinator.Scope = scope
	cfg.Coordinator.Identity = coordinator.Identity{Pod: fmt.Sprintf("pod-%d", i), Namespace: scope, Node: "bench"}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	e, err := engine.New(cfg, prometheus.NewRegistry(), func(opts ...grpc.DialOption) (*clientv3.Client, error) {
		return clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 10 * time.Second, Logger: zap.NewNop(), DialOptions: opts})
	}, log)
	if err != nil {
		return nil, err
	}
	return &replica{eng: e, coord: e.Coordinator()}, nil
}

// forEach runs f on every engine, 64 at a time, and returns the first
// error.
func forEach(ctx context.Context, engines []*replica, f func(ctx context.Context, i int, e *replica) error) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	sem := make(chan struct{}, 64)
	errc := make(chan error, len(engines))
	var wg sync.WaitGroup
	for i, e := range engines {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			errc <- f(ctx, i, e)
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		if err != nil {
			return err
		}
	}
	return nil
}

func key(s string) keyspace.Key {
	k, err := keyspace.ParseKey(s)
	if err != nil {
		panic(err) // the bench's own keys
	}
	return k
}

// selfRSS is this process's resident size in bytes.
func selfRSS() int64 { return statusRSS("/proc/self/status") }
