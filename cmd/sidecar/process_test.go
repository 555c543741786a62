package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// build is a baton binary the process tests build once.
type build struct {
	once sync.Once
	path string
	err  error
}

var fullBuild, leanBuild, daprBuild build

// binary builds bin/baton once for the process tests.
func binary(t *testing.T) string { return fullBuild.get(t, "baton") }

// leanBinary builds bin/baton-sidecar (go build -tags lean) once.
func leanBinary(t *testing.T) string { return leanBuild.get(t, "baton-sidecar", "-tags", "lean") }

// daprBinary builds bin/baton-dapr (go build -tags lean,dapr), the lean
// sidecar with Dapr's lock API, once.
func daprBinary(t *testing.T) string { return daprBuild.get(t, "baton-dapr", "-tags", "lean,dapr") }

func (b *build) get(t *testing.T, name string, flags ...string) string {
	t.Helper()
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "baton-bin")
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(dir, name)
		gobin, err := exec.LookPath("go")
		if err != nil {
			b.err = fmt.Errorf("the go command is not on PATH: %w", err)
			return
		}
		args := append(append([]string{"build"}, flags...), "-o", b.path, ".")
		if out, err := exec.Command(gobin, args...).CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// proc is a `baton serve` child process on the shared test etcd.
type proc struct {
	cmd     *exec.Cmd
	socket  string
	stderr  *syncBuffer
	exited  chan struct{} // closed when the process has exited
	exitErr error
}

func startProc(t *testing.T, socket, scope string, extra ...string) *proc {
	t.Helper()
	return startBinary(t, binary(t), socket, scope, extra...)
}

// startBinary starts bin serve, as startProc does.
func startBinary(t *testing.T, bin, socket, scope string, extra ...string) *proc {
	t.Helper()
	return startBinaryOn(t, bin, testEtcd.Endpoints(), socket, scope, true, extra...)
}

