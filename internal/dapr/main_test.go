package dapr

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/coordinator"
	"github.com/baton-dev/baton/internal/engine"
	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/server"
	"github.com/baton-dev/baton/internal/testing/etcdtest"
	"github.com/baton-dev/baton/internal/testing/sidecartest"
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
	httpURL  string
	grpcAddr string
	grpcSock string
	kill     func() // ends the session without revoking its lease, as a crash
	log      *slog.Logger
}

func newSidecar(t testing.TB, pod string, cfg Config, mods ...func(*engine.Config)) *sidecar {
	t.Helper()
	e := sidecartest.Start(t, testEtcd, pod, func(c *engine.Config) {
		for _, m := range mods {
			m(c)
		}
	})
	api, err := New(cfg, e.Coord, e.Log)
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
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 3)
	g := NewGRPCServer(api)
	go func() { server.Serve(ctx, NewHTTPServer(api.Handler(), e.Log), httpL, time.Second); done <- struct{}{} }()
	go func() { g.Serve(grpcL); done <- struct{}{} }()
	go func() { g.Serve(unixL); done <- struct{}{} }()
	t.Cleanup(func() {
		e.Coord.Shutdown()
		cancel()
		g.Stop()
		for range 3 {
			<-done
		}
		os.RemoveAll(dir)
	})
	return &sidecar{t: t, coord: e.Coord, api: api, calls: e.Calls, log: e.Log, kill: e.Kill,
		httpURL: "http://" + httpL.Addr().String(), grpcAddr: grpcL.Addr().String(), grpcSock: sock}
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
