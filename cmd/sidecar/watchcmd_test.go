package main

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLocksWatch: `baton locks watch KEY` prints the lock's state, then
// its grants and releases as they happen; -o json prints the events.
func TestLocksWatch(t *testing.T) {
	dir, _ := os.MkdirTemp("", "baton-watch")
	defer os.RemoveAll(dir)
	sc := startProc(t, filepath.Join(dir, "s.sock"), "watch-test")
	c := unixClient(sc.socket)
	// A lock of this run's own: an earlier run's holder may hold its own.
	leader := fmt.Sprintf("leader-%d", time.Now().UnixNano())
	if code := post(t, c, "/v1/locks/"+leader, `{"owner":"replica-1"}`); code != 200 {
		t.Fatalf("acquire: %d", code)
	}
	var text, js syncBuffer
	for _, w := range []struct {
		out  *syncBuffer
		args []string
	}{{&text, nil}, {&js, []string{"-o", "json"}}} {
		cmd := exec.Command(binary(t), append([]string{"locks", "watch", leader, "--socket", sc.socket}, w.args...)...)
		cmd.Stdout, cmd.Stderr = w.out, w.out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	}
	waitUntil(t, 10*time.Second, "both watches synced", func() bool {
		return strings.Contains(text.String(), "synced") && strings.Contains(js.String(), `"event":"synced"`)
	})
	if !strings.Contains(text.String(), "state     "+leader+"  held by replica-1 (pod s.sock) fence ") {
		t.Errorf("state line:\n%s", text.String())
	}
	req, _ := http.NewRequest("DELETE", "http://baton/v1/locks/"+leader+"?owner=replica-1", nil)
	resp, err := c.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("release: %v %v", resp, err)
	}
	resp.Body.Close()
	if code := post(t, c, "/v1/locks/"+leader, `{"owner":"replica-2"}`); code != 200 {
		t.Fatalf("acquire: %d", code)
	}
	waitUntil(t, 10*time.Second, "the hand-over told", func() bool {
		return strings.Contains(text.String(), "granted   "+leader+"  replica-2 (pod s.sock)") &&
			strings.Contains(js.String(), `"event":"released"`) && strings.Contains(js.String(), `"owner":"replica-2"`)
	})
	if !strings.Contains(text.String(), "released  "+leader+"  replica-1 (pod s.sock) fence ") {
		t.Errorf("release line:\n%s", text.String())
	}
	cmd := exec.Command(binary(t), "locks", "watch", leader, "--prefix", "x", "--socket", sc.socket)
	if out, err := cmd.CombinedOutput(); exitOf(t, err) != 2 {
		t.Errorf("a key and a prefix: %s", out)
	}
}

// TestLocksWatchOutlivesTheSidecar: `baton locks watch` carries on across
// the sidecar's restart, as a watcher expects: it says so on stderr,
// connects again when a sidecar serves the socket again, reads the locks
// anew (marked resynced), shows free a lock that ended while it was away,
// and follows the changes after.
func TestLocksWatchOutlivesTheSidecar(t *testing.T) {
	dir, _ := os.MkdirTemp("", "baton-watch")
	defer os.RemoveAll(dir)
	sock, scope := filepath.Join(dir, "s.sock"), fmt.Sprintf("watch-restart-%d", time.Now().UnixNano())
	first := startProc(t, sock, scope)
	if code := post(t, unixClient(sock), "/v1/locks/obs/a", `{"owner":"replica-1","ttl":"10m"}`); code != 200 {
		t.Fatalf("acquire: %d", code)
	}
	var text, js, stderr syncBuffer
	for _, w := range []struct {
		out  *syncBuffer
		args []string
	}{{&text, nil}, {&js, []string{"-o", "json"}}} {
		cmd := exec.Command(binary(t), append([]string{"locks", "watch", "--prefix", "obs/", "--socket", sock}, w.args...)...)
		cmd.Stdout, cmd.Stderr = w.out, &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	}
	waitUntil(t, 10*time.Second, "both watches synced", func() bool {
		return strings.Contains(text.String(), "synced") && strings.Contains(js.String(), `"event":"synced"`)
	})

	// The sidecar dies; its lock goes with its lease while no sidecar
	// serves the socket, so no watch can tell it live.
	first.cmd.Process.Kill()
	<-first.exited
	cli, _ := testEtcd.Client(t)
	waitUntil(t, 10*time.Second, "the dead sidecar's lock gone from etcd", func() bool { return lockKeys(t, cli, scope) == 0 })
	if !strings.Contains(stderr.String(), "the watch ended") {
		t.Errorf("stderr %q: the end of the watch is not told", stderr.String())
	}

	startProc(t, sock, scope)
	waitUntil(t, 15*time.Second, "both watches back", func() bool {
		return strings.Count(stderr.String(), "watching again") == 2
	})
	waitUntil(t, 10*time.Second, "the lock shown free, as read anew", func() bool {
		return strings.Contains(text.String(), "state     obs/a  free, 0 waiting  (read again after a gap in the watch)") &&
			strings.Contains(js.String(), `{"event":"state","key":"obs/a","revision":`) && strings.Contains(js.String(), `"resynced":true`)
	})
	if code := post(t, unixClient(sock), "/v1/locks/obs/b", `{"owner":"replica-2"}`); code != 200 {
		t.Fatalf("acquire: %d", code)
	}
	waitUntil(t, 10*time.Second, "the next grant followed", func() bool {
		return strings.Contains(text.String(), "granted   obs/b  replica-2 (pod s.sock)") && strings.Contains(js.String(), `"owner":"replica-2"`)
	})
}
