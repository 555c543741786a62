package engine

import (
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/baton-dev/baton/internal/coordinator"
	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/lease"
	"github.com/baton-dev/baton/internal/lockstore/etcdstore"
	"github.com/baton-dev/baton/internal/metrics"
	"github.com/baton-dev/baton/internal/policy"
	"github.com/baton-dev/baton/internal/restart"
)

// Dial connects to etcd with the engine's dial options (its interceptors)
// beside the caller's own: the endpoints, TLS and credentials are the
// caller's.
type Dial func(opts ...grpc.DialOption) (*clientv3.Client, error)

// Engine is one sidecar's lock engine on etcd, built by New and run by Run.
type Engine struct {
	cfg Config
	log *slog.Logger

	metrics  *metrics.Metrics
	history  *etcdstore.History // etcd's revisions as seen: the floor of the fences
	cli      *clientv3.Client
	keeper   *lease.Keeper
	sessions *etcdstore.Sessions // the keeper's, as the coordinator sees them
	store    *etcdstore.Store
	guard    *policy.Guard // the lock policy in force
	coord    *coordinator.Coordinator
	elect    *coordinator.Coordinator // the elections, on the same session
	prev     restart.State            // what the process before left in the state file
	built    atomic.Bool              // New is done: the coordinator and the store exist
	adopted  chan struct{}            // closed once the locks of the process before are taken over
}

// New builds an engine of cfg, which it validates: its metrics on reg, its etcd client by dial, its
// session (resuming the leases the state file names, if it names some),
// the store, the policy guard and the coordinator. Nothing runs until Run.
// The client is the engine's: Close closes it.
func New(cfg Config, reg prometheus.Registerer, dial Dial, log *slog.Logger) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	e := &Engine{cfg: cfg, log: log, adopted: make(chan struct{})}
	m, err := metrics.New(reg, cfg.MetricsKeyDepth)
	if err != nil {
		return nil, err
	}
	e.metrics = m
	for _, r := range coordinator.LostReasons() {
		m.InitLossReasons(string(r))
	}
	e.history = etcdstore.NewHistory(e.rewound)
	if e.cli, err = dial(grpc.WithChainUnaryInterceptor(m.UnaryClientInterceptor(), e.history.UnaryClientInterceptor())); err != nil {
		return nil, err
	}
	if err := e.build(reg); err != nil {
		e.cli.Close()
		return nil, err
	}
	e.built.Store(true)
	return e, nil
}

// build makes the keeper, the store, the guard and the coordinator on the
// client.
func (e *Engine) build(reg prometheus.Registerer) error {
	cfg := e.cfg
	if cfg.StatePath != "" {
		prev, err := restart.Read(cfg.StatePath)
		if err != nil {
			e.log.Warn("ignoring an unreadable state file", "err", err)
		}
		if prev.Scope == cfg.Coordinator.Scope {
			e.prev = prev
			e.history.Raise(prev.High, "this sidecar's state file "+cfg.StatePath)
		}
	}
	opts := []lease.Option{lease.OnSessionLost(e.metrics.SessionLost), lease.HeardRevisions(e.history.Heard)}
	if prev := e.prev.LeaseIDs(); len(prev) > 0 {
		ids := make([]clientv3.LeaseID, len(prev))
		for i, id := range prev {
			ids[i] = clientv3.LeaseID(id)
		}
		opts = append(opts, lease.ResumeLeases(ids...))
	}
	var err error
	if e.keeper, err = lease.NewKeeper(e.cli, cfg.Lease, e.log, opts...); err != nil {
		return err
	}
	e.sessions = etcdstore.NewSessions(e.keeper)
	e.store = etcdstore.New(e.cli, cfg.Coordinator.RequestTimeout, etcdstore.OnCommit(e.metrics.Committed), etcdstore.User(cfg.EtcdUser))
	source := "the lock policy in etcd at " + e.policyKey()
	if cfg.PolicyFile != "" {
		source = "the lock policy file " + cfg.PolicyFile
	}
	e.guard = policy.NewGuard(cfg.ServiceAccount, source, e.log, e.metrics.PolicyChanged)
	// One clock for the engine's times and timers, and for the held locks'
	// ages in the metrics. The lease keeper keeps real time: etcd's lease
	// runs on etcd's clock, whatever the engine's says.
	clock := clockwork.NewRealClock()
	if e.coord, err = coordinator.New(cfg.Coordinator, e.store, e.sessions, e.log,
		coordinator.WithObserver(e.metrics), coordinator.WithPolicy(e.guard), coordinator.WithHistory(e.history), coordinator.WithClock(clock)); err != nil {
		return err
	}
	elections := cfg.Coordinator
	elections.Space = keyspace.Elections
	// A store of its own: etcd's refusals of the elections' keys (an etcd
	// role older than them) are told apart from the locks'.
	electStore := etcdstore.New(e.cli, cfg.Coordinator.RequestTimeout, etcdstore.OnCommit(e.metrics.Committed), etcdstore.User(cfg.EtcdUser))
	electMetrics, err := metrics.NewElections(reg)
	if err != nil {
		return err
	}
	if e.elect, err = coordinator.New(elections, electStore, e.sessions, e.log.With("space", "elections"),
		coordinator.WithObserver(electMetrics), coordinator.WithPolicy(e.guard), coordinator.WithHistory(e.history), coordinator.WithClock(clock)); err != nil {
		return err
	}
	e.coord.Remember(e.prev.Lost)
	if err := e.metrics.RegisterHeld(reg, e.coord, clock.Now); err != nil {
		return fmt.Errorf("register the held locks' metrics: %w", err)
	}
	return nil
}

// Coordinator is the lock engine, for the front ends.
func (e *Engine) Coordinator() *coordinator.Coordinator { return e.coord }

// Elections is the engine of the scope's elections: lines of their own,
// on the locks' session.
func (e *Engine) Elections() *coordinator.Coordinator { return e.elect }

// Client is the engine's etcd client.
func (e *Engine) Client() *clientv3.Client { return e.cli }

// Metrics are the engine's collectors, which the front ends report to.
func (e *Engine) Metrics() *metrics.Metrics { return e.metrics }

// Adopting reports whether the engine takes over the locks of the process
// before it: until Adopted is closed, their owners' requests are not
// known here, and a front end holds them back.
func (e *Engine) Adopting() bool { return len(e.prev.LeaseIDs()) > 0 }

// Adopted is closed once the engine has taken over the locks of the
// process before it, or found none to take, or stopped trying.
func (e *Engine) Adopted() <-chan struct{} { return e.adopted }

// Close closes the engine's etcd client; after Run has returned, or when
// Run is never called.
func (e *Engine) Close() error { return e.cli.Close() }

// policyKey is the etcd key of the scope's lock policy.
func (e *Engine) policyKey() string {
	l, _ := keyspace.NewLayout(e.cfg.Coordinator.Scope) // validated with the configuration
	return l.Policy()
}
