package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/baton-dev/baton/internal/etcdtest"
)

var testEtcd *etcdtest.Server

func TestMain(m *testing.M) {
	os.Exit(etcdtest.Main(m, func(s *etcdtest.Server) { testEtcd = s }))
}

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func TestBadConfigurationNamesTheFlag(t *testing.T) {
	dir := t.TempDir()
	cert := filepath.Join(dir, "cert.pem")
	os.WriteFile(cert, []byte("x"), 0o600)
	injectYAML := filepath.Join(dir, "inject.yaml")
	os.WriteFile(injectYAML, []byte("etcdEndpoints: [\"http://etcd:2379\"]\n"), 0o600)
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"lease TTL too short", []string{"--lease-ttl=1s"}, nil, "--lease-ttl"},
		{"lease TTL from the environment", nil, map[string]string{"BATON_LEASE_TTL": "soon"}, "BATON_LEASE_TTL"},
		{"max hold below default ttl", []string{"--max-hold=1m", "--default-ttl=5m"}, nil, "--max-hold"},
		{"bad scope", []string{"--scope=a/b"}, nil, "--scope"},
		{"bad scope from POD_NAMESPACE", nil, map[string]string{"POD_NAMESPACE": "a b"}, "--scope"},
		{"zero waiters", []string{"--max-waiters=0"}, nil, "--max-waiters"},
		{"request timeout vs lease", []string{"--request-timeout=6s"}, nil, "--request-timeout"},
		{"watch linger too short", []string{"--watch-linger=1ms"}, nil, "--watch-linger"},
		{"negative watch delay", []string{"--watch-delay=-1s"}, nil, "--watch-delay"},
		{"cert without key", []string{"--etcd-endpoints=http://127.0.0.1:1", "--etcd-cert=" + cert}, nil, "--etcd-key"},
		{"missing CA file", []string{"--etcd-endpoints=http://127.0.0.1:1", "--etcd-cacert=/nonexistent"}, nil, "--etcd-cacert"},
		{"endpoint without scheme", []string{"--etcd-endpoints=127.0.0.1:2379"}, nil, "--etcd-endpoints"},
		{"password without user", []string{"--etcd-endpoints=http://127.0.0.1:1"}, map[string]string{"BATON_ETCD_PASSWORD": "pw"}, "--etcd-username"},
		{"health address", []string{"--health-addr=8081"}, nil, "--health-addr"},
		{"pprof without a metrics address", []string{"--pprof"}, nil, "--pprof"},
		{"negative max procs", []string{"--max-procs=-1"}, nil, "--max-procs"},
		{"embedded client URL", []string{"--embedded-client-url=ftp://x"}, nil, "--embedded-client-url"},
		{"log level", []string{"--log-level=loud", "--socket-path=" + filepath.Join(dir, "s.sock")}, nil, "--log-level"},
		{"unknown flag", []string{"--lease=5s"}, nil, "unknown flag"},
		{"stray argument", []string{"extra"}, nil, "unknown command"},
		{"mirror without etcd", []string{"mirror"}, nil, "--etcd-endpoints"},
		{"mirror bad scope", []string{"mirror", "--etcd-endpoints=http://127.0.0.1:1", "--scopes=a/b"}, nil, "--scopes"},
		{"mirror retention", []string{"mirror", "--etcd-endpoints=http://127.0.0.1:1", "--free-retention=0s"}, nil, "--free-retention"},
		{"mirror metrics address", []string{"mirror", "--etcd-endpoints=http://127.0.0.1:1", "--metrics-addr=8080"}, nil, "--metrics-addr"},
		{"mirror inject config missing", []string{"mirror", "--etcd-endpoints=http://127.0.0.1:1", "--inject-config=/nonexistent.yaml"}, nil, "--inject-config"},
		{"mirror inject config invalid", []string{"mirror", "--etcd-endpoints=http://127.0.0.1:1", "--inject-config=" + injectYAML}, nil, "image: required"},
		{"mirror webhook port", []string{"mirror", "--etcd-endpoints=http://127.0.0.1:1", "--webhook-port=0"}, nil, "--webhook-port"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			args := append([]string{"serve"}, tt.args...)
			if tt.args != nil && tt.args[0] == "mirror" {
				args = tt.args
			}
			code := run(context.Background(), args, env(tt.env), &out, &errb)
			if code != 2 {
				t.Fatalf("exit %d, want 2; stderr: %s", code, errb.String())
			}
			if !strings.Contains(errb.String(), tt.want) {
				t.Errorf("stderr %q does not name %q", errb.String(), tt.want)
			}
		})
	}
}

