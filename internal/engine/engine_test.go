package engine_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/baton-dev/baton/internal/config"
	"github.com/baton-dev/baton/internal/coordinator"
	"github.com/baton-dev/baton/internal/engine"
	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/restart"
	"github.com/baton-dev/baton/internal/testing/etcdtest"
)

var testEtcd *etcdtest.Server

func TestMain(m *testing.M) {
	os.Exit(etcdtest.Main(m, func(s *etcdtest.Server) { testEtcd = s }))
}

// testConfig is a valid configuration on a short lease, in a scope of the
// test's own.
func testConfig(t *testing.T) engine.Config {
	cfg := engine.Default()
	cfg.Lease.TTL, cfg.Lease.GrantTimeout = 2*time.Second, time.Second
	cfg.Coordinator.RequestTimeout = 900 * time.Millisecond
	cfg.Coordinator.Scope = strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))
	cfg.Coordinator.Identity = coordinator.Identity{Pod: "pod", Namespace: "ns", Node: "node"}
	return cfg
}

// TestConfigNamesTheField: every invalid value is refused naming the
// field, so that the command can name its flag.
func TestConfigNamesTheField(t *testing.T) {
	for _, tt := range []struct {
		field string
		mod   func(*engine.Config)
	}{
		{"lease.TTL", func(c *engine.Config) { c.Lease.TTL = time.Second }},
		{"coordinator.MaxWaiters", func(c *engine.Config) { c.Coordinator.MaxWaiters = -1 }},
		{"coordinator.RequestTimeout", func(c *engine.Config) { c.Coordinator.RequestTimeout = time.Second }},
		{"engine.MetricsKeyDepth", func(c *engine.Config) { c.MetricsKeyDepth = keyspace.MaxSegments + 1 }},
		{"engine.ServiceAccount", func(c *engine.Config) { c.ServiceAccount = "Not A Name" }},
		{"engine.PolicyFile", func(c *engine.Config) { c.PolicyFile = filepath.Join(t.TempDir(), "none.yaml") }},
		{"engine.ShutdownGrace", func(c *engine.Config) { c.ShutdownGrace = -time.Second }},
	} {
		cfg := testConfig(t)
		if err := cfg.Validate(); err != nil {
			t.Fatalf("the test's configuration: %v", err)
		}
		tt.mod(&cfg)
		var fe *config.FieldError
		if err := cfg.Validate(); !errors.As(err, &fe) || fe.Field != tt.field {
			t.Errorf("%s: Validate() = %v; want an error about that field", tt.field, err)
		}
	}
}

// start builds an engine of cfg on the test etcd.
func start(t *testing.T, cfg engine.Config) *engine.Engine {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	e, err := engine.New(cfg, prometheus.NewRegistry(), func(opts ...grpc.DialOption) (*clientv3.Client, error) {
		cli, _ := testEtcd.Client(t, opts...)
		return cli, nil
	}, log)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestStartAndStopInOrder: Run tells Ready once the engine grants; on the
// way down it stops granting, lets the front ends drain while every lock
// is still held, then lets every lock go (its session's leases revoked,
// not left to expire) and writes the state file, which names the lock
// that ended and why; a new engine on that state file reports it lost by
// the shutdown.
func TestStartAndStopInOrder(t *testing.T) {
	cfg := testConfig(t)
	cfg.StatePath = filepath.Join(t.TempDir(), "state")
	e := start(t, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	ready, drained, done := make(chan struct{}), make(chan bool, 1), make(chan error, 1)
	var prefix string
	go func() {
		done <- e.Run(ctx, engine.Hooks{
			Ready: func() { close(ready) },
			Drain: func(context.Context) {
				// The engine grants nothing now, and still holds.
				_, err := e.Coordinator().Acquire(context.Background(), coordinator.AcquireRequest{Key: mustKey(t, "other"), Owner: "late"})
				r, gerr := e.Client().Get(context.Background(), prefix, clientv3.WithPrefix())
				drained <- err != nil && gerr == nil && len(r.Kvs) == 1
			},
		})
	}()
	select {
	case <-ready:
	case <-time.After(10 * time.Second):
		t.Fatal("never ready")
	}
	select {
	case <-e.Adopted():
	default:
		t.Error("ready, but Adopted is open")
	}
	k := mustKey(t, "job")
	prefix = e.Coordinator().Layout().LockPrefix(k)
	if _, err := e.Coordinator().Acquire(context.Background(), coordinator.AcquireRequest{Key: k, Owner: "exec-1", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !<-drained {
		t.Error("while draining, the engine granted, or no longer held its lock")
	}
	cli, _ := testEtcd.Client(t)
	r, err := cli.Get(context.Background(), prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Kvs) != 0 {
		t.Fatalf("after Run: %d keys of the lock; want none, at once", len(r.Kvs))
	}
	e.Close()
	st, err := restart.Read(cfg.StatePath)
	if err != nil || len(st.Lost) != 1 || st.Lost[0].Owner != "exec-1" || st.Lost[0].Reason != coordinator.Shutdown {
		t.Fatalf("the state file: %+v, %v; want exec-1's lock lost by the shutdown", st, err)
	}
	// The next process answers the owner of that lock.
	next := start(t, cfg)
	defer next.Close()
	_, err = next.Coordinator().Release(context.Background(), k, "exec-1")
	if !errors.Is(err, coordinator.ErrLost) {
		t.Errorf("release by the owner of the lock the shutdown ended: %v; want ErrLost", err)
	}
}

func mustKey(t *testing.T, s string) keyspace.Key {
	t.Helper()
	k, err := keyspace.ParseKey(s)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
