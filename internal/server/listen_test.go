package server

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-dev/baton/internal/engine"
	"github.com/baton-dev/baton/internal/keyspace"
)

func TestListenUnix(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "baton.sock")

	l, err := ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(sock)
	if err != nil || fi.Mode().Perm() != SocketMode {
		t.Fatalf("socket mode %v, %v; want %v", fi.Mode().Perm(), err, os.FileMode(SocketMode))
	}
	accepting := make(chan struct{})
	go func(l net.Listener) {
		defer close(accepting)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}(l)
	if _, err := ListenUnix(sock); err == nil || !strings.Contains(err.Error(), "running process") {
		t.Errorf("a live socket was taken over: %v", err)
	}
	l.Close()
	<-accepting
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("socket file left after close: %v", err)
	}

	// A stale socket file, as left by a SIGKILLed process, is replaced.
	stale, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close()
	if _, err := os.Stat(sock); err != nil {
		t.Fatalf("no stale socket to test with: %v", err)
	}
	l, err = ListenUnix(sock)
	if err != nil {
		t.Fatalf("stale socket not replaced: %v", err)
	}
	l.Close()

	plain := filepath.Join(dir, "plain")
	os.WriteFile(plain, []byte("data"), 0o600)
	if _, err := ListenUnix(plain); err == nil {
		t.Error("a regular file was replaced by a socket")
	}
	if b, _ := os.ReadFile(plain); string(b) != "data" {
		t.Error("the regular file was touched")
	}
}

// TestDisconnectWithdrawsWaiter: a caller that hangs up while queued leaves
// no key behind.
func TestDisconnectWithdrawsWaiter(t *testing.T) {
	a, b := newAPI(t, "pod-a"), newAPI(t, "pod-b")
	a.do("POST", "/v1/locks/dc", `{"owner":"holder"}`).expect(t, 200, "")
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://baton/v1/locks/dc", strings.NewReader(`{"owner":"leaver","wait":"1m"}`))
	errc := make(chan error)
	go func() {
		resp, err := b.client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	cli, _ := testEtcd.Client(t)
	k, _ := keyspace.ParseKey("dc")
	pfx := b.coord.Layout().LockPrefix(k)
	count := func() int64 {
		r, err := cli.Get(context.Background(), pfx, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return r.Count
	}
	deadline := time.Now().Add(5 * time.Second)
	for count() != 2 {
		if time.Now().After(deadline) {
			t.Fatal("waiter never queued")
		}
		time.Sleep(10 * time.Millisecond)
	}
	start := time.Now()
	cancel()
	<-errc
	for count() != 1 {
		if time.Since(start) > 5*time.Second {
			t.Fatal("the waiter's key stayed after its caller hung up")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestHangUpBeforeGrantReleases: a caller that hangs up before the answer
// to its try (a client time-out) leaves no lock held until its ttl: the
// sidecar releases a lock it could not tell anyone about. An owner asking
// again for a lock it holds and hanging up keeps it.
func TestHangUpBeforeGrantReleases(t *testing.T) {
	a := newAPI(t, "pod-a", operators(t))
	k, _ := keyspace.ParseKey("hangup")
	pfx := a.coord.Layout().LockPrefix(k)
	cli, _ := testEtcd.Client(t)
	state := func() (keys, rev int64) {
		r, err := cli.Get(context.Background(), pfx, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return r.Count, r.Header.Revision
	}
	// Sends a whole request and closes the connection without reading.
	hangUp := func(body string) {
		conn, err := net.Dial("unix", a.socket)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "POST /v1/locks/hangup HTTP/1.1\r\nHost: baton\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		conn.Close()
	}
	// The sidecar may grant the try before the connection's close reaches
	// it (this goroutine may be descheduled between the two): the answer
	// was then delivered, and the lock is rightly kept. Or it may see the
	// close before it reads the request, and grant nothing. Most tries are
	// granted and released; without the release none is.
	const tries = 10
	released := 0
	for range tries {
		_, rev := state()
		hangUp(`{"owner":"gone","ttl":"1h"}`)
		deadline := time.Now().Add(2 * time.Second)
		for {
			keys, now := state()
			if keys == 0 && now >= rev+2 { // granted (a put), then released (a delete)
				released++
				break
			}
			if time.Now().After(deadline) {
				if keys > 0 {
					a.do("DELETE", "/v1/locks/hangup?force=true", "").expect(t, 200, "")
				}
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if released < tries/2 {
		t.Fatalf("%d of %d tries whose caller hung up were released; the others stayed held", released, tries)
	}

	a.do("POST", "/v1/locks/hangup", `{"owner":"stays","ttl":"1h"}`).expect(t, 200, "")
	hangUp(`{"owner":"stays","ttl":"1h"}`)
	time.Sleep(200 * time.Millisecond)
	if n, _ := state(); n != 1 {
		t.Fatalf("%d keys after the holder asked again and hung up; want its key kept", n)
	}
	a.do("DELETE", "/v1/locks/hangup?owner=stays", "").expect(t, 200, "")
}

func TestSlowHeadersAreCut(t *testing.T) {
	a := newAPI(t, "pod", func(_ *engine.Config, s *Config) { s.ReadHeaderTimeout = 200 * time.Millisecond })
	c, err := net.Dial("unix", a.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("POST /v1/locks/slow HTTP/1.1\r\nHost: x\r\n"))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode < 400 {
			t.Fatalf("a request with unfinished headers got %d", resp.StatusCode)
		}
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("connection with slow headers kept %v", d)
	}
	a.do("GET", "/v1/locks/slow", "").expect(t, 200, "")
}

func TestHealthHandlerOnTCP(t *testing.T) {
	a := newAPI(t, "pod")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- Serve(ctx, a.srv.HTTPServer(a.srv.HealthHandler()), l, time.Second) }()
	defer func() { cancel(); <-done }()
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200, "/v1/locks/x": 404} {
		resp, err := http.Get("http://" + l.Addr().String() + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s on the health port: %d, want %d", path, resp.StatusCode, want)
		}
	}
}

// TestShortBodyIsCut: a Content-Length larger than the body, or a chunked
// body without its end, gets 408 once BodyTimeout passes instead of holding
// the connection and its goroutine forever.
func TestShortBodyIsCut(t *testing.T) {
	a := newAPI(t, "pod", func(_ *engine.Config, s *Config) { s.BodyTimeout = 200 * time.Millisecond })
	for name, raw := range map[string]string{
		"content-length": "POST /v1/locks/short HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"owner\":",
		"chunked":        "POST /v1/locks/short HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"own\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			c, err := net.Dial("unix", a.socket)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.Write([]byte(raw))
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("no answer to a short body: %v", err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(body), `"body_timeout"`) {
				t.Fatalf("short body: %d %s, want 408 body_timeout", resp.StatusCode, body)
			}
		})
	}
	if r := a.do("GET", "/v1/locks/short", "").expect(t, 200, ""); r.body["held"] != false {
		t.Errorf("a short body took the lock: %s", r.raw)
	}
}

// A socket path whose directory is missing is refused, not made: a typo
// must not leave the sidecar serving where no client looks.
func TestListenUnixRefusesAMissingDirectory(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "no-such-dir", "baton.sock")
	_, err := ListenUnix(path)
	// The baton command puts the flag, --socket, before the message.
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "no-such-dir")) || !strings.Contains(err.Error(), "create it") {
		t.Fatalf("ListenUnix(%s) = %v; want an error naming the directory and what to do", path, err)
	}
	if _, err := os.Stat(filepath.Dir(path)); !os.IsNotExist(err) {
		t.Errorf("the directory was made: %v", err)
	}
}
