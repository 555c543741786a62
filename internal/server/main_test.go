package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/coordinator"
	"github.com/baton-dev/baton/internal/engine"
	"github.com/baton-dev/baton/internal/testing/etcdtest"
	"github.com/baton-dev/baton/internal/testing/sidecartest"
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

// operators gives a sidecar the operators' policy, which allows force
// release over the socket.
func operators(t testing.TB) func(*engine.Config, *Config) {
	path := sidecartest.Operators(t)
	return func(c *engine.Config, _ *Config) { c.PolicyFile = path }
}

func newAPI(t testing.TB, pod string, mods ...func(*engine.Config, *Config)) *api {
	t.Helper()
	scfg := Default()
	e := sidecartest.Start(t, testEtcd, pod, func(c *engine.Config) {
		for _, m := range mods {
			m(c, &scfg)
		}
	})
	srv, err := New(scfg, e.Coord, e.Log, WithElections(e.Elect))
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
	done := make(chan struct{})
	go func() { Serve(ctx, srv.HTTPServer(srv.Handler()), l, time.Second); close(done) }()
	t.Cleanup(func() {
		e.Coord.Shutdown() // first, as baton serve does: hold streams end at once
		e.Elect.Shutdown()
		cancel()
		<-done
		os.RemoveAll(dir)
	})
	return &api{t: t, socket: sock, coord: e.Coord, calls: e.Calls, srv: srv, client: &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}},
	}}
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
