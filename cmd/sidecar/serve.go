package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"

	"github.com/baton-dev/baton/internal/coordinator"
	"github.com/baton-dev/baton/internal/embedetcd"
	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/lease"
	"github.com/baton-dev/baton/internal/metrics"
	"github.com/baton-dev/baton/internal/server"
)

// serveOptions is everything `baton serve` is configured with.
type serveOptions struct {
	socketPath      string
	statePath       string
	healthAddr      string
	metricsAddr     string
	metricsKeyDepth int
	logLevel        string

	etcd      etcdOptions
	dataDir   string
	clientURL string

	lease  lease.Config
	coord  coordinator.Config
	server server.Config
}

func newServeCmd(getenv func(string) string, stdout, stderr io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the lock API on a unix socket (embedded etcd unless --etcd-endpoints is set)",
		Long: `Serve the lock API on a unix socket.

Every flag can also be set by an environment variable: --lease-ttl by
BATON_LEASE_TTL, and so on. The etcd password is read from BATON_ETCD_PASSWORD
only. The pod's identity comes from POD_NAME, POD_NAMESPACE and NODE_NAME.`,
		Args: cobra.NoArgs,
	}
	opts := defaultServeOptions(getenv)
	opts.addFlags(cmd.Flags())
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if err := bindEnv(cmd.Flags(), getenv); err != nil {
			return err
		}
		opts.etcd.password = getenv("BATON_ETCD_PASSWORD")
		if err := opts.validate(); err != nil {
			return usageError{err}
		}
		return serve(cmd.Context(), opts, stdout, stderr)
	}
	return cmd
}

func defaultServeOptions(getenv func(string) string) *serveOptions {
	host, _ := os.Hostname()
	pod, node, ns := getenv("POD_NAME"), getenv("NODE_NAME"), getenv("POD_NAMESPACE")
	if pod == "" {
		pod = host
	}
	if node == "" {
		node = host
	}
	o := &serveOptions{
		socketPath: "/var/run/baton/baton.sock",
		healthAddr: ":8081",
		logLevel:   "info",
		dataDir:    "baton-data",
		clientURL:  "http://127.0.0.1:2379",
		etcd:       etcdOptions{dialTimeout: 5 * time.Second},
		lease:      lease.Default(),
		coord:      coordinator.Default(),
		server:     server.Default(),
	}
	o.coord.Identity = coordinator.Identity{Pod: pod, Namespace: ns, Node: node}
	if ns != "" {
		o.coord.Scope = ns
	}
	return o
}

func (o *serveOptions) addFlags(fs *pflag.FlagSet) {
	fs.SortFlags = false
	fs.StringVar(&o.socketPath, "socket-path", o.socketPath, "unix socket to serve the lock API on (mode 0660)")
	fs.StringVar(&o.statePath, "state-file", "", "where the held locks are kept so that a restarted sidecar keeps them (default: the socket path + .state)")
	fs.StringVar(&o.healthAddr, "health-addr", o.healthAddr, "TCP address for /healthz and /readyz probes; empty disables")
	fs.StringVar(&o.metricsAddr, "metrics-addr", "", "TCP address for Prometheus /metrics, e.g. :9090; empty disables")
	fs.IntVar(&o.metricsKeyDepth, "metrics-key-depth", 0, "label per-lock metrics with the first N key segments (0: no key label)")
	fs.StringVar(&o.coord.Scope, "scope", o.coord.Scope, "scope isolating this sidecar's locks in etcd; $POD_NAMESPACE when set")
	fs.DurationVar(&o.lease.TTL, "lease-ttl", o.lease.TTL, "TTL of the sidecar's etcd lease: how long a crashed sidecar's locks stay held (at least 2s)")
	fs.DurationVar(&o.coord.DefaultTTL, "default-ttl", o.coord.DefaultTTL, "a lock's ttl when the caller gives none")
	fs.DurationVar(&o.coord.MaxHold, "max-hold", o.coord.MaxHold, "the longest ttl a caller may ask for, on acquire and on extend")
	fs.DurationVar(&o.coord.MaxWait, "max-wait", o.coord.MaxWait, "the longest wait a caller may ask for")
	fs.IntVar(&o.coord.MaxWaiters, "max-waiters", o.coord.MaxWaiters, "the most callers queued at once in this sidecar; more get 429")
	fs.DurationVar(&o.coord.RequestTimeout, "request-timeout", o.coord.RequestTimeout, "bound of one etcd request; past it the caller gets 503")
	fs.StringVar(&o.logLevel, "log-level", o.logLevel, "debug, info, warn or error")
	fs.StringSliceVar(&o.etcd.endpoints, "etcd-endpoints", nil, "etcd client URLs, comma-separated; empty starts an embedded single-node etcd")
	fs.StringVar(&o.etcd.caCert, "etcd-cacert", "", "CA bundle to verify etcd's certificate")
	fs.StringVar(&o.etcd.cert, "etcd-cert", "", "client certificate for etcd (with --etcd-key)")
	fs.StringVar(&o.etcd.key, "etcd-key", "", "client key for etcd (with --etcd-cert)")
	fs.StringVar(&o.etcd.username, "etcd-username", "", "etcd user; the password comes from BATON_ETCD_PASSWORD")
	fs.DurationVar(&o.etcd.dialTimeout, "etcd-dial-timeout", o.etcd.dialTimeout, "bound of the first connection to etcd")
	fs.StringVar(&o.dataDir, "data-dir", o.dataDir, "data directory of the embedded etcd")
	fs.StringVar(&o.clientURL, "embedded-client-url", o.clientURL, "client URL of the embedded etcd; other sidecars on the machine may join it with --etcd-endpoints")
}

