// Package sidecartest starts a sidecar's lock engine for tests, as `baton
// serve` starts it (package engine: the same client interceptors, lease
// keeper, store, policy guard, metrics and coordinator), on the test's
// etcd and in a scope of the test's own. The socket API's tests and
// Dapr's put their servers in front of it.
package sidecartest

import (
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-dev/baton/internal/coordinator"
	"github.com/baton-dev/baton/internal/engine"
	"github.com/baton-dev/baton/internal/testing/etcdtest"
)

// Engine is one sidecar's lock engine, running until the test ends.
type Engine struct {
	Coord *coordinator.Coordinator
	// Elect is the engine's coordinator of elections.
	Elect  *coordinator.Coordinator
	Client *clientv3.Client
	// Calls counts the engine's etcd requests.
	Calls *etcdtest.Counter
	Log   *slog.Logger
	// Registry holds the engine's metrics.
	Registry *prometheus.Registry
	// Kill cuts the engine off from etcd: every call of its client fails
	// from then on, and no keep-alive of its session reaches etcd, as
	// with a crashed sidecar: its locks go when the lease expires (2s).
	Kill func()
}

// Scope is the scope of the test's engines: one per top-level test, so
// that its subtests share it and other tests do not.
func Scope(t testing.TB) string {
	h := fnv.New64a()
	h.Write([]byte(strings.SplitN(t.Name(), "/", 2)[0]))
	return fmt.Sprintf("s%x", h.Sum64())
}

// Start starts an engine on s for pod, with a 2s lease, a 0.9s etcd
// request timeout, no state file and the test's scope, all of which mod
// may change. It returns once the engine is ready and has checked its etcd
// permissions (one transaction at start for its locks and one for its
// elections, asked again while etcd does not answer it), so that a test
// counting transactions counts its own.
func Start(t testing.TB, s *etcdtest.Server, pod string, mod func(*engine.Config)) *Engine {
	t.Helper()
	var calls *etcdtest.Counter
	e := start(t, func(opts ...grpc.DialOption) (*clientv3.Client, error) {
		var cli *clientv3.Client
		cli, calls = s.Client(t, opts...)
		return cli, nil
	}, pod, mod, func() bool { return calls.TxnsDone() > 1 }) // the locks' and the elections'

	e.Calls = calls
	return e
}

// StartWith is Start on the etcd that dial reaches (a secure one, say),
// without a count of the engine's calls. The engine closes the client.
func StartWith(t testing.TB, dial engine.Dial, pod string, mod func(*engine.Config)) *Engine {
	t.Helper()
	return start(t, dial, pod, mod, func() bool { return true })
}

func start(t testing.TB, dial engine.Dial, pod string, mod func(*engine.Config), checked func() bool) *Engine {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := engine.Default()
	cfg.Lease.TTL, cfg.Lease.GrantTimeout = 2*time.Second, time.Second
	cfg.Coordinator.Scope = Scope(t)
	cfg.Coordinator.Identity = coordinator.Identity{Pod: pod, Namespace: "ns", Node: "node"}
	cfg.Coordinator.RequestTimeout = 900 * time.Millisecond
	if mod != nil {
		mod(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	var cut atomic.Bool
	reg := prometheus.NewRegistry()
	eng, err := engine.New(cfg, reg, func(opts ...grpc.DialOption) (*clientv3.Client, error) {
		return dial(append(opts, cutOff(&cut)...)...)
	}, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = eng.Run(ctx, engine.Hooks{}); close(done) }()
	t.Cleanup(func() {
		cancel()
		<-done
		eng.Close()
	})
	deadline := time.Now().Add(10 * time.Second)
	for eng.Coordinator().Ready() != nil || eng.Elections().Ready() != nil || !checked() {
		if time.Now().After(deadline) {
			t.Fatal("sidecar not ready")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return &Engine{Coord: eng.Coordinator(), Elect: eng.Elections(), Client: eng.Client(), Log: log, Registry: reg, Kill: func() { cut.Store(true) }}
}

// Operators writes the policy that docs/security.md shows for a sidecar
// run without the controller, which lets every ServiceAccount lock and
// force-release every key, to a file of the test's, and returns its path
// (Config.PolicyFile): the sidecar refuses force release over the socket
// without one, as `baton serve` does.
func Operators(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	doc := "policies:\n- name: operators\n  rules:\n  - serviceAccounts: [\"*\"]\n    keys: [\"*\"]\n    forceRelease: true\n"
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// errCut is the error of every call of a client cut off from etcd.
var errCut = status.Error(codes.Unavailable, "sidecartest: cut off from etcd")

// cutOff are the dial options that fail every call, and every message of
// a stream, once cut is set.
func cutOff(cut *atomic.Bool) []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if cut.Load() {
				return errCut
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		}),
		grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			if cut.Load() {
				return nil, errCut
			}
			st, err := streamer(ctx, desc, cc, method, opts...)
			if err != nil {
				return nil, err
			}
			return cutStream{st, cut}, nil
		}),
	}
}

// cutStream is a stream whose messages, sent or received, fail once cut
// is set.
type cutStream struct {
	grpc.ClientStream
	cut *atomic.Bool
}

func (s cutStream) SendMsg(m any) error {
	if s.cut.Load() {
		return errCut
	}
	return s.ClientStream.SendMsg(m)
}

func (s cutStream) RecvMsg(m any) error {
	if s.cut.Load() {
		return errCut
	}
	return s.ClientStream.RecvMsg(m)
}
