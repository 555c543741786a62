package mirror

import (
	"bufio"
	"bytes"
	"context"
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

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	batonv1 "github.com/baton-dev/baton/api/v1alpha1"
	"github.com/baton-dev/baton/internal/coordinator"
)

var (
	buildOnce sync.Once
	batonBin  string
	buildErr  error
)

// baton returns the baton binary, built once for the package's tests.
func baton(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "baton-bin")
		if err != nil {
			buildErr = err
			return
		}
		batonBin = filepath.Join(dir, "baton")
		out, err := exec.Command("go", "build", "-o", batonBin, "../../cmd/sidecar").CombinedOutput()
		if err != nil {
			buildErr = err
			t.Logf("%s", out)
		}
	})
	if buildErr != nil {
		t.Fatalf("build baton: %v", buildErr)
	}
	return batonBin
}

// sidecarProc is a baton serve process and an HTTP client of its socket.
type sidecarProc struct {
	cmd  *exec.Cmd
	http *http.Client
	done chan struct{}
}

// startSidecarProc starts `baton serve` for scope as pod, on the test etcd
// with a 2 s lease TTL and the extra flags, and waits until it serves.
func startSidecarProc(t *testing.T, scope, pod string, extra ...string) *sidecarProc {
	t.Helper()
	dir, err := os.MkdirTemp("", "bm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "s.sock")
	args := append([]string{"serve", "--socket", sock, "--scope", scope,
		"--etcd-endpoints", strings.Join(testEtcd.Endpoints(), ","), "--lease-ttl", "2s",
		"--request-timeout", "900ms", "--health-addr", "", "--log-level", "warn"}, extra...)
	cmd := exec.Command(baton(t), args...)
	cmd.Env = append(os.Environ(), "POD_NAME="+pod, "NODE_NAME=node-1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &sidecarProc{cmd: cmd, done: make(chan struct{}), http: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
	}}}
	ready := make(chan struct{})
	go func() {
		bufio.NewReader(stdout).ReadString('\n') // "baton: serving on ..."
		close(ready)
		io.Copy(io.Discard, stdout)
	}()
	go func() { cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-p.done })
	select {
	case <-ready:
	case <-p.done:
		t.Fatal("baton serve exited before serving")
	case <-time.After(20 * time.Second):
		t.Fatal("baton serve not serving after 20s")
	}
	return p
}

// call sends a request to the sidecar and returns the status and body.
func (p *sidecarProc) call(t *testing.T, method, path, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, "http://baton"+path, strings.NewReader(body))
	resp, err := p.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// kill SIGKILLs the sidecar: its lease is no longer renewed.
func (p *sidecarProc) kill() {
	p.cmd.Process.Kill()
	<-p.done
}

// mirrorProc is a `baton mirror` process.
type mirrorProc struct {
	cmd     *exec.Cmd
	stderr  *syncBuffer
	exited  chan error
	metrics string // its /metrics URL
}

// startMirrorProc runs `baton mirror` with a kubeconfig file of a cluster
// admin, on the test etcd, limited to scope and electing its leader there.
func startMirrorProc(t *testing.T, scope string) *mirrorProc {
	t.Helper()
	user, err := testEnv.AddUser(envtest.User{Name: "mirror", Groups: []string{"system:masters"}}, restConfig)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0") // a free port for its metrics
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	m := &mirrorProc{stderr: &syncBuffer{}, exited: make(chan error, 1), metrics: "http://" + addr + "/metrics"}
	m.cmd = exec.Command(baton(t), "mirror", "--kubeconfig", path, "--etcd-endpoints", strings.Join(testEtcd.Endpoints(), ","),
		"--scopes", scope, "--leader-election-namespace", scope, "--health-addr", "127.0.0.1:0", "--metrics-addr", addr)
	m.cmd.Stderr = m.stderr
	if err := m.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { m.exited <- m.cmd.Wait() }()
	t.Cleanup(func() {
		if m.cmd.ProcessState == nil {
			m.cmd.Process.Kill()
		}
	})
	return m
}

// syncBuffer is a bytes.Buffer that a process writes while a test reads.
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

// TestMirrorCommand runs `baton mirror` as a process with a kubeconfig
// file, limited to one scope: it mirrors that scope's locks, leaves the
// others alone, and stops on SIGTERM.
func TestMirrorCommand(t *testing.T) {
	needAPIServer(t)
	kc := kube(t)
	ns := namespace(t, kc, "command")
	other := namespace(t, kc, "command-other")
	m := startMirrorProc(t, ns)

	a, b := newSidecar(t, ns, "pod-a"), newSidecar(t, other, "pod-b")
	g, err := a.c.Acquire(context.Background(), coordinator.AcquireRequest{Key: key(t, "mine"), Owner: "o"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.c.Acquire(context.Background(), coordinator.AcquireRequest{Key: key(t, "theirs"), Owner: "o"}); err != nil {
		t.Fatal(err)
	}
	lockShows(t, kc, ns, key(t, "mine"), 20*time.Second, "Held, by baton mirror", heldBy("o", "pod-a", g.Fence, 0))
	var l batonv1.Lock
	if err := kc.Get(context.Background(), client.ObjectKey{Namespace: other, Name: ObjectName("theirs")}, &l); !apierrors.IsNotFound(err) {
		t.Errorf("a lock of a scope not in --scopes was mirrored: %v", err)
	}
	m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-m.exited:
		if err != nil {
			t.Errorf("baton mirror exited with %v after SIGTERM: %s", err, m.stderr.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("baton mirror still running 15s after SIGTERM: %s", m.stderr.String())
	}
}
