package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/restart"
	"github.com/baton-dev/baton/internal/testing/etcdtest"
)

// TestRestartWhileOutOfSpace: a lock extended while etcd is out of space
// (the sidecar keeps the new deadline, etcd's record the one before), its
// sidecar SIGKILLed and restarted before etcd takes writes again. The
// restarted sidecar waits, not ready, and once the alarm is gone keeps
// the lock to the deadline its owner was told, the one of its state file,
// not the record's, which has passed meanwhile: no lock ends in silence
// before the deadline its owner heard.
func TestRestartWhileOutOfSpace(t *testing.T) {
	srv, err := etcdtest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	cli, _ := srv.Client(t)
	dir, _ := os.MkdirTemp("", "baton-nospace")
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock, scope := filepath.Join(dir, "a.sock"), "nospace-restart"
	args := []string{"--lease-ttl", "4s", "--request-timeout", "900ms"}
	a := startBinaryOn(t, binary(t), srv.Endpoints(), sock, scope, true, args...)
	c := unixClient(sock)
	code, body := do(t, c, "POST", "/v1/locks/job", `{"owner":"run-1","ttl":"3s"}`)
	if code != 200 {
		t.Fatalf("acquire: %d %s", code, body)
	}
	var granted struct {
		Fence     int64     `json:"fence"`
		ExpiresAt time.Time `json:"expires_at"`
	}
	json.Unmarshal([]byte(body), &granted)

	etcdtest.SetNoSpace(t, cli, true)
	code, body = do(t, c, "POST", "/v1/locks/job:extend", `{"owner":"run-1","ttl":"1m"}`)
	var extended struct {
		ExpiresAt time.Time `json:"expires_at"`
	}
	if json.Unmarshal([]byte(body), &extended); code != 200 || !extended.ExpiresAt.After(granted.ExpiresAt) {
		t.Fatalf("extend while out of space: %d %s", code, body)
	}
	// The state file has the new deadline.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		st, _ := restart.Read(sock + ".state")
		if len(st.Locks) == 1 && st.Locks[0].ExpiresAt.Equal(extended.ExpiresAt) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the state file has %+v, want the extended deadline %v", st.Locks, extended.ExpiresAt)
		}
	}
	a.cmd.Process.Signal(syscall.SIGKILL)
	<-a.exited
	a2 := startBinaryOn(t, binary(t), srv.Endpoints(), sock, scope, false, args...)
	// The record's deadline passes while etcd still refuses writes.
	time.Sleep(time.Until(granted.ExpiresAt) + time.Second)
	etcdtest.SetNoSpace(t, cli, false)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if strings.Contains(a2.stderr.String(), "lock kept across a restart") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the restarted sidecar did not take the lock over; stderr: %s", a2.stderr.String())
		}
	}
	time.Sleep(time.Second) // past its adoption: a deadline in the past would have ended it
	_, st := do(t, c, "GET", "/v1/locks/job", "")
	if !strings.Contains(st, `"held":true`) || !strings.Contains(st, fmt.Sprintf(`"fence":%d`, granted.Fence)) {
		t.Fatalf("the lock after the restart, past the record's deadline: %s; want it held with fence %d until %v", st, granted.Fence, extended.ExpiresAt)
	}
	if code, body := do(t, c, "DELETE", "/v1/locks/job?owner=run-1", ""); code != 200 {
		t.Fatalf("release by its owner after the restart: %d %s", code, body)
	}
}