// validate checks every option; each error names its flag.
func (o *serveOptions) validate() error {
	if o.socketPath == "" {
		return errors.New("--socket-path: required")
	}
	if o.statePath == "" {
		o.statePath = o.socketPath + ".state"
	}
	if o.healthAddr != "" {
		if _, _, err := net.SplitHostPort(o.healthAddr); err != nil {
			return fmt.Errorf("--health-addr %q: want host:port, e.g. :8081", o.healthAddr)
		}
	}
	// The grant timeout follows the lease TTL: at most half of it.
	o.lease.GrantTimeout = min(lease.Default().GrantTimeout, o.lease.TTL/2)
	if o.metricsAddr != "" {
		if _, _, err := net.SplitHostPort(o.metricsAddr); err != nil {
			return fmt.Errorf("--metrics-addr %q: want host:port, e.g. :9090", o.metricsAddr)
		}
	}
	if o.metricsKeyDepth < 0 || o.metricsKeyDepth > keyspace.MaxSegments {
		return fmt.Errorf("--metrics-key-depth %d: must be 0 to %d", o.metricsKeyDepth, keyspace.MaxSegments)
	}
	if err := o.lease.Validate(); err != nil {
		return fmt.Errorf("--lease-ttl: %w", err)
	}
	if err := o.coord.Validate(); err != nil {
		return fmt.Errorf("%s: %w", coordFlag(err), err)
	}
	if o.coord.RequestTimeout >= o.lease.TTL/2 {
		return fmt.Errorf("--request-timeout %v: must be less than half the lease TTL (%v)", o.coord.RequestTimeout, o.lease.TTL)
	}
	if err := o.etcd.validate(); err != nil {
		return err
	}
	if len(o.etcd.endpoints) == 0 {
		cfg := embedetcd.Default(o.dataDir)
		cfg.ClientURL = o.clientURL
		if err := cfg.Validate(); err != nil {
			return fmt.Errorf("--data-dir/--embedded-client-url: %w", err)
		}
	}
	return nil
}

// coordFlag names the flag behind a coordinator.Config error.
func coordFlag(err error) string {
	msg := err.Error()
	for _, f := range []struct{ prefix, flag string }{
		{"scope", "--scope"}, {"default TTL", "--default-ttl"}, {"max hold", "--max-hold"},
		{"max waiters", "--max-waiters"}, {"max wait", "--max-wait"}, {"request timeout", "--request-timeout"},
	} {
		if strings.HasPrefix(msg, f.prefix) {
			return f.flag
		}
	}
	return "configuration"
}

