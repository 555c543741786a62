package server

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

	"github.com/baton-dev/baton/internal/coordinator"
	"github.com/baton-dev/baton/internal/etcdtest"
	"github.com/baton-dev/baton/internal/lease"
	"github.com/baton-dev/baton/internal/lockstore/etcdstore"
)

var testEtcd *etcdtest.Server

func TestMain(m *testing.M) {
	os.Exit(etcdtest.Main(m, func(s *etcdtest.Server) { testEtcd = s }))
}

// api is one sidecar serving the socket API on a real unix socket.
type api struct {
	t      testing.TB
	socket string
	client *http.Client
	coord  *coordinator.Coordinator
	calls  *etcdtest.Counter
	srv    *Server
}

func newAPI(t testing.TB, pod string, mods ...func(*coordinator.Config, *Config)) *api {
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
	h := fnv.New64a()
	h.Write([]byte(strings.SplitN(t.Name(), "/", 2)[0]))
	ccfg.Scope = fmt.Sprintf("s%x", h.Sum64())
	ccfg.Identity = coordinator.Identity{Pod: pod, Namespace: "ns", Node: "node"}
	ccfg.RequestTimeout = time.Second
	scfg := Default()
	for _, m := range mods {
		m(&ccfg, &scfg)
	}
	coord, err := coordinator.New(ccfg, etcdstore.New(cli, ccfg.RequestTimeout), etcdstore.NewSessions(keeper), log)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(scfg, coord, log)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "baton-api")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "baton.sock")
	l, err := ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 3)
	go func() { keeper.Run(ctx); done <- struct{}{} }()
	go func() { coord.Run(ctx); done <- struct{}{} }()
	go func() { Serve(ctx, srv.HTTPServer(srv.Handler()), l, time.Second); done <- struct{}{} }()
	a := &api{t: t, socket: sock, coord: coord, calls: calls, srv: srv, client: &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}},
	}}
	t.Cleanup(func() {
		coord.Shutdown()
		rctx, rcancel := context.WithTimeout(context.Background(), time.Second)
		keeper.Close(rctx)
		rcancel()
		cancel()
		for i := 0; i < 3; i++ {
			<-done
		}
		os.RemoveAll(dir)
	})
	deadline := time.Now().Add(10 * time.Second)
	// Ready, and its check of etcd's permissions done (one transaction
	// at start), so that tests counting transactions count theirs only.
	for coord.Ready() != nil || calls.Txns() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("sidecar not ready")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return a
}

// reply is a decoded answer.
type reply struct {
	status int
	body   map[string]any
	raw    string
}

func (a *api) do(method, path, body string) reply {
	a.t.Helper()
	r, err := a.try(method, path, body)
	if err != nil {
		a.t.Fatal(err)
	}
	return r
}

// try is do for goroutines other than the test's: it returns the error.
func (a *api) try(method, path, body string) (reply, error) {
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, "http://baton"+path, r)
	if err != nil {
		return reply{}, err
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return reply{}, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	out := reply{status: resp.StatusCode, raw: string(raw)}
	if method == http.MethodHead {
		return out, nil
	}
	if err := json.NewDecoder(bytes.NewReader(raw)).Decode(&out.body); err != nil {
		return out, fmt.Errorf("%s %s: answer is not JSON: %q", method, path, raw)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		return out, fmt.Errorf("%s %s: Content-Type %q", method, path, ct)
	}
	return out, nil
}

// expect checks status and, for errors, the code and a non-empty message.
func (r reply) expect(t *testing.T, status int, code string) reply {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d: %s", r.status, status, r.raw)
	}
	if code != "" {
		if r.body["code"] != code {
			t.Fatalf("code %v, want %q: %s", r.body["code"], code, r.raw)
		}
		if m, _ := r.body["message"].(string); m == "" {
			t.Fatalf("no message: %s", r.raw)
		}
	}
	return r
}

func (r reply) str(field string) string {
	s, _ := r.body[field].(string)
	return s
}

func (r reply) num(field string) int64 {
	f, _ := r.body[field].(float64)
	return int64(f)
}

func (r reply) holder() map[string]any {
	h, _ := r.body["holder"].(map[string]any)
	return h
}
