//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"cmp"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/pkg/v3/proxy"
	"go.uber.org/zap"

	baton "github.com/baton-dev/baton/clients/go"
)

// leaseTTL is the sidecars' lease TTL: etcd's floor with default timing.
const leaseTTL = 2 * time.Second

// sidecar is a `baton serve` child process. Its etcd traffic passes through
// its own proxy when it has one, so that it alone can be cut off, delayed
// or starved.
type sidecar struct {
	name   string
	bin    string // the baton binary it runs
	socket string
	args   []string
	netns  string
	proxy  proxy.Server // nil when the sidecar dials etcd directly
	client *baton.Client

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	stderr *lockedBuffer
}

// sidecarOptions shape one sidecar.
type sidecarOptions struct {
	direct bool     // dial etcd directly, no proxy
	netns  string   // run in this network namespace (ip netns exec)
	extra  []string // more flags
	bin    string   // another baton binary than this build's (S24)
	// unready: do not wait for the ready line, only for the socket.
	unready bool
}

// startSidecar starts a sidecar named name in dir on the given etcd.
func startSidecar(t *testing.T, dir, name string, endpoints []string, o sidecarOptions) *sidecar {
	t.Helper()
	s := &sidecar{name: name, bin: cmp.Or(o.bin, batonBin), socket: filepath.Join(dir, name+".sock"), netns: o.netns}
	eps := endpoints
	if !o.direct {
		if len(endpoints) != 1 || !strings.HasPrefix(endpoints[0], "unix://") {
			t.Fatalf("a proxied sidecar needs one unix endpoint, got %v", endpoints)
		}
		psock := filepath.Join(dir, name+"-etcd.sock")
		s.proxy = proxy.NewServer(proxy.ServerConfig{Logger: zap.NewNop(),
			From: url.URL{Scheme: "unix", Host: psock},
			To:   url.URL{Scheme: "unix", Host: strings.TrimPrefix(endpoints[0], "unix://")}})
		select {
		case <-s.proxy.Ready():
		case err := <-s.proxy.Error():
			t.Fatal(err)
		}
		t.Cleanup(func() { s.proxy.Close() })
		go drain(s.proxy)
		eps = []string{"unix://" + psock}
	}
	s.args = append([]string{"serve", "--socket", s.socket, "--scope", "e2e",
		"--etcd-endpoints", strings.Join(eps, ","), "--lease-ttl", leaseTTL.String(),
		"--request-timeout", "900ms", "--health-addr", "", "--log-level", "info"}, o.extra...)
	s.client = baton.New(s.socket)
	s.run(t, !o.unready)
	t.Cleanup(func() { s.kill() })
	return s
}

// start runs the process and waits for its ready line.
func (s *sidecar) start(t *testing.T) { s.run(t, true) }

// startUnready runs the process and waits for its socket only: a sidecar
// that cannot grant (etcd went back in time) serves its socket, answering
// why, but is never ready.
func (s *sidecar) startUnready(t *testing.T) { s.run(t, false) }

// run runs the process and waits for its ready line, or, unless ready, for
// its socket.
func (s *sidecar) run(t *testing.T, ready bool) {
	t.Helper()
	os.Remove(s.socket)
	cmd := exec.Command(s.bin, s.args...)
	if s.netns != "" {
		cmd = exec.Command("ip", append([]string{"netns", "exec", s.netns, s.bin}, s.args...)...)
	}
	cmd.Env = append(os.Environ(), "POD_NAME="+s.name, "GORACE=halt_on_error=1")
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	first := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		first <- line
		io.Copy(io.Discard, out)
	}()
	go func() {
		cmd.Wait()
		close(exited)
	}()
	s.mu.Lock()
	s.cmd, s.exited, s.stderr = cmd, exited, stderr
	s.mu.Unlock()
	if !ready {
		deadline := time.Now().Add(30 * time.Second)
		for _, err := os.Stat(s.socket); err != nil; _, err = os.Stat(s.socket) {
			if time.Now().After(deadline) {
				t.Fatalf("sidecar %s: no socket after 30s; stderr: %s", s.name, stderr.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
		return
	}
	select {
	case line := <-first:
		if !strings.Contains(line, "serving on") {
			t.Fatalf("sidecar %s: first line %q; stderr: %s", s.name, line, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("sidecar %s: no ready line after 30s; stderr: %s", s.name, stderr.String())
	}
}

func (s *sidecar) proc() (*exec.Cmd, chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd, s.exited
}

// kill SIGKILLs the process (a crash) and waits for it to exit.
func (s *sidecar) kill() {
	cmd, exited := s.proc()
	cmd.Process.Kill()
	<-exited
}

// alive reports whether the process runs.
func (s *sidecar) alive() bool {
	_, exited := s.proc()
	select {
	case <-exited:
		return false
	default:
		return true
	}
}

// pause and resume SIGSTOP and SIGCONT the process (Jepsen's pause).
func (s *sidecar) pause() {
	cmd, _ := s.proc()
	cmd.Process.Signal(syscall.SIGSTOP)
}

func (s *sidecar) resume() {
	cmd, _ := s.proc()
	cmd.Process.Signal(syscall.SIGCONT)
}

// stop SIGTERMs the process and waits for it; it must exit 0.
func (s *sidecar) stop(t *testing.T) {
	t.Helper()
	cmd, exited := s.proc()
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(15 * time.Second):
		t.Fatalf("sidecar %s: not gone 15s after SIGTERM", s.name)
	}
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("sidecar %s exited %d after SIGTERM; stderr: %s", s.name, code, s.logs())
	}
}

// logs returns what the process wrote to stderr.
func (s *sidecar) logs() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stderr.String()
}

// checkRaces fails the test when a -race build of the sidecar reported a
// data race.
func (s *sidecar) checkRaces(t *testing.T) {
	t.Helper()
	if l := s.logs(); strings.Contains(l, "WARNING: DATA RACE") {
		t.Errorf("sidecar %s: data race:\n%s", s.name, l)
	}
}

// lockedBuffer is a bytes.Buffer safe for a writer and readers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// shortDir makes a temporary directory with a short path: unix socket paths
// must stay under 108 bytes.
func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "bz")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

var _ = fmt.Sprintf