// serve runs the sidecar until ctx ends, then releases every lock (by
// revoking the lease) and removes the socket.
func serve(ctx context.Context, o *serveOptions, stdout, stderr io.Writer) error {
	logs, err := newLoggers(stderr, o.logLevel)
	if err != nil {
		return err
	}
	log := logs.log
	// Take the socket first: a second sidecar on the same path must fail
	// before it starts an etcd.
	sock, err := server.ListenUnix(o.socketPath)
	if err != nil {
		return err
	}
	defer sock.Close()
	var health, metricsL net.Listener
	if o.healthAddr != "" {
		if health, err = net.Listen("tcp", o.healthAddr); err != nil {
			return fmt.Errorf("--health-addr: %w", err)
		}
		defer health.Close()
	}
	if o.metricsAddr != "" {
		if metricsL, err = net.Listen("tcp", o.metricsAddr); err != nil {
			return fmt.Errorf("--metrics-addr: %w", err)
		}
		defer metricsL.Close()
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m, err := metrics.New(reg, o.metricsKeyDepth)
	if err != nil {
		return err
	}

	endpoints, where := o.etcd.endpoints, "etcd at "+strings.Join(o.etcd.endpoints, ",")
	if len(endpoints) == 0 {
		cfg := embedetcd.Default(o.dataDir)
		cfg.ClientURL, cfg.Logger = o.clientURL, logs.etcdServer
		e, err := embedetcd.Start(ctx, cfg)
		if err != nil {
			return err
		}
		defer func() {
			logs.quiet()
			e.Close()
		}()
		endpoints = e.Endpoints()
		abs, _ := filepath.Abs(o.dataDir)
		where = fmt.Sprintf("embedded etcd at %s, data in %s", strings.Join(endpoints, ","), abs)
	}
	cli, err := o.etcd.client(endpoints, logs.etcdClient, grpc.WithChainUnaryInterceptor(m.UnaryClientInterceptor()))
	if err != nil {
		return err
	}
	defer cli.Close()

	prev, err := readState(o.statePath)
	if err != nil {
		log.Warn("ignoring an unreadable state file", "err", err)
	}
	if prev.Scope != o.coord.Scope {
		prev = state{}
	}
	keeperOpts := []lease.Option{lease.OnSessionLost(m.SessionLost)}
	if id := prev.leaseID(); id != 0 {
		keeperOpts = append(keeperOpts, lease.ResumeLease(id))
	}
	keeper, err := lease.NewKeeper(cli, o.lease, log, keeperOpts...)
	if err != nil {
		return err
	}
	coord, err := coordinator.New(o.coord, cli, keeper, log, coordinator.WithObserver(m))
	if err != nil {
		return err
	}
	api, err := server.New(o.server, coord, log)
	if err != nil {
		return err
	}

	runCtx, stopRun := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	goRun := func(f func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(runCtx); err != nil {
				log.Error("component stopped", "err", err)
			}
		}()
	}
	goRun(keeper.Run)
	goRun(coord.Run)
	serveCtx, stopServing := context.WithCancel(context.Background())
	serveOn := func(l net.Listener, h http.Handler) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := server.Serve(serveCtx, api.HTTPServer(h), l, 500*time.Millisecond); err != nil {
				log.Error("server stopped", "addr", l.Addr().String(), "err", err)
			}
		}()
	}
	if health != nil {
		serveOn(health, api.HealthHandler())
	}
	if metricsL != nil {
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
		serveOn(metricsL, mux)
	}

	ready := waitReady(ctx, coord, log)
	if ready && prev.leaseID() != 0 {
		keepLocks(ctx, keeper, coord, prev, log)
	}
	goRun(func(ctx context.Context) error { return saveState(ctx, o.statePath, o.coord.Scope, coord) })
	// Callers that connected meanwhile wait in the socket's backlog until
	// the previous process's locks are back.
	serveOn(sock, api.Handler())
	if ready {
		fmt.Fprintf(stdout, "baton: serving on %s (%s, scope %q); try: curl -s --unix-socket %s -X POST http://baton/v1/locks/demo\n",
			o.socketPath, where, o.coord.Scope, o.socketPath)
		log.Info("serving", "socket", o.socketPath, "etcd", endpoints, "scope", o.coord.Scope, "pod", o.coord.Identity.Pod)
	}

	<-ctx.Done()
	start := time.Now()
	log.Info("shutting down: releasing every lock")
	coord.Shutdown()
	rctx, cancel := context.WithTimeout(context.Background(), time.Second)
	err = keeper.Close(rctx)
	cancel()
	if err != nil {
		log.Error("revoke lease: locks stay held until the lease TTL passes", "err", err)
	}
	stopServing()
	stopRun()
	wg.Wait()
	if err := os.Remove(o.statePath); err != nil && !errors.Is(err, os.ErrNotExist) {
		log.Warn("remove state file", "err", err)
	}
	log.Info("stopped", "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// keepLocks takes over the locks of the process before this one (it
// crashed while the app ran on) if their lease could be resumed, or
// reports them lost.
func keepLocks(ctx context.Context, keeper *lease.Keeper, coord *coordinator.Coordinator, prev state, log *slog.Logger) {
	sess, err := keeper.Current()
	if err != nil || !sess.Resumed() || sess.ID() != prev.leaseID() {
		coord.Forget(prev.Locks)
		return
	}
	n, err := coord.Adopt(ctx, sess, prev.Locks)
	if err != nil {
		log.Error("could not take over every lock of the previous process", "err", err, "kept", n)
		return
	}
	log.Info("kept the locks of the previous process", "leaseID", prev.Lease, "kept", n, "known", len(prev.Locks))
}

// saveState writes the held locks to the state file whenever they change.
func saveState(ctx context.Context, path, scope string, coord *coordinator.Coordinator) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-coord.Changes():
		}
		locks, id := coord.HeldLocks()
		if err := writeState(path, state{Scope: scope, Lease: fmt.Sprintf("%x", int64(id)), Locks: locks}); err != nil {
			return fmt.Errorf("state file: %w", err)
		}
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
