package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/baton-dev/baton/internal/coordinator"
	"github.com/baton-dev/baton/internal/testing/etcdtest"
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
	busyL, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busyL.Close()
	busy := busyL.Addr().String()
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
		{"keys per lease", []string{"--keys-per-lease=0"}, nil, "--keys-per-lease: keys per lease 0"},
		{"zero default ttl", []string{"--default-ttl=0s"}, nil, "--default-ttl"},
		{"negative max wait", []string{"--max-wait=-1s"}, nil, "--max-wait"},
		{"no data dir", []string{"--data-dir="}, nil, "--data-dir"},
		{"request timeout vs lease", []string{"--request-timeout=6s"}, nil, "--request-timeout"},
		{"watch linger too short", []string{"--watch-linger=1ms"}, nil, "--watch-linger"},
		{"negative watch delay", []string{"--watch-delay=-1s"}, nil, "--watch-delay"},
		{"no lock watches", []string{"--max-lock-watches=0"}, nil, "--max-lock-watches: max lock watches 0: must be at least 1"},
		{"cluster name", []string{"--cluster-name=East_1"}, nil, "--cluster-name: cluster name \"East_1\": must be a DNS label"},
		{"cluster name from the environment", nil, map[string]string{"BATON_CLUSTER_NAME": "-east"}, "--cluster-name"},
		{"cert without key", []string{"--etcd-endpoints=http://127.0.0.1:1", "--etcd-cert=" + cert}, nil, "--etcd-key"},
		{"missing CA file", []string{"--etcd-endpoints=http://127.0.0.1:1", "--etcd-cacert=/nonexistent"}, nil, "--etcd-cacert"},
		{"endpoint without scheme", []string{"--etcd-endpoints=127.0.0.1:2379"}, nil, "--etcd-endpoints"},
		{"password without user", []string{"--etcd-endpoints=http://127.0.0.1:1"}, map[string]string{"BATON_ETCD_PASSWORD": "pw"}, "--etcd-username"},
		{"health address", []string{"--health-addr=8081"}, nil, "--health-addr"},
		{"pprof without a metrics address", []string{"--pprof"}, nil, "--pprof"},
		{"negative max procs", []string{"--max-procs=-1"}, nil, "--max-procs"},
		{"negative shutdown grace", []string{"--shutdown-grace=-1s"}, nil, "--shutdown-grace"},
		{"shutdown grace too long", []string{"--shutdown-grace=11m"}, nil, "--shutdown-grace"},
		{"embedded client URL", []string{"--embedded-client-url=ftp://x"}, nil, "--embedded-client-url"},
		{"embedded quota", []string{"--embedded-quota=1000"}, nil, "--embedded-quota"},
		{"maintenance interval", []string{"--etcd-maintenance-interval=0s"}, nil, "--etcd-maintenance-interval"},
		{"defrag ratio", []string{"--etcd-defrag-free-ratio=1.5"}, nil, "--etcd-defrag-free-ratio"},
		{"maintenance of an etcd of others", []string{"--etcd-endpoints=http://127.0.0.1:1", "--etcd-defrag-min-size=1"}, nil, "only with the embedded etcd"},
		{"embedded etcd port in use", []string{"--embedded-client-url=http://" + busy, "--data-dir=" + filepath.Join(dir, "etcd"), "--socket=" + filepath.Join(dir, "s.sock"), "--health-addr="}, nil, "--embedded-client-url"},
		{"socket directory missing", []string{"--socket=" + filepath.Join(dir, "nope", "s.sock"), "--etcd-endpoints=http://127.0.0.1:1", "--health-addr="}, nil, "--socket"},
		{"log level", []string{"--log-level=loud", "--socket=" + filepath.Join(dir, "s.sock")}, nil, "--log-level"},
		{"unknown flag", []string{"--lease=5s"}, nil, "unknown flag"},
		{"stray argument", []string{"extra"}, nil, `unexpected argument "extra"`},
		{"mirror without etcd", []string{"mirror"}, nil, "--etcd-endpoints"},
		{"mirror bad scope", []string{"mirror", "--etcd-endpoints=http://127.0.0.1:1", "--scopes=a/b"}, nil, "--scopes"},
		{"mirror maintenance rules without maintenance", []string{"mirror", "--etcd-endpoints=http://127.0.0.1:1", "--etcd-defrag-free-ratio=0.3"}, nil, "only with --etcd-maintenance"},
		{"mirror maintenance rules", []string{"mirror", "--etcd-endpoints=http://127.0.0.1:1", "--etcd-maintenance", "--etcd-defrag-quota-ratio=2"}, nil, "--etcd-defrag-quota-ratio"},
		{"mirror retention", []string{"mirror", "--etcd-endpoints=http://127.0.0.1:1", "--free-retention=0s"}, nil, "--free-retention"},
		{"mirror metrics address", []string{"mirror", "--etcd-endpoints=http://127.0.0.1:1", "--metrics-addr=8080"}, nil, "--metrics-addr"},
		{"mirror managed etcd without names", []string{"mirror", "--etcd-endpoints=https://127.0.0.1:1", "--etcd-ca-secret=ca", "--etcd-server-secret=etcd"}, nil, "--etcd-server-names"},
		{"mirror managed etcd with files", []string{"mirror", "--etcd-endpoints=https://127.0.0.1:1", "--etcd-ca-secret=ca", "--etcd-username=u"}, nil, "give no --etcd-cacert"},
		{"mirror managed etcd validity", []string{"mirror", "--etcd-endpoints=https://127.0.0.1:1", "--etcd-ca-secret=ca", "--etcd-server-secret=etcd", "--etcd-server-names=etcd", "--etcd-cert-validity=1s"}, nil, "--etcd-cert-validity"},
		{"mirror inject config missing", []string{"mirror", "--etcd-endpoints=http://127.0.0.1:1", "--inject-config=/nonexistent.yaml"}, nil, "--inject-config"},
		{"mirror inject config invalid", []string{"mirror", "--etcd-endpoints=http://127.0.0.1:1", "--inject-config=" + injectYAML}, nil, "image: required"},
		{"mirror fences ConfigMap name", []string{"mirror", "--etcd-endpoints=http://127.0.0.1:1", "--fences-configmap=Not_A_Name"}, nil, "--fences-configmap"},
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
	if err := bindEnv(fs, env(map[string]string{"BATON_MAX_WAITERS": "9", "BATON_LEASE_TTL": "4s", "BATON_ETCD_ENDPOINTS": "http://a:1,http://b:2", "BATON_CLUSTER_NAME": "east"}), io.Discard); err != nil {
		t.Fatal(err)
	}
	if o.engine.Coordinator.MaxWaiters != 7 {
		t.Errorf("max waiters %d: the command line must win over the environment", o.engine.Coordinator.MaxWaiters)
	}
	if o.engine.Lease.TTL != 4*time.Second || len(o.etcd.endpoints) != 2 {
		t.Errorf("from the environment: lease TTL %v, endpoints %v", o.engine.Lease.TTL, o.etcd.endpoints)
	}
	if o.engine.Coordinator.Scope != "team-a" || o.engine.Coordinator.Identity != (coordinator.Identity{Pod: "api-1", Namespace: "team-a", Node: "n1", Cluster: "east"}) {
		t.Errorf("identity %+v scope %q", o.engine.Coordinator.Identity, o.engine.Coordinator.Scope)
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
		if err := fs.Parse(append(tt.args, "--socket="+filepath.Join(t.TempDir(), "s.sock"))); err != nil {
			t.Fatal(err)
		}
		if err := bindEnv(fs, env(tt.env), io.Discard); err != nil {
			t.Fatal(err)
		}
		o.followLeaseTTL(fs)
		if err := o.validate(); err != nil || o.engine.Coordinator.RequestTimeout != tt.want {
			t.Errorf("%v %v: request timeout %v, %v; want %v and valid", tt.args, tt.env, o.engine.Coordinator.RequestTimeout, err, tt.want)
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
	args := []string{"serve", "--socket", sock, "--data-dir", filepath.Join(dir, "etcd"),
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
	serveInProcessEnv(t, env(nil), args...)
}

// serveInProcessEnv is serveInProcess with the environment getenv.
func serveInProcessEnv(t *testing.T, getenv func(string) string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var out, errb syncBuffer
	done := make(chan int)
	go func() { done <- run(ctx, append([]string{"serve"}, args...), getenv, &out, &errb) }()
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

// TestEveryFlagReadsTheEnvironment: every flag of every command reads
// BATON_<FLAG>; the command line wins; the socket has one name, and its
// former one still works with a notice.
func TestEveryFlagReadsTheEnvironment(t *testing.T) {
	root := newRootCmd(context.Background(), env(nil), io.Discard, io.Discard, nil)
	var walk func(c *cobra.Command)
	checked := 0
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
		}
		if !c.Runnable() || c.Name() == "help" || c.Name() == "completion" {
			return
		}
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if f.Name == "help" || renamedTo(f.Name) != "" || f.Value.Type() == "bool" {
				return
			}
			// A fresh command tree per flag: flags keep what they are set to.
			tree := newRootCmd(context.Background(), env(nil), io.Discard, io.Discard, nil)
			cmd, _, err := tree.Find(strings.Fields(c.CommandPath())[1:])
			if err != nil {
				t.Fatal(err)
			}
			cmd.ParseFlags(nil)
			fs := cmd.Flags()
			want := sampleValue(f)
			if (c.Name() == "run" || c.Name() == "elect") && (f.Name == "key" || f.Name == "owner") {
				// What a run or an elect exports to its command is never
				// read back as a nested one's flags.
				tree := newRootCmd(context.Background(), env(map[string]string{envName(f.Name): want}), io.Discard, io.Discard, nil)
				run, _, _ := tree.Find([]string{c.Name()})
				run.ParseFlags(nil)
				if err := run.PersistentPreRunE(run, nil); err != nil || run.Flags().Lookup(f.Name).Value.String() != "" {
					t.Errorf("run --%s was set from %s: %q (%v)", f.Name, envName(f.Name), run.Flags().Lookup(f.Name).Value.String(), err)
				}
				return
			}
			if err := bindEnv(fs, env(map[string]string{envName(f.Name): want}), io.Discard); err != nil {
				t.Errorf("%s --%s: %v", c.CommandPath(), f.Name, err)
				return
			}
			if got := fs.Lookup(f.Name).Value.String(); !strings.Contains(got, strings.Trim(want, "[]")) {
				t.Errorf("%s: %s=%s set --%s to %q", c.CommandPath(), envName(f.Name), want, f.Name, got)
			}
			checked++
		})
	}
	walk(root)
	if checked < 40 {
		t.Fatalf("checked only %d flags", checked)
	}

	// One name for the socket, everywhere; the former one still works.
	for _, args := range [][]string{{"serve"}, {"run"}, {"locks", "list"}} {
		for _, tt := range []struct {
			env    map[string]string
			flags  []string
			want   string
			notice bool
		}{
			{map[string]string{"BATON_SOCKET": "/a.sock"}, nil, "/a.sock", false},
			{map[string]string{"BATON_SOCKET_PATH": "/old.sock"}, nil, "/old.sock", true},
			{map[string]string{"BATON_SOCKET": "/a.sock", "BATON_SOCKET_PATH": "/old.sock"}, nil, "/a.sock", false},
			{map[string]string{"BATON_SOCKET": "/a.sock"}, []string{"--socket-path=/flag.sock"}, "/flag.sock", true},
			{nil, nil, defaultSocket, false},
		} {
			var notice bytes.Buffer
			tree := newRootCmd(context.Background(), env(tt.env), io.Discard, &notice, nil)
			cmd, _, _ := tree.Find(args)
			if err := cmd.ParseFlags(tt.flags); err != nil {
				t.Fatal(err)
			}
			if err := bindEnv(cmd.Flags(), env(tt.env), &notice); err != nil {
				t.Fatal(err)
			}
			got := cmd.Flags().Lookup("socket").Value.String()
			if got != tt.want || strings.Contains(notice.String(), "deprecated") != tt.notice {
				t.Errorf("%v %v %v: socket %q, notice %q; want %q (notice %v)", args, tt.env, tt.flags, got, notice.String(), tt.want, tt.notice)
			}
		}
	}
}

