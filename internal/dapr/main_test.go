package dapr

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-dev/baton/internal/coordinator"
	"github.com/baton-dev/baton/internal/etcdtest"
	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/lease"
	"github.com/baton-dev/baton/internal/lockstore/etcdstore"
	"github.com/baton-dev/baton/internal/server"
)

var testEtcd *etcdtest.Server

func TestMain(m *testing.M) {
	os.Exit(etcdtest.Main(m, func(s *etcdtest.Server) { testEtcd = s }))
}

// sidecar is one sidecar's coordinator serving Dapr's API over HTTP on a
// loopback port, and over gRPC on a loopback port and on a unix socket.
type sidecar struct {
	t        testing.TB
	coord    *coordinator.Coordinator
	api      *API
	calls    *etcdtest.Counter
	cli      *clientv3.Client
	scope    string
	httpURL  string
	grpcAddr string
	grpcSock string
	kill     func() // ends the session without revoking its lease, as a crash
	log      *slog.Logger
}

// testScope is a scope of the test's own.
func testScope(t testing.TB) string {
	h := fnv.New64a()
	h.Write([]byte(strings.SplitN(t.Name(), "/", 2)[0]))
	return fmt.Sprintf("d%x", h.Sum64())
}

func newSidecar(t testing.TB, pod string, cfg Config, opts ...coordinator.Option) *sidecar {
	t.Helper()
	cli, calls := testEtcd.Client(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	lcfg := lease.Default()
	lcfg.TTL, lcfg.GrantTimeout = 2*time.Second, time.Second
	keeper, err := lease.NewKeeper(cli, lcfg, log)
	if err != nil {
		t.Fatal(err)
	}
	ccfg := coordinator.Default()
	ccfg.Scope = testScope(t)
	ccfg.Identity = coordinator.Identity{Pod: pod, Namespace: "ns", Node: "node"}
	ccfg.RequestTimeout = time.Second
	coord, err := coordinator.New(ccfg, etcdstore.New(cli, ccfg.RequestTimeout), etcdstore.NewSessions(keeper), log, opts...)
	if err != nil {
		t.Fatal(err)
	}
	api, err := New(cfg, coord, log)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "baton-dapr")
	if err != nil {
		t.Fatal(err)
	}
	httpL, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	grpcL, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "dapr-grpc.sock")
	unixL, err := server.ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	keeperCtx, stopKeeper := context.WithCancel(context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 5)
	g := NewGRPCServer(api)
	go func() { keeper.Run(keeperCtx); done <- struct{}{} }()
	go func() { coord.Run(ctx); done <- struct{}{} }()
	go func() { server.Serve(ctx, NewHTTPServer(api.Handler(), log), httpL, time.Second); done <- struct{}{} }()
	go func() { g.Serve(grpcL); done <- struct{}{} }()
	go func() { g.Serve(unixL); done <- struct{}{} }()
	s := &sidecar{t: t, coord: coord, api: api, calls: calls, cli: cli, scope: ccfg.Scope, log: log,
		httpURL: "http://" + httpL.Addr().String(), grpcAddr: grpcL.Addr().String(), grpcSock: sock, kill: stopKeeper}
	t.Cleanup(func() {
		coord.Shutdown()
		rctx, rcancel := context.WithTimeout(context.Background(), time.Second)
		keeper.Close(rctx)
		rcancel()
		stopKeeper()
		cancel()
		g.Stop()
		for i := 0; i < 5; i++ {
			<-done
		}
		os.RemoveAll(dir)
	})
	deadline := time.Now().Add(10 * time.Second)
	for coord.Ready() != nil || calls.Txns() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("sidecar not ready")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return s
}

// reply is an HTTP answer, decoded.
type reply struct {
	status int
	body   map[string]any
	raw    string
}

// do calls the sidecar's Dapr HTTP API.
func (s *sidecar) do(method, path, body string) reply {
	s.t.Helper()
	req, err := http.NewRequest(method, s.httpURL+path, strings.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := reply{status: resp.StatusCode, raw: string(raw)}
	if len(bytes.TrimSpace(raw)) > 0 {
		if err := json.Unmarshal(raw, &r.body); err != nil {
			s.t.Fatalf("%s %s: answer is not JSON: %q", method, path, raw)
		}
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			s.t.Fatalf("%s %s: Content-Type %q", method, path, ct)
		}
	}
	return r
}

// holder is the owner of key's first contender in etcd, "" when free.
func (s *sidecar) holder(key string) string {
	s.t.Helper()
	st, err := s.coord.Status(context.Background(), mustKey(s.t, key))
	if err != nil {
		s.t.Fatal(err)
	}
	if !st.Held {
		return ""
	}
	return st.Holder.Owner
}

func mustKey(t testing.TB, s string) keyspace.Key {
	t.Helper()
	k, err := keyspace.ParseKey(s)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
