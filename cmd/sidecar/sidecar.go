package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/baton-dev/baton/internal/coordinator"
	"github.com/baton-dev/baton/internal/etcdmaint"
	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/lease"
	"github.com/baton-dev/baton/internal/lockstore/etcdstore"
	"github.com/baton-dev/baton/internal/metrics"
	"github.com/baton-dev/baton/internal/policy"
	"github.com/baton-dev/baton/internal/restart"
	"github.com/baton-dev/baton/internal/server"
	"github.com/baton-dev/baton/internal/version"
)

// serve runs the sidecar until ctx ends, then releases every lock (by
// revoking the lease) and removes the socket.
func serve(ctx context.Context, o *serveOptions, stdout, stderr io.Writer) error {
	logs, err := newLoggers(stderr, o.logLevel)
	if err != nil {
		return err
	}
	sc := &sidecar{o: o, logs: logs, log: logs.log}
	defer sc.close()
	if err := sc.listen(); err != nil {
		return err
	}
	if err := sc.connect(ctx); err != nil {
		return err
	}
	if err := sc.build(); err != nil {
		return err
	}
	return sc.run(ctx, stdout)
}

// sidecar is `baton serve` being wired, run and taken down.
type sidecar struct {
	o    *serveOptions
	logs loggers
	log  *slog.Logger

	sock, health, metricsL net.Listener
	reg                    *prometheus.Registry
	// maintain makes, for the embedded etcd, its maintainer (maint) on the
	// sidecar's client; nil for an etcd of others.
	maintain  func(*clientv3.Client) (*etcdmaint.Maintainer, error)
	maint     *etcdmaint.Maintainer
	metrics   *metrics.Metrics
	where     string // the etcd, for the ready line
	endpoints []string
	cli       *clientv3.Client
	history   *etcdstore.History // etcd's revisions as seen: the floor of the fences
	built     atomic.Bool        // build is done: the coordinator and the store exist
	prev      restart.State
	keeper    *lease.Keeper
	sessions  *etcdstore.Sessions // the keeper's, as the coordinator sees them
	store     *etcdstore.Store
	guard     *policy.Guard // the lock policy in force
	coord     *coordinator.Coordinator
	api       *server.Server

	closers []func() // run by close, last first
}

func (sc *sidecar) close() {
	for i := len(sc.closers) - 1; i >= 0; i-- {
		sc.closers[i]()
	}
}

// listen takes the socket first (a second sidecar on the same path must
// fail before it starts an etcd), then the TCP ports.
func (sc *sidecar) listen() error {
	if dir := filepath.Dir(defaultSocket); sc.o.socketPath == defaultSocket {
		// The pod's shared volume is there; outside a pod, the default's
		// directory is made, and said so.
		if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return fmt.Errorf("--socket %s: create its directory: %w", sc.o.socketPath, err)
			}
			sc.log.Info("created the socket's directory", "dir", dir)
		}
	}
	l, err := server.ListenUnix(sc.o.socketPath)
	if err != nil {
		return fmt.Errorf("--socket: %w", err)
	}
	sc.sock = l
	sc.closers = append(sc.closers, func() { l.Close() })
	for _, t := range []struct {
		flag, addr string
		l          *net.Listener
	}{{"--health-addr", sc.o.healthAddr, &sc.health}, {"--metrics-addr", sc.o.metricsAddr, &sc.metricsL}} {
		if t.addr == "" {
			continue
		}
		l, err := net.Listen("tcp", t.addr)
		if err != nil {
			return fmt.Errorf("%s: %w", t.flag, err)
		}
		*t.l = l
		sc.closers = append(sc.closers, func() { l.Close() })
	}
	closers, err := sc.o.dapr.built.listen(&sc.o.dapr)
	sc.closers = append(sc.closers, closers...)
	return err
}

// connect starts the embedded etcd unless endpoints were given, and
// connects to etcd with every request timed for the metrics.
func (sc *sidecar) connect(ctx context.Context) error {
	sc.reg = prometheus.NewRegistry()
	sc.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m, err := metrics.New(sc.reg, sc.o.metricsKeyDepth)
	if err != nil {
		return err
	}
	sc.metrics = m
	for _, r := range coordinator.LostReasons() {
		m.InitLossReasons(string(r))
	}
	if err := metrics.RegisterBuildInfo(sc.reg, version.Get()); err != nil {
		return err
	}
	sc.endpoints, sc.where = sc.o.etcd.endpoints, "etcd at "+strings.Join(sc.o.etcd.endpoints, ",")
	if len(sc.endpoints) == 0 {
		if err := sc.startEmbedded(ctx); err != nil {
			return err
		}
	}
	sc.history = etcdstore.NewHistory(sc.rewound)
	cli, err := sc.o.etcd.client(sc.endpoints, sc.logs.etcdClient, grpc.WithChainUnaryInterceptor(m.UnaryClientInterceptor(), sc.history.UnaryClientInterceptor()))
	if err != nil {
		return err
	}
	sc.cli = cli
	sc.closers = append(sc.closers, func() { cli.Close() })
	if sc.maintain != nil {
		if sc.maint, err = sc.maintain(cli); err != nil {
			return err
		}
	}
	return nil
}

