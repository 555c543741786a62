package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/baton-dev/baton/internal/coordinator"
	"github.com/baton-dev/baton/internal/engine"
	"github.com/baton-dev/baton/internal/etcdmaint"
	"github.com/baton-dev/baton/internal/lease"
	"github.com/baton-dev/baton/internal/server"
)

// serveOptions is everything `baton serve` is configured with.
type serveOptions struct {
	socketPath  string
	healthAddr  string
	metricsAddr string
	pprof       bool
	logLevel    string
	maxProcs    int

	etcd     etcdOptions
	embedded embeddedOptions

	engine engine.Config // the lock engine: the session, the coordinator, the state file, the policy
	server server.Config
	dapr   daprOptions

	campaign   string // --campaign: the election the sidecar campaigns in for its pod
	leaderAddr string // --leader-addr: where it tells that election's leader (GET /, GET /sse)
}

func newServeCmd(getenv func(string) string, stdout, stderr io.Writer, setProcs func(int) int) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the lock API on a unix socket (embedded etcd unless --etcd-endpoints is set)",
		Long: `Serve the lock API on a unix socket.

Every flag can also be set by an environment variable: --lease-ttl by
BATON_LEASE_TTL, --socket by BATON_SOCKET, and so on. The etcd password is read from BATON_ETCD_PASSWORD
only. The pod's identity comes from POD_NAME, POD_NAMESPACE and NODE_NAME.`,
		Args: cobra.NoArgs,
	}
	opts := defaultServeOptions(getenv)
	opts.addFlags(cmd.Flags())
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		opts.etcd.password = getenv("BATON_ETCD_PASSWORD")
		opts.followLeaseTTL(cmd.Flags())
		if f := maintChanged(cmd.Flags()); f != "" && len(opts.etcd.endpoints) > 0 {
			return usageError{fmt.Errorf("--%s: only with the embedded etcd (no --etcd-endpoints); an etcd of others is kept by its operators, the chart's by Baton's controller (baton mirror --etcd-maintenance)", f)}
		}
		if err := opts.validate(); err != nil {
			return usageError{err}
		}
		if n := opts.procs(cmd.Flags().Changed("max-procs"), getenv("GOMAXPROCS") != ""); n > 0 && setProcs != nil {
			setProcs(n)
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
		socketPath: defaultSocket,
		healthAddr: ":8081",
		logLevel:   "info",
		maxProcs:   1,
		// embedetcd.Default's, which the lean build does not link.
		embedded: embeddedOptions{dataDir: "baton-data", clientURL: "http://127.0.0.1:2379", history: 5 * time.Minute, quota: 2 << 30, maint: etcdmaint.Default()},
		etcd:     etcdOptions{dialTimeout: 5 * time.Second},
		engine:   engine.Default(),
		server:   server.Default(),
	}
	o.engine.Coordinator.Identity = coordinator.Identity{Pod: pod, Namespace: ns, Node: node}
	if ns != "" {
		o.engine.Coordinator.Scope = ns
	}
	return o
}

