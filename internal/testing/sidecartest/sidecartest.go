// Package sidecartest starts a sidecar's lock engine for tests: a
// coordinator on a real etcd with its own client, lease keeper and store,
// wired as `baton serve` wires them, in a scope of the test's own. The
// socket API's tests and Dapr's put their servers in front of it.
package sidecartest

import (
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-dev/baton/internal/coordinator"
	"github.com/baton-dev/baton/internal/lease"
	"github.com/baton-dev/baton/internal/lockstore/etcdstore"
	"github.com/baton-dev/baton/internal/testing/etcdtest"
)

// Engine is one sidecar's lock engine, running until the test ends.
type Engine struct {
	Coord  *coordinator.Coordinator
	Client *clientv3.Client
	// Calls counts the engine's etcd requests.
	Calls *etcdtest.Counter
	Log   *slog.Logger
	// Kill stops keeping the session's lease alive without revoking it,
	// as a crash: its locks go when the lease expires (2s).
	Kill func()
}

// Scope is the scope of the test's engines: one per top-level test, so
// that its subtests share it and other tests do not.
func Scope(t testing.TB) string {
	h := fnv.New64a()
	h.Write([]byte(strings.SplitN(t.Name(), "/", 2)[0]))
	return fmt.Sprintf("s%x", h.Sum64())
}

// Start starts an engine on s for pod, with a 2s lease, a 1s etcd request
// timeout and the test's scope, which mod may change; opts go to the
// coordinator. It returns once the engine is ready and has checked its
// etcd permissions (one transaction at start), so that a test counting
// transactions counts its own.
func Start(t testing.TB, s *etcdtest.Server, pod string, mod func(*coordinator.Config), opts ...coordinator.Option) *Engine {
	t.Helper()
	cli, calls := s.Client(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	lcfg := lease.Default()
	lcfg.TTL, lcfg.GrantTimeout = 2*time.Second, time.Second
	keeper, err := lease.NewKeeper(cli, lcfg, log)
	if err != nil {
		t.Fatal(err)
	}
	ccfg := coordinator.Default()
	ccfg.Scope = Scope(t)
	ccfg.Identity = coordinator.Identity{Pod: pod, Namespace: "ns", Node: "node"}
	ccfg.RequestTimeout = time.Second
	if mod != nil {
		mod(&ccfg)
	}
	coord, err := coordinator.New(ccfg, etcdstore.New(cli, ccfg.RequestTimeout), etcdstore.NewSessions(keeper), log, opts...)
	if err != nil {
		t.Fatal(err)
	}
	keeperCtx, stopKeeper := context.WithCancel(context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	// They run until the cleanup stops them; what they say then is moot.
	go func() { _ = keeper.Run(keeperCtx); done <- struct{}{} }()
	go func() { _ = coord.Run(ctx); done <- struct{}{} }()
	t.Cleanup(func() {
		coord.Shutdown()
		rctx, rcancel := context.WithTimeout(context.Background(), time.Second)
		keeper.Close(rctx)
		rcancel()
		stopKeeper()
		cancel()
		<-done
		<-done
	})
	deadline := time.Now().Add(10 * time.Second)
	for coord.Ready() != nil || calls.Txns() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("sidecar not ready")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return &Engine{Coord: coord, Client: cli, Calls: calls, Log: log, Kill: stopKeeper}
}