// build makes the keeper (resuming the lease of a crashed predecessor, if
// the state file names one), the coordinator and the socket API.
func (sc *sidecar) build() error {
	prev, err := restart.Read(sc.o.statePath)
	if err != nil {
		sc.log.Warn("ignoring an unreadable state file", "err", err)
	}
	if prev.Scope == sc.o.coord.Scope {
		sc.prev = prev
		sc.history.Raise(prev.High, "this sidecar's state file "+sc.o.statePath)
	}
	opts := []lease.Option{lease.OnSessionLost(sc.metrics.SessionLost), lease.HeardRevisions(sc.history.Heard)}
	if prev := sc.prev.LeaseIDs(); len(prev) > 0 {
		ids := make([]clientv3.LeaseID, len(prev))
		for i, id := range prev {
			ids[i] = clientv3.LeaseID(id)
		}
		opts = append(opts, lease.ResumeLeases(ids...))
	}
	if sc.keeper, err = lease.NewKeeper(sc.cli, sc.o.lease, sc.log, opts...); err != nil {
		return err
	}
	sc.sessions = etcdstore.NewSessions(sc.keeper)
	sc.store = etcdstore.New(sc.cli, sc.o.coord.RequestTimeout, etcdstore.OnCommit(sc.metrics.Committed), etcdstore.User(sc.o.etcd.user()))
	source := "the lock policy in etcd at " + sc.policyKey()
	if sc.o.policyFile != "" {
		source = "the lock policy file " + sc.o.policyFile
	}
	sc.guard = policy.NewGuard(sc.o.serviceAccount, source, sc.log, sc.metrics.PolicyChanged)
	if sc.coord, err = coordinator.New(sc.o.coord, sc.store, sc.sessions, sc.log, coordinator.WithObserver(sc.metrics), coordinator.WithPolicy(sc.guard), coordinator.WithHistory(sc.history)); err != nil {
		return err
	}
	sc.coord.Remember(sc.prev.Lost)
	if err := sc.metrics.RegisterHeld(sc.reg, sc.coord, time.Now); err != nil {
		return err
	}
	id := sc.o.coord.Identity
	sc.api, err = server.New(sc.o.server, sc.coord, sc.log,
		server.WithAudit(server.Caller{Pod: id.Pod, Namespace: id.Namespace, ServiceAccount: sc.o.serviceAccount}, sc.metrics))
	if err != nil {
		return err
	}
	if err := sc.o.dapr.built.build(&sc.o.dapr, sc.coord, sc.log); err != nil {
		return err
	}
	sc.built.Store(true)
	return nil
}

// policyKey is the etcd key of the scope's lock policy.
func (sc *sidecar) policyKey() string {
	l, _ := keyspace.NewLayout(sc.o.coord.Scope) // validated with the options
	return l.Policy()
}

// followPolicy keeps the guard's policy current until ctx ends: from the
// policy file when one was given, else from etcd.
func (sc *sidecar) followPolicy(ctx context.Context) error {
	if sc.o.policyFile != "" {
		policy.FollowFile(ctx, sc.o.policyFile, sc.guard, time.Second)
		return nil
	}
	sc.store.Follow(ctx, sc.policyKey(), time.Second, etcdstore.Follower{
		Set:  func(v []byte, rev int64) { sc.guard.SetJSON(v, fmt.Sprintf("etcd revision %d", rev)) },
		Fail: sc.guard.Fail,
	})
	return nil
}

