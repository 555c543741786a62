package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	baton "github.com/baton-dev/baton/clients/go"
	"github.com/baton-dev/baton/clients/go/lockapi"
	"github.com/baton-dev/baton/internal/restart"
)

func do(t *testing.T, c *http.Client, method, path, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, "http://baton"+path, strings.NewReader(body))
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestRestartKeepsLocks: a sidecar SIGKILLed and restarted while the app
// runs on keeps the app's plain locks (same fence), drops its hold streams'
// locks, its waiters' keys and its callers from the waiter counts; restarted after its lease expired, it
// answers 410 lease_lost for the locks it had. One key per lease spreads
// them over several leases, which the restarted process all resumes.
func TestRestartKeepsLocks(t *testing.T) {
	dir, _ := os.MkdirTemp("", "baton-restart")
	defer os.RemoveAll(dir)
	scope := "restart-test"
	sockA := filepath.Join(dir, "a.sock")
	a := startProc(t, sockA, scope, "--lease-ttl", "4s", "--keys-per-lease", "1")
	b := startProc(t, filepath.Join(dir, "b.sock"), scope)
	ca, cb := unixClient(sockA), unixClient(b.socket)

	code, body := do(t, ca, "POST", "/v1/locks/plain", `{"owner":"p1","ttl":"10m"}`)
	if code != 200 {
		t.Fatalf("acquire: %d %s", code, body)
	}
	var fence int64
	fmt.Sscanf(body[strings.Index(body, `"fence":`)+8:], "%d", &fence)
	hold, err := baton.New(sockA).Hold(context.Background(), "held", lockapi.Request{Owner: "h1"})
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := hold.Next(); err != nil || ev.Event != "granted" {
		t.Fatalf("hold: %v %v", ev, err)
	}
	if code, _ := do(t, cb, "POST", "/v1/locks/b-lock", `{"owner":"b"}`); code != 200 {
		t.Fatal("b acquire")
	}
	go func() { // a waiter of a's; its connection dies with a
		if resp, err := ca.Post("http://baton/v1/locks/b-lock", "application/json", strings.NewReader(`{"owner":"w","wait":"1m"}`)); err == nil {
			resp.Body.Close()
		}
	}()
	waitStatus(t, cb, "b-lock", `"waiters":1`)
	for _, w := range []string{"w1", "w2"} { // a's own callers, queued behind p1 inside a
		go func() {
			if resp, err := ca.Post("http://baton/v1/locks/plain", "application/json", strings.NewReader(`{"owner":"`+w+`","wait":"1m"}`)); err == nil {
				resp.Body.Close()
			}
		}()
	}
	waitStatus(t, cb, "plain", `"waiters":2`)
	for i := range 4 { // more locks, on the leases added meanwhile
		if code, body := do(t, ca, "POST", fmt.Sprintf("/v1/locks/more%d", i), `{"owner":"m","ttl":"10m"}`); code != 200 {
			t.Fatalf("acquire more%d: %d %s", i, code, body)
		}
	}
	waitStateFile(t, sockA+".state", `"more3"`)
	if saved, err := restart.Read(sockA + ".state"); err != nil || len(saved.Leases) < 2 {
		t.Fatalf("state file names the leases %v (%v); want the locks spread over several", saved.Leases, err)
	}

	a.cmd.Process.Signal(syscall.SIGKILL)
	<-a.exited
	hold.Close()
	a2 := startProc(t, sockA, scope, "--lease-ttl", "4s", "--keys-per-lease", "1")
	ca2 := unixClient(a2.socket)

	_, st := do(t, cb, "GET", "/v1/locks/plain", "")
	if !strings.Contains(st, `"owner":"p1"`) || !strings.Contains(st, fmt.Sprintf(`"fence":%d`, fence)) {
		t.Errorf("plain lock after the restart: %s", st)
	}
	for i := range 4 {
		if _, st := do(t, cb, "GET", fmt.Sprintf("/v1/locks/more%d", i), ""); !strings.Contains(st, `"owner":"m"`) {
			t.Errorf("more%d after the restart: %s", i, st)
		}
	}
	waitStatus(t, cb, "held", `"held":false`)
	waitStatus(t, cb, "b-lock", `"waiters":0`)
	waitStatus(t, cb, "plain", `"waiters":0`) // its record no longer counts the callers that died
	if code, body := do(t, ca2, "POST", "/v1/locks/plain", `{"owner":"p1"}`); code != 200 || !strings.Contains(body, fmt.Sprintf(`"fence":%d`, fence)) {
		t.Errorf("idempotent acquire after the restart: %d %s", code, body)
	}
	if code, body := do(t, ca2, "DELETE", "/v1/locks/plain?owner=p1", ""); code != 200 {
		t.Errorf("release after the restart: %d %s", code, body)
	}

	// Killed for longer than the lease TTL: the locks are lost, and said so.
	if code, _ := do(t, ca2, "POST", "/v1/locks/plain2", `{"owner":"p2"}`); code != 200 {
		t.Fatal("acquire plain2")
	}
	waitStateFile(t, sockA+".state", `"plain2"`)
	a2.cmd.Process.Signal(syscall.SIGKILL)
	<-a2.exited
	waitStatus(t, cb, "plain2", `"held":false`)
	a3 := startProc(t, sockA, scope, "--lease-ttl", "4s")
	code, body = do(t, unixClient(a3.socket), "DELETE", "/v1/locks/plain2?owner=p2", "")
	if code != 410 || !strings.Contains(body, `"reason":"lease_lost"`) {
		t.Errorf("release of a lock lost while the sidecar was down: %d %s", code, body)
	}
}