func TestEnvironmentSetsFlags(t *testing.T) {
	o := defaultServeOptions(env(map[string]string{"POD_NAMESPACE": "team-a", "POD_NAME": "api-1", "NODE_NAME": "n1"}))
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	o.addFlags(fs)
	if err := fs.Parse([]string{"--max-waiters=7"}); err != nil {
		t.Fatal(err)
	}
	if err := bindEnv(fs, env(map[string]string{"BATON_MAX_WAITERS": "9", "BATON_LEASE_TTL": "4s", "BATON_ETCD_ENDPOINTS": "http://a:1,http://b:2"})); err != nil {
		t.Fatal(err)
	}
	if o.coord.MaxWaiters != 7 {
		t.Errorf("max waiters %d: the command line must win over the environment", o.coord.MaxWaiters)
	}
	if o.lease.TTL != 4*time.Second || len(o.etcd.endpoints) != 2 {
		t.Errorf("from the environment: lease TTL %v, endpoints %v", o.lease.TTL, o.etcd.endpoints)
	}
	if o.coord.Scope != "team-a" || o.coord.Identity != (struct{ Pod, Namespace, Node string }{"api-1", "team-a", "n1"}) {
		t.Errorf("identity %+v scope %q", o.coord.Identity, o.coord.Scope)
	}
}

func TestShortLeaseAloneIsEnough(t *testing.T) {
	for _, tt := range []struct {
		args []string
		env  map[string]string
		want time.Duration
	}{
		{[]string{"--lease-ttl=2s"}, nil, 667 * time.Millisecond},
		{nil, map[string]string{"BATON_LEASE_TTL": "5s"}, 1667 * time.Millisecond},
		{[]string{"--lease-ttl=1m"}, nil, 3 * time.Second},
		{[]string{"--lease-ttl=3s", "--request-timeout=1s"}, nil, time.Second},
	} {
		o := defaultServeOptions(env(nil))
		fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
		o.addFlags(fs)
		if err := fs.Parse(append(tt.args, "--socket-path="+filepath.Join(t.TempDir(), "s.sock"))); err != nil {
			t.Fatal(err)
		}
		if err := bindEnv(fs, env(tt.env)); err != nil {
			t.Fatal(err)
		}
		o.followLeaseTTL(fs)
		if err := o.validate(); err != nil || o.coord.RequestTimeout != tt.want {
			t.Errorf("%v %v: request timeout %v, %v; want %v and valid", tt.args, tt.env, o.coord.RequestTimeout, err, tt.want)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func unixClient(sock string) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
	}}
}

func post(t *testing.T, c *http.Client, path, body string) int {
	t.Helper()
	resp, err := c.Post("http://baton"+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestServeEmbedded runs `baton serve` in-process on its own embedded etcd,
// as `make run` does, takes a lock, and stops it.
func TestServeEmbedded(t *testing.T) {
	dir, err := os.MkdirTemp("", "baton-serve")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "baton.sock")
	args := []string{"serve", "--socket-path", sock, "--data-dir", filepath.Join(dir, "etcd"),
		"--embedded-client-url", "http://127.0.0.1:0", "--health-addr", "127.0.0.1:0", "--lease-ttl", "2s", "--request-timeout", "900ms"}
	for round := 0; round < 2; round++ {
		ctx, cancel := context.WithCancel(context.Background())
		var out, errb syncBuffer
		done := make(chan int)
		go func() { done <- run(ctx, args, env(nil), &out, &errb) }()
		deadline := time.Now().Add(30 * time.Second)
		for !strings.Contains(out.String(), "serving on") {
			select {
			case code := <-done:
				t.Fatalf("exit %d before the ready line; stderr: %s", code, errb.String())
			case <-time.After(20 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatalf("no ready line; stderr: %s", errb.String())
			}
		}
		if lines := strings.Count(out.String(), "\n"); lines != 1 || !strings.Contains(out.String(), "curl") || !strings.Contains(out.String(), sock) {
			t.Errorf("stdout %q: want one line saying how to call it", out.String())
		}
		c := unixClient(sock)
		// After a restart the previous run's lock must be free: shutdown revoked it.
		if code := post(t, c, "/v1/locks/demo", `{"owner":"exec-1"}`); code != 200 {
			t.Fatalf("round %d: acquire: %d", round, code)
		}
		if code := post(t, c, "/v1/locks/demo", `{"owner":"exec-2"}`); code != 409 {
			t.Fatalf("round %d: second acquire: %d", round, code)
		}
		cancel()
		if code := <-done; code != 0 {
			t.Fatalf("exit %d; stderr: %s", code, errb.String())
		}
		if _, err := os.Stat(sock); !os.IsNotExist(err) {
			t.Errorf("socket left after shutdown: %v", err)
		}
	}
}

// serveInProcess runs `baton serve args...` in this process until the test
// ends, and waits for its ready line.
func serveInProcess(t *testing.T, args ...string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var out, errb syncBuffer
	done := make(chan int)
	go func() { done <- run(ctx, append([]string{"serve"}, args...), env(nil), &out, &errb) }()
	t.Cleanup(func() { cancel(); <-done })
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out.String(), "serving on") {
		select {
		case code := <-done:
			done <- code
			t.Fatalf("exit %d before the ready line; stderr: %s", code, errb.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no ready line; stderr: %s", errb.String())
		}
	}
}