func (o *serveOptions) addFlags(fs *pflag.FlagSet) {
	fs.SortFlags = false
	socketFlag(fs, &o.socketPath, "unix socket to serve the lock API on (mode 0660)")
	fs.StringVar(&o.engine.StatePath, "state-file", "", "where the held locks are kept so that a restarted sidecar keeps them (default: the socket path + .state)")
	fs.StringVar(&o.healthAddr, "health-addr", o.healthAddr, "TCP address for /healthz and /readyz probes; empty disables")
	fs.StringVar(&o.metricsAddr, "metrics-addr", "", "TCP address for Prometheus /metrics, e.g. :9090; empty disables")
	fs.IntVar(&o.engine.MetricsKeyDepth, "metrics-key-depth", o.engine.MetricsKeyDepth, "label per-lock metrics with the first N key segments (0: no key label)")
	fs.BoolVar(&o.pprof, "pprof", false, "also serve Go's /debug/pprof/ profiles on --metrics-addr")
	fs.StringVar(&o.engine.Coordinator.Scope, "scope", o.engine.Coordinator.Scope, "scope isolating this sidecar's locks in etcd; $POD_NAMESPACE when set")
	fs.StringVar(&o.engine.Coordinator.Identity.Cluster, "cluster-name", "", "this Kubernetes cluster's name, written into the holder records, when several clusters share one etcd: their sidecars contend for the same locks when they share a scope, and every mirror shows each holder's cluster (a DNS label; empty: not shared)")
	fs.StringVar(&o.engine.ServiceAccount, "service-account", o.engine.ServiceAccount, "the pod's ServiceAccount, which lock policies name (the injector sets it from the pod)")
	fs.DurationVar(&o.engine.ShutdownGrace, "shutdown-grace", o.engine.ShutdownGrace, "on SIGTERM, how long the sidecar waits for its hold streams' callers (baton run) to stop their work and hang up before it lets every lock go; it grants nothing meanwhile")
	fs.StringVar(&o.engine.PolicyFile, "policy-file", "", "read the lock policy from this YAML or JSON file (re-read when it changes) instead of the scope's policy in etcd, which the controller writes from LockPolicy objects")
	fs.DurationVar(&o.engine.Lease.TTL, "lease-ttl", o.engine.Lease.TTL, "TTL of the sidecar's etcd lease: how long a crashed sidecar's locks stay held (at least 2s)")
	fs.IntVar(&o.engine.Lease.KeysPerLease, "keys-per-lease", o.engine.Lease.KeysPerLease, "keys one etcd lease carries, on average, before the sidecar adds a lease: revoking or expiring a lease deletes its keys in one etcd step that stalls other writes")
	fs.DurationVar(&o.engine.Coordinator.DefaultTTL, "default-ttl", o.engine.Coordinator.DefaultTTL, "a lock's ttl when the caller gives none")
	fs.DurationVar(&o.engine.Coordinator.MaxHold, "max-hold", o.engine.Coordinator.MaxHold, "the longest ttl a caller may ask for, on acquire and on extend, and the longest max_hold of a hold stream")
	fs.DurationVar(&o.engine.Coordinator.MaxWait, "max-wait", o.engine.Coordinator.MaxWait, "the longest wait of a plain acquire; a hold stream (baton run) may wait longer, or forever")
	fs.IntVar(&o.engine.Coordinator.MaxWaiters, "max-waiters", o.engine.Coordinator.MaxWaiters, "the most callers queued at once in this sidecar; more get 429")
	fs.DurationVar(&o.engine.Coordinator.LockDelay, "lock-delay", o.engine.Coordinator.LockDelay, "the lock delay of locks whose caller asks for none: after a holder is lost other than by its release, nobody gets its lock for this long (0: none)")
	fs.DurationVar(&o.engine.Coordinator.MaxLockDelay, "max-lock-delay", o.engine.Coordinator.MaxLockDelay, "the longest lock delay a caller may ask for")
	fs.DurationVar(&o.engine.Coordinator.OnceRetention, "once-retention", o.engine.Coordinator.OnceRetention, "how long a run-once lock's record of its last run is kept: within it, a run that succeeded is not run again")
	fs.DurationVar(&o.engine.Coordinator.RequestTimeout, "request-timeout", o.engine.Coordinator.RequestTimeout, "bound of one etcd request; past it the caller gets 503 (at most a third of --lease-ttl unless set)")
	fs.DurationVar(&o.engine.Coordinator.WatchDelay, "watch-delay", o.engine.Coordinator.WatchDelay, "how long a lock is held before the sidecar watches it for a loss (a force release); a lock released sooner costs no watch event; hold streams are watched at once; 0 watches every lock from its grant")
	fs.DurationVar(&o.engine.Coordinator.WatchLinger, "watch-linger", o.engine.Coordinator.WatchLinger, "how long a lock's watch stays open once nothing held or awaited here needs it; a sidecar receives the deletes of the locks it holds or awaits, and of no other")
	fs.IntVar(&o.engine.Coordinator.MaxLockWatches, "max-lock-watches", o.engine.Coordinator.MaxLockWatches, "the most locks the sidecar watches each with a watch of its own (those it holds past --watch-delay or awaits); past it, one watch on its whole scope, which receives every delete in the scope")
	fs.StringVar(&o.logLevel, "log-level", o.logLevel, "debug, info, warn or error")
	fs.IntVar(&o.maxProcs, "max-procs", o.maxProcs, "the most CPUs running the sidecar's Go code at once (GOMAXPROCS); 0 leaves it to Go ($GOMAXPROCS, else the container's CPU limit, else every CPU). Unless set, 0 with the embedded etcd or $GOMAXPROCS")
	o.etcd.addFlags(fs, "etcd client URLs, comma-separated; empty starts an embedded single-node etcd")
	fs.StringVar(&o.embedded.dataDir, "data-dir", o.embedded.dataDir, "data directory of the embedded etcd")
	fs.StringVar(&o.embedded.clientURL, "embedded-client-url", o.embedded.clientURL, "client URL of the embedded etcd; other sidecars on the machine may join it with --etcd-endpoints")
	fs.DurationVar(&o.embedded.history, "embedded-history", o.embedded.history, "how long the embedded etcd keeps its keys' past revisions before it compacts them away (etcd's periodic auto-compaction), so that its database stays small; a watcher further behind reads the keys again")
	fs.Int64Var(&o.embedded.quota, "embedded-quota", o.embedded.quota, "the embedded etcd's space quota in bytes (etcd's --quota-backend-bytes): at it, etcd takes no more writes and no lock is granted until room is made, which the sidecar's maintenance does")
	addMaintFlags(fs, &o.embedded.maint, "the embedded etcd's (with no --etcd-endpoints)")
	o.dapr.addFlags(fs)
	fs.StringVar(&o.campaign, "campaign", "", "campaign in this election for the pod for as long as the sidecar runs, its value the pod's name, as the election sidecars of Kubernetes and nais do (the sidecar resigns as it stops)")
	fs.StringVar(&o.leaderAddr, "leader-addr", "", "with --campaign, tell that election's leader on this TCP address as those sidecars do: GET / answers {\"name\",\"last_update\"}, GET /sse streams it (e.g. localhost:4040, nais' 127.0.0.1:6060); empty disables")
}