// waitStateFile waits until the sidecar's state file mentions want: it is
// written a moment after the locks change.
func waitStateFile(t *testing.T, path, want string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, _ := os.ReadFile(path)
		if strings.Contains(string(b), want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("state file %s does not mention %s after 5s: %s", path, want, b)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func waitStatus(t *testing.T, c *http.Client, key, want string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, st := do(t, c, "GET", "/v1/locks/"+key, "")
		if strings.Contains(st, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: status %s, want %s", key, st, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestGracefulRestartSaysLost: a sidecar stopped with SIGTERM (as
// Kubernetes stops it) releases every lock; restarted, it answers the
// owner of a plain lock 410 lock_lost with reason shutdown, not 404, on
// release and on extend, until the lock's own deadline at least; a second
// restart still knows.
func TestGracefulRestartSaysLost(t *testing.T) {
	dir, _ := os.MkdirTemp("", "baton-graceful")
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "a.sock")
	a := startProc(t, sock, "graceful-test")
	if code, body := do(t, unixClient(sock), "POST", "/v1/locks/job", `{"owner":"p1","ttl":"10m"}`); code != 200 {
		t.Fatalf("acquire: %d %s", code, body)
	}
	if code, body := do(t, unixClient(sock), "POST", "/v1/locks/done", `{"owner":"p2"}`); code != 200 {
		t.Fatalf("acquire: %d %s", code, body)
	}
	if code, body := do(t, unixClient(sock), "DELETE", "/v1/locks/done?owner=p2", ""); code != 200 {
		t.Fatalf("release: %d %s", code, body)
	}
	for range 2 {
		a.cmd.Process.Signal(syscall.SIGTERM)
		<-a.exited
		a = startProc(t, sock, "graceful-test")
		c := unixClient(sock)
		for _, call := range []struct{ method, path, body string }{
			{"POST", "/v1/locks/job:extend", `{"owner":"p1","ttl":"1m"}`},
			{"DELETE", "/v1/locks/job?owner=p1", ""},
		} {
			code, body := do(t, c, call.method, call.path, call.body)
			if code != 410 || !strings.Contains(body, `"code":"lock_lost"`) || !strings.Contains(body, `"reason":"shutdown"`) {
				t.Errorf("%s %s after a graceful restart: %d %s; want 410 lock_lost, reason shutdown", call.method, call.path, code, body)
			}
		}
		// A lock released before the restart is not a loss.
		if code, body := do(t, c, "DELETE", "/v1/locks/done?owner=p2", ""); code != 404 {
			t.Errorf("release of a lock released before the restart: %d %s; want 404 not_held", code, body)
		}
	}
	// Taken again, the lock is no longer lost.
	c := unixClient(sock)
	if code, body := do(t, c, "POST", "/v1/locks/job", `{"owner":"p1"}`); code != 200 {
		t.Fatalf("acquire again: %d %s", code, body)
	}
	if code, body := do(t, c, "DELETE", "/v1/locks/job?owner=p1", ""); code != 200 {
		t.Errorf("release of the lock taken again: %d %s", code, body)
	}
}

// TestEmbeddedDataLost: the embedded etcd's data directory lost (a lost
// volume) while the state file next to the socket lives on: the restarted
// sidecar does not grant fences again from the start. It is not ready,
// and every acquire is answered 503 etcd_rewound, saying what happened and
// the revision bump to restore with.
func TestEmbeddedDataLost(t *testing.T) {
	dir, _ := os.MkdirTemp("", "baton-lost")
	defer os.RemoveAll(dir)
	sock, data := filepath.Join(dir, "a.sock"), filepath.Join(dir, "etcd")
	args := []string{"serve", "--socket", sock, "--data-dir", data, "--embedded-client-url", "http://127.0.0.1:0", "--health-addr", "", "--lease-ttl", "2s"}
	start := func(ready bool) (*exec.Cmd, *syncBuffer) {
		cmd := exec.Command(binary(t), args...)
		var out, errb syncBuffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		waitUntil(t, 30*time.Second, "the sidecar", func() bool {
			if ready {
				return strings.Contains(out.String(), "serving on")
			}
			_, err := os.Stat(sock)
			return err == nil
		})
		return cmd, &errb
	}
	cmd, _ := start(true)
	c := unixClient(sock)
	var fence int64
	for i := range 10 {
		code, body := do(t, c, "POST", "/v1/locks/job", fmt.Sprintf(`{"owner":"o%d"}`, i))
		if code != 200 {
			t.Fatalf("acquire: %d %s", code, body)
		}
		fmt.Sscanf(body[strings.Index(body, `"fence":`)+8:], "%d", &fence)
		do(t, c, "DELETE", fmt.Sprintf("/v1/locks/job?owner=o%d", i), "")
	}
	cmd.Process.Signal(syscall.SIGTERM)
	_ = cmd.Wait()
	if err := os.RemoveAll(data); err != nil {
		t.Fatal(err)
	}
	start(false)
	c = unixClient(sock)
	waitUntil(t, 30*time.Second, "etcd_rewound", func() bool {
		code, body := do(t, c, "POST", "/v1/locks/job", `{"owner":"after"}`)
		if code == 200 {
			t.Fatalf("granted after the data was lost (fence %d before): %s", fence, body)
		}
		return code == 503 && strings.Contains(body, `"code":"etcd_rewound"`) && strings.Contains(body, "--bump-revision")
	})
	if code, body := do(t, c, "GET", "/readyz", ""); code != 503 || !strings.Contains(body, "etcd went back in time") {
		t.Errorf("readyz: %d %s", code, body)
	}
}

// TestRestartDropsHoldsTheFileMissed: a hold stream's lock granted just
// before a crash, too late for the state file, is not taken for a plain
// lock by the restarted sidecar (its record in etcd says it is a hold's):
// its key is deleted, and its owner holds the lock again at once.
func TestRestartDropsHoldsTheFileMissed(t *testing.T) {
	dir, _ := os.MkdirTemp("", "baton-missed")
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "a.sock")
	a := startProc(t, sock, "missed-test", "--lease-ttl", "4s")
	if code, body := do(t, unixClient(sock), "POST", "/v1/locks/plain", `{"owner":"p1","ttl":"10m"}`); code != 200 {
		t.Fatalf("acquire: %d %s", code, body)
	}
	waitStateFile(t, sock+".state", `"plain"`)
	saved, err := os.ReadFile(sock + ".state")
	if err != nil {
		t.Fatal(err)
	}
	hold, err := baton.New(sock).Hold(context.Background(), "held", lockapi.Request{Owner: "h1"})
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := hold.Next(); err != nil || ev.Event != "granted" {
		t.Fatalf("hold: %v %v", ev, err)
	}
	a.cmd.Process.Signal(syscall.SIGKILL)
	<-a.exited
	hold.Close()
	if err := os.WriteFile(sock+".state", saved, 0o600); err != nil { // the crash came before the save
		t.Fatal(err)
	}
	startProc(t, sock, "missed-test", "--lease-ttl", "4s")
	c := unixClient(sock)
	waitStatus(t, c, "held", `"held":false`)
	again, err := baton.New(sock).Hold(context.Background(), "held", lockapi.Request{Owner: "h1"})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if ev, err := again.Next(); err != nil || ev.Event != "granted" {
		t.Fatalf("the hold's owner again: %v %v", ev, err)
	}
	if _, st := do(t, c, "GET", "/v1/locks/plain", ""); !strings.Contains(st, `"owner":"p1"`) {
		t.Errorf("the plain lock after the restart: %s", st)
	}
}