// sampleValue is a valid value for f, different from its default.
func sampleValue(f *pflag.Flag) string {
	switch f.Value.Type() {
	case "duration":
		return "7s"
	case "int", "int64":
		return "7"
	case "float64":
		return "0.7"
	case "stringSlice":
		return "[http://a:1]"
	}
	if f.Name == "output" {
		return "json"
	}
	if f.Name == "log-level" {
		return "warn"
	}
	return "/sample/" + f.Name
}

// TestUsageErrorsExit2: a bad command line of any command exits 2, whatever
// cobra's message says.
func TestUsageErrorsExit2(t *testing.T) {
	for _, args := range [][]string{
		{"locks", "status"}, {"locks", "status", "a", "b"}, {"locks", "release"}, {"locks", "list", "extra"},
		{"install"}, {"install", "a", "b"}, {"serve", "extra"}, {"mirror", "extra"}, {"version", "extra"},
		{"run"}, {"no-such-command"}, {"locks", "list", "--no-such-flag"}, {"run", "--wait", "soon", "--key", "k", "--", "true"},
		{"version", "-o", "yaml"},
	} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), args, env(nil), &out, &errb); code != 2 || !strings.HasPrefix(errb.String(), "baton: ") {
			t.Errorf("%v: exit %d, stderr %q; want 2 and a message", args, code, errb.String())
		}
	}
}