// run serves until ctx ends, then shuts down: every lock is released at
// once by revoking the lease.
func (sc *sidecar) run(ctx context.Context, stdout io.Writer) error {
	runCtx, stopRun := context.WithCancel(context.Background())
	serveCtx, stopServing := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	goRun := func(f func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(runCtx); err != nil {
				sc.log.Error("component stopped", "err", err)
			}
		}()
	}
	serveOn := func(l net.Listener, h http.Handler) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := server.Serve(serveCtx, sc.api.HTTPServer(h), l, 500*time.Millisecond); err != nil {
				sc.log.Error("server stopped", "addr", l.Addr().String(), "err", err)
			}
		}()
	}
	goRun(sc.keeper.Run)
	if sc.maint != nil {
		goRun(sc.maint.Run)
	}
	goRun(sc.followPolicy)
	goRun(sc.followFloor)
	coordCtx, stopCoord := context.WithCancel(runCtx)
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := sc.coord.Run(coordCtx); err != nil {
			sc.log.Error("component stopped", "err", err)
		}
	}()
	if sc.health != nil {
		serveOn(sc.health, sc.api.HealthHandler())
	}
	if sc.metricsL != nil {
		serveOn(sc.metricsL, sc.metricsHandler())
	}

	// The socket is served at once: while etcd cannot be reached, callers
	// get 503 naming it, as they do when etcd goes away later. Only while
	// the locks of the process before this one are taken over do they wait
	// (a request timeout at most): until then, their own locks are not
	// known here.
	api := sc.api.Handler()
	adopted := make(chan struct{})
	adopting := len(sc.prev.LeaseIDs()) > 0
	if adopting {
		api = sc.api.Starting(api, adopted, sc.o.coord.RequestTimeout)
	}
	serveOn(sc.sock, api)
	sc.o.dapr.built.serve(serveCtx, &wg, adopting, adopted, sc.log)
	sc.log.Info("listening", "socket", sc.o.socketPath, "etcd", sc.endpoints)
	ready := waitReady(ctx, sc.coord, sc.log)
	if ready && adopting {
		restart.Keep(ctx, sc.sessions, sc.coord, sc.prev, sc.log)
	}
	close(adopted)
	saveCtx, stopSaving := context.WithCancel(runCtx)
	saved := make(chan struct{})
	goRun(func(context.Context) error {
		defer close(saved)
		return restart.Save(saveCtx, sc.o.statePath, sc.o.coord.Scope, sc.coord, sc.sessions, sc.history.High)
	})
	stopSave := func() { stopSaving(); <-saved }
	if ready {
		sc.announce(stdout)
	}

	<-ctx.Done()
	sc.shutdown(&wg, stopSave, stopCoord, stopServing, stopRun)
	return nil
}

// shutdown releases every lock, stops the components in order and waits
// for them. stopSave stops the state file's writer and waits for it.
func (sc *sidecar) shutdown(wg *sync.WaitGroup, stopSave, stopCoord, stopServing, stopRun func()) {
	start := time.Now()
	// The holds' callers (baton run) stop their work first: until they
	// hang up, or the grace is over, their locks stay held and nothing is
	// granted.
	sc.coord.Drain()
	dctx, cancel := context.WithTimeout(context.Background(), sc.o.shutdownGrace)
	sc.api.Drain(dctx)
	cancel()
	sc.log.Info("shutting down: releasing every lock", "drained", time.Since(start).Round(time.Millisecond))
	sc.coord.Shutdown()
	// Neither the state file's journal of the locks that just ended nor
	// the watch of their deletes is of use now; with many locks, either
	// would compete with the revokes for CPU.
	stopSave()
	stopCoord()
	sc.revoke()
	sc.log.Info("every lock released", "took", time.Since(start).Round(time.Millisecond))
	stopServing()
	stopRun()
	wg.Wait()
	// The owners of the locks that just ended hear why from the next
	// process (410 lock_lost, reason shutdown), not 404.
	if err := restart.Closed(sc.o.statePath, sc.o.coord.Scope, sc.coord.Losses(), sc.history.High()); err != nil {
		sc.log.Warn("write the state file", "err", err)
	}
	sc.log.Info("stopped", "took", time.Since(start).Round(time.Millisecond))
}

// announce says the sidecar serves, with a first command to try.
func (sc *sidecar) announce(stdout io.Writer) {
	fmt.Fprintf(stdout, "baton: serving on %s (%s, scope %q); try: curl -s --unix-socket %s -X POST http://baton/v1/locks/demo\n",
		sc.o.socketPath, sc.where, sc.o.coord.Scope, sc.o.socketPath)
	sc.log.Info("serving", "socket", sc.o.socketPath, "etcd", sc.endpoints, "scope", sc.o.coord.Scope, "pod", sc.o.coord.Identity.Pod)
}

// metricsHandler serves the metrics, and pprof when asked for.
func (sc *sidecar) metricsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(sc.reg, promhttp.HandlerOpts{Registry: sc.reg}))
	if sc.o.pprof {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// revoke revokes the session's leases, which frees every lock at once:
// one revoke per lease, a few milliseconds each.
func (sc *sidecar) revoke() {
	rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := sc.keeper.Close(rctx); err != nil {
		sc.log.Error("revoke lease: locks stay held until the lease TTL passes", "err", err)
	}
}

// waitReady waits until coord can grant locks, or ctx ends; it says so in
// the log every few seconds while etcd cannot be reached.
func waitReady(ctx context.Context, coord *coordinator.Coordinator, log *slog.Logger) bool {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	start, warned := time.Now(), time.Now()
	for {
		err := coord.Ready()
		if err == nil {
			return true
		}
		if time.Since(warned) > 5*time.Second {
			warned = time.Now()
			log.Warn("not ready yet", "err", err, "waited", time.Since(start).Round(time.Second))
		}
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
}
