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
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/baton-dev/baton/internal/engine"
	"github.com/baton-dev/baton/internal/etcdmaint"
	"github.com/baton-dev/baton/internal/metrics"
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

// sidecar is `baton serve` being wired, run and taken down: the lock
// engine (package engine) and its front ends.
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
	where     string // the etcd, for the ready line
	endpoints []string
	engine    *engine.Engine
	api       *server.Server
	cand      *candidacy // --campaign's; nil without

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
	if err := sc.listenLeader(); err != nil {
		return err
	}
	closers, err := sc.o.dapr.built.listen(&sc.o.dapr)
	sc.closers = append(sc.closers, closers...)
	return err
}

// connect starts the embedded etcd unless endpoints were given, and
// builds the lock engine on a client of that etcd.
func (sc *sidecar) connect(ctx context.Context) error {
	sc.reg = prometheus.NewRegistry()
	sc.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if err := metrics.RegisterBuildInfo(sc.reg, version.Get()); err != nil {
		return err
	}
	sc.endpoints, sc.where = sc.o.etcd.endpoints, "etcd at "+strings.Join(sc.o.etcd.endpoints, ",")
	if len(sc.endpoints) == 0 {
		if err := sc.startEmbedded(ctx); err != nil {
			return err
		}
	}
	eng, err := engine.New(sc.o.engine, sc.reg, func(opts ...grpc.DialOption) (*clientv3.Client, error) {
		return sc.o.etcd.client(sc.endpoints, sc.logs.etcdClient, opts...)
	}, sc.log)
	if err != nil {
		return err
	}
	sc.engine = eng
	sc.closers = append(sc.closers, func() { eng.Close() })
	if sc.maintain != nil {
		if sc.maint, err = sc.maintain(eng.Client()); err != nil {
			return err
		}
	}
	return nil
}

// build makes the front ends: the socket API and, when on, Dapr's.
func (sc *sidecar) build() error {
	coord := sc.engine.Coordinator()
	id := sc.o.engine.Coordinator.Identity
	var err error
	sc.api, err = server.New(sc.o.server, coord, sc.log,
		server.WithAudit(server.Caller{Pod: id.Pod, Namespace: id.Namespace, ServiceAccount: sc.o.engine.ServiceAccount}, sc.engine.Metrics()),
		server.WithElections(sc.engine.Elections()))
	if err != nil {
		return err
	}
	return sc.o.dapr.built.build(&sc.o.dapr, coord, sc.log)
}

// run serves until ctx ends, then shuts down: the engine lets every lock
// go at once by revoking its session's leases, and the front ends stop.
func (sc *sidecar) run(ctx context.Context, stdout io.Writer) error {
	runCtx, stopRun := context.WithCancel(context.Background())
	serveCtx, stopServing := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	serveOn := func(l net.Listener, h http.Handler) {
		wg.Go(func() {
			if err := server.Serve(serveCtx, sc.api.HTTPServer(h), l, 500*time.Millisecond); err != nil {
				sc.log.Error("server stopped", "addr", l.Addr().String(), "err", err)
			}
		})
	}
	if sc.maint != nil {
		wg.Go(func() {
			if err := sc.maint.Run(runCtx); err != nil {
				sc.log.Error("component stopped", "err", err)
			}
		})
	}
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
	adopting, adopted := sc.engine.Adopting(), sc.engine.Adopted()
	if adopting {
		api = sc.api.Starting(api, adopted, sc.o.engine.Coordinator.RequestTimeout)
	}
	serveOn(sc.sock, api)
	sc.o.dapr.built.serve(serveCtx, &wg, adopting, adopted, sc.log)
	sc.runCandidacy(serveCtx, &wg)
	sc.log.Info("listening", "socket", sc.o.socketPath, "etcd", sc.endpoints)
	var stopping time.Time // the way down starts with the drain
	err := sc.engine.Run(ctx, engine.Hooks{
		Ready: func() { sc.announce(stdout) },
		Drain: func(ctx context.Context) { stopping = time.Now(); sc.resign(ctx); sc.api.Drain(ctx) },
	})
	stopServing()
	stopRun()
	wg.Wait()
	sc.log.Info("stopped", "took", time.Since(stopping).Round(time.Millisecond))
	return err
}

// announce says the sidecar serves, with a first command to try.
func (sc *sidecar) announce(stdout io.Writer) {
	fmt.Fprintf(stdout, "baton: serving on %s (%s, scope %q); try: curl -s --unix-socket %s -X POST http://baton/v1/locks/demo\n",
		sc.o.socketPath, sc.where, sc.o.engine.Coordinator.Scope, sc.o.socketPath)
	sc.log.Info("serving", "socket", sc.o.socketPath, "etcd", sc.endpoints, "scope", sc.o.engine.Coordinator.Scope, "pod", sc.o.engine.Coordinator.Identity.Pod)
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
