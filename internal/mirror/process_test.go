package mirror

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
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
// with a 2 s lease TTL, and waits until it serves.
func startSidecarProc(t *testing.T, scope, pod string) *sidecarProc {
	t.Helper()
	dir, err := os.MkdirTemp("", "bm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "s.sock")
	cmd := exec.Command(baton(t), "serve", "--socket-path", sock, "--scope", scope,
		"--etcd-endpoints", strings.Join(testEtcd.Endpoints(), ","), "--lease-ttl", "2s",
		"--request-timeout", "900ms", "--health-addr", "", "--log-level", "warn")
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