// startBinaryOn starts bin serve on the etcd of endpoints and waits for its
// ready line or, unless ready, for it to serve its socket (a sidecar that
// cannot grant yet serves it, not ready).
func startBinaryOn(t *testing.T, bin string, endpoints []string, socket, scope string, ready bool, extra ...string) *proc {
	t.Helper()
	args := append([]string{"serve", "--socket", socket, "--scope", scope,
		"--etcd-endpoints", strings.Join(endpoints, ","), "--lease-ttl", "2s",
		"--request-timeout", "900ms", "--health-addr", ""}, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "POD_NAME="+filepath.Base(socket))
	p := &proc{cmd: cmd, socket: socket, stderr: &syncBuffer{}, exited: make(chan struct{})}
	cmd.Stderr = p.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	readyLine := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		readyLine <- line
		io.Copy(io.Discard, stdout)
	}()
	go func() {
		p.exitErr = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-p.exited
	})
	if !ready {
		for deadline := time.Now().Add(30 * time.Second); !strings.Contains(p.stderr.String(), `"msg":"listening"`); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("not listening; stderr: %s", p.stderr.String())
			}
		}
		return p
	}
	select {
	case line := <-readyLine:
		if !strings.Contains(line, "serving on") {
			t.Fatalf("first line %q; stderr: %s", line, p.stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("no ready line; stderr: %s", p.stderr.String())
	}
	return p
}

func lockKeys(t *testing.T, cli *clientv3.Client, scope string) int64 {
	t.Helper()
	r, err := cli.Get(context.Background(), "/baton/v1/"+scope+"/locks/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return r.Count
}

// TestSIGKILLFreesLocksAfterLeaseTTL: a killed sidecar's locks are free
// once its lease expires, a waiter elsewhere gets them, and a restarted
// sidecar replaces the stale socket.
func TestSIGKILLFreesLocksAfterLeaseTTL(t *testing.T) {
	dir, _ := os.MkdirTemp("", "baton-kill")
	defer os.RemoveAll(dir)
	scope := "kill-test"
	a := startProc(t, filepath.Join(dir, "a.sock"), scope)
	b := startProc(t, filepath.Join(dir, "b.sock"), scope)
	if code := post(t, unixClient(a.socket), "/v1/locks/job", `{"owner":"exec-a"}`); code != 200 {
		t.Fatalf("acquire on a: %d", code)
	}
	granted := make(chan time.Time, 1)
	go func() {
		code := post(t, unixClient(b.socket), "/v1/locks/job", `{"owner":"exec-b","wait":"30s"}`)
		if code != 200 {
			t.Errorf("waiter on b: %d", code)
		}
		granted <- time.Now()
	}()
	time.Sleep(200 * time.Millisecond)
	killed := time.Now()
	a.cmd.Process.Signal(syscall.SIGKILL)
	<-a.exited
	select {
	case at := <-granted:
		gap := at.Sub(killed)
		t.Logf("waiter granted %v after SIGKILL (lease TTL 2s)", gap)
		if gap < time.Second {
			t.Errorf("granted %v after the kill, before the lease could expire", gap)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the killed sidecar's lock was never freed")
	}
	if _, err := os.Stat(a.socket); err != nil {
		t.Fatalf("SIGKILL should leave the socket file behind: %v", err)
	}
	a2 := startProc(t, a.socket, scope)
	if code := post(t, unixClient(a2.socket), "/v1/locks/other", `{"owner":"exec-a2"}`); code != 200 {
		t.Fatalf("acquire on the restarted sidecar: %d", code)
	}
}

// TestSIGTERMReleasesEverything: SIGTERM revokes the lease (every lock free
// at once), removes the socket and exits 0.
func TestSIGTERMReleasesEverything(t *testing.T) {
	dir, _ := os.MkdirTemp("", "baton-term")
	defer os.RemoveAll(dir)
	scope := "term-test"
	cli, _ := testEtcd.Client(t)
	a := startProc(t, filepath.Join(dir, "a.sock"), scope)
	c := unixClient(a.socket)
	for i := 0; i < 3; i++ {
		if code := post(t, c, fmt.Sprintf("/v1/locks/job-%d", i), `{"owner":"exec"}`); code != 200 {
			t.Fatalf("acquire %d: %d", i, code)
		}
	}
	if n := lockKeys(t, cli, scope); n != 3 {
		t.Fatalf("%d keys before SIGTERM, want 3", n)
	}
	start := time.Now()
	a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.exited:
		if a.exitErr != nil {
			t.Fatalf("exit after SIGTERM: %v; stderr: %s", a.exitErr, a.stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no exit after SIGTERM")
	}
	t.Logf("exited %v after SIGTERM", time.Since(start))
	if n := lockKeys(t, cli, scope); n != 0 {
		t.Errorf("%d keys left after SIGTERM, want 0", n)
	}
	if _, err := os.Stat(a.socket); !os.IsNotExist(err) {
		t.Errorf("socket left after SIGTERM: %v", err)
	}
	if !strings.Contains(a.stderr.String(), `"msg":"stopped"`) {
		t.Errorf("no stop log line: %s", a.stderr.String())
	}
}

// TestMaxProcs: a sidecar on an external etcd runs its Go code on one CPU
// unless told otherwise by --max-procs, BATON_MAX_PROCS or GOMAXPROCS, as
// its Go runtime reports on /metrics.
func TestMaxProcs(t *testing.T) {
	for _, tt := range []struct {
		name string
		args []string
		env  map[string]string
		want float64
	}{
		{"default", nil, nil, 1},
		{"flag", []string{"--max-procs", "3"}, nil, 3},
		{"BATON_MAX_PROCS", nil, map[string]string{"BATON_MAX_PROCS": "3"}, 3},
		{"GOMAXPROCS", nil, map[string]string{"GOMAXPROCS": "2"}, 2},
		{"flag over GOMAXPROCS", []string{"--max-procs", "1"}, map[string]string{"GOMAXPROCS": "2"}, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			addr := freePort(t)
			startProc(t, filepath.Join(t.TempDir(), "s.sock"), "procs-test", append(tt.args, "--metrics-addr", addr)...)
			got, ok := value(scrapeMetrics(t, addr), "go_sched_gomaxprocs_threads", nil)
			if !ok || got != tt.want {
				t.Errorf("GOMAXPROCS %v (reported: %v), want %v", got, ok, tt.want)
			}
		})
	}
}

// TestServesBeforeEtcdIsReachable: a sidecar whose etcd cannot be reached
// at start still serves its socket, answering 503 naming the endpoint
// (and baton run exits 69 saying so), and grants once etcd is there.
func TestServesBeforeEtcdIsReachable(t *testing.T) {
	dir := t.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there until etcd "comes up" below
	sock := filepath.Join(dir, "s.sock")
	cmd := exec.Command(binary(t), "serve", "--socket", sock, "--scope", "late-etcd",
		"--etcd-endpoints", "http://"+addr, "--lease-ttl", "2s", "--request-timeout", "500ms", "--health-addr", "")
	var errb syncBuffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	c := unixClient(sock)
	deadline := time.Now().Add(10 * time.Second)
	for {
		// Served, not only bound: the file exists between bind and
		// listen, when a connection is refused.
		if conn, err := net.Dial("unix", sock); err == nil {
			conn.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no socket while etcd is unreachable; stderr: %s", errb.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	code, body := do(t, c, http.MethodPost, "/v1/locks/job", `{"owner":"o"}`)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, `"code":"unavailable"`) || !strings.Contains(body, "etcd at http://"+addr) {
		t.Fatalf("acquire while etcd is unreachable: %d %s; want 503 naming http://%s", code, body, addr)
	}
	if code, body := do(t, c, http.MethodGet, "/readyz", ""); code != http.StatusServiceUnavailable || !strings.Contains(body, addr) {
		t.Errorf("readyz: %d %s", code, body)
	}
	run, _, runErr := batonRun(t, sock, "--key", "job", "--", "true")
	// The sidecar answers: not 69 (no sidecar), but 74 (no etcd).
	if code := exitOf(t, run.Run()); code != exitNoEtcd || !strings.Contains(runErr.String(), "etcd at http://"+addr) {
		t.Errorf("baton run: exit %d, stderr %q; want %d naming the endpoint", code, runErr.String(), exitNoEtcd)
	}
	if !strings.Contains(errb.String(), `"etcd":["http://`+addr+`"]`) {
		t.Errorf("the retry log does not name the endpoint: %s", errb.String())
	}

	// etcd comes up at that address: a forwarder to the test etcd.
	l, err = net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	testEtcd.Forward(l, nil)
	deadline = time.Now().Add(15 * time.Second)
	for {
		code, body := do(t, c, http.MethodPost, "/v1/locks/job", `{"owner":"o"}`)
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no grant 15s after etcd became reachable: %d %s", code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