// followLeaseTTL fits the etcd request timeout to a short lease when it
// was not set: a third of the TTL at most, so that --lease-ttl alone can
// go down to its minimum (the session must notice a stuck request well
// before its lease could expire).
func (o *serveOptions) followLeaseTTL(fs *pflag.FlagSet) {
	if !fs.Changed("request-timeout") {
		o.engine.Coordinator.RequestTimeout = min(o.engine.Coordinator.RequestTimeout, (o.engine.Lease.TTL / 3).Round(time.Millisecond))
	}
}

// procs is the GOMAXPROCS to set, 0 for none. A sidecar spends its time
// waiting on its socket and on etcd: more than one CPU running its Go code
// buys it nothing but a scheduler spinning on idle CPUs for the next
// goroutine to wake, CPU taken from the app and from etcd (make bench
// measures both settings side by side). The embedded etcd needs the CPUs;
// so does whoever set $GOMAXPROCS. explicit: --max-procs was given.
func (o *serveOptions) procs(explicit, envSet bool) int {
	if !explicit && (envSet || len(o.etcd.endpoints) == 0) {
		return 0
	}
	return o.maxProcs
}

// embeddedOptions are the flags of the embedded etcd, which a serve
// without --etcd-endpoints starts (the full build only).
type embeddedOptions struct {
	dataDir, clientURL string
	history            time.Duration
	quota              int64
	maint              etcdmaint.Config // its maintenance by the sidecar
}

// validate checks every option; each error names its flag.
func (o *serveOptions) validate() error {
	if o.socketPath == "" {
		return errors.New("--socket: required")
	}
	if dir := filepath.Dir(o.socketPath); o.socketPath != defaultSocket {
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			return fmt.Errorf("--socket %s: its directory %s does not exist; create it, or choose another path", o.socketPath, dir)
		}
	}
	if o.engine.StatePath == "" {
		o.engine.StatePath = o.socketPath + ".state"
	}
	if o.healthAddr != "" {
		if _, _, err := net.SplitHostPort(o.healthAddr); err != nil {
			return fmt.Errorf("--health-addr %q: want host:port, e.g. :8081", o.healthAddr)
		}
	}
	// The grant timeout follows the lease TTL: at most half of it.
	o.engine.Lease.GrantTimeout = min(lease.Default().GrantTimeout, o.engine.Lease.TTL/2)
	// A hold stream's heartbeats tell its holder how long its lock is
	// certainly still its own (valid_for_seconds), which a renewal of the
	// lease, every third of its TTL, moves on: they come often enough for
	// the holder to hear each renewal well before that runs out.
	o.server.HeartbeatInterval = min(server.Default().HeartbeatInterval, o.engine.Lease.TTL/5)
	if o.metricsAddr != "" {
		if _, _, err := net.SplitHostPort(o.metricsAddr); err != nil {
			return fmt.Errorf("--metrics-addr %q: want host:port, e.g. :9090", o.metricsAddr)
		}
	}
	if o.pprof && o.metricsAddr == "" {
		return errors.New("--pprof: profiles are served on --metrics-addr, which is not set")
	}
	if o.maxProcs < 0 {
		return fmt.Errorf("--max-procs %d: must be 0 (Go's default) or more", o.maxProcs)
	}
	o.engine.EtcdUser = o.etcd.user()
	if err := o.engine.Validate(); err != nil {
		return flagError(err)
	}
	if err := o.etcd.validate(); err != nil {
		return err
	}
	if err := o.dapr.validate(); err != nil {
		return err
	}
	if err := o.validateCampaign(); err != nil {
		return err
	}
	if len(o.etcd.endpoints) == 0 {
		return validateEmbedded(o.embedded)
	}
	return nil
}