// TestArgumentErrorsNameTheArgument: a missing or extra argument is named
// as the command's usage names it, with the usage, not as cobra counts it.
func TestArgumentErrorsNameTheArgument(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"locks", "status"}, "missing KEY (usage: baton locks status KEY)"},
		{[]string{"locks", "status", "a", "b"}, `unexpected argument "b" (usage: baton locks status KEY)`},
		{[]string{"locks", "release"}, "missing KEY (usage: baton locks release KEY"},
		{[]string{"locks", "list", "extra"}, `unexpected argument "extra": baton locks list takes no arguments`},
		{[]string{"locks", "watch", "a", "b"}, `unexpected argument "b" (usage: baton locks watch [KEY | --prefix P])`},
		{[]string{"run", "--key", "k"}, "missing COMMAND (usage: baton run --key KEY [flags] -- COMMAND [ARGS...])"},
		{[]string{"install"}, "missing PATH"},
	} {
		var errb bytes.Buffer
		code := run(context.Background(), c.args, env(nil), io.Discard, &errb)
		if code != 2 || !strings.Contains(errb.String(), c.want) || strings.Contains(errb.String(), "arg(s)") {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", c.args, code, errb.String(), c.want)
		}
	}
	for use, want := range map[string]struct {
		required []string
		most     int
	}{
		"status KEY": {[]string{"KEY"}, 1},
		"release KEY (--owner ID | --force [--fence N])": {[]string{"KEY"}, 1},
		"run --key KEY [flags] -- COMMAND [ARGS...]":     {[]string{"COMMAND"}, -1},
		"watch [KEY | --prefix P]":                       {nil, 1},
		"copy [SRC DST EXTRA]":                           {nil, 3},
		"copy SRC [DST] NAME":                            {[]string{"SRC", "NAME"}, 3},
		"list":                                           {nil, 0},
	} {
		required, most := positionals(use)
		if !slices.Equal(required, want.required) || most != want.most {
			t.Errorf("positionals(%q) = %v, %d; want %v, %d", use, required, most, want.required, want.most)
		}
	}
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"version"}} {
		var out bytes.Buffer
		if code := run(context.Background(), args, env(nil), &out, io.Discard); code != 0 {
			t.Fatalf("%v: exit %d", args, code)
		}
		if !strings.HasPrefix(out.String(), "baton ") || !strings.Contains(out.String(), "commit ") ||
			!strings.Contains(out.String(), "go1.") || !strings.Contains(out.String(), "etcd 3.") {
			t.Errorf("%v printed %q; want version, commit, Go and etcd", args, out.String())
		}
	}
	var out bytes.Buffer
	run(context.Background(), []string{"version", "-o", "json"}, env(nil), &out, io.Discard)
	var v struct{ Version, Commit, Go, Etcd string }
	if err := json.Unmarshal(out.Bytes(), &v); err != nil || v.Version == "" || v.Commit == "" || v.Go == "" || v.Etcd == "" {
		t.Errorf("version -o json: %q %v", out.String(), err)
	}
}

// TestMirrorWithoutKubeconfig: no Kubernetes configuration is one line
// saying what to give, and exit 2; no stack trace, no client-go hint.
func TestMirrorWithoutKubeconfig(t *testing.T) {
	var errb bytes.Buffer
	code := run(context.Background(), []string{"mirror", "--etcd-endpoints", "http://127.0.0.1:1", "--health-addr", "", "--metrics-addr", ""},
		env(map[string]string{"HOME": t.TempDir()}), io.Discard, &errb)
	if code != 2 || strings.Count(errb.String(), "\n") != 1 || !strings.Contains(errb.String(), "--kubeconfig") ||
		strings.Contains(errb.String(), "KUBERNETES_MASTER") || strings.Contains(errb.String(), "stacktrace") {
		t.Errorf("exit %d, stderr %q; want 2 and one line naming --kubeconfig", code, errb.String())
	}
}
