package server

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/baton-dev/baton/internal/coordinator"
)

// TestProcessOfACaller: a caller's process as /proc shows it, one that has
// exited, one whose pid another process took since, and one the sidecar
// cannot see.
func TestProcessOfACaller(t *testing.T) {
	p := newProcs("/proc")
	self := p.of(&coordinator.Caller{PID: int32(os.Getpid()), Since: time.Now()})
	if self == nil || self.PID != os.Getpid() || self.Exited || !strings.HasPrefix(self.Command, os.Args[0]) {
		t.Errorf("this process: %+v", self)
	}
	sleep := exec.Command("sleep", "0")
	if err := sleep.Run(); err != nil {
		t.Fatal(err)
	}
	if gone := p.of(&coordinator.Caller{PID: int32(sleep.Process.Pid), Since: time.Now()}); gone == nil || !gone.Exited || gone.Command != "" {
		t.Errorf("a process that exited: %+v", gone)
	}
	// A caller that asked an hour ago, before this process started, was
	// another process with its pid.
	if reused := p.of(&coordinator.Caller{PID: int32(os.Getpid()), Since: time.Now().Add(-time.Hour)}); reused == nil || !reused.Exited {
		t.Errorf("a pid taken by a process started after its caller asked: %+v", reused)
	}
	if unseen := p.of(&coordinator.Caller{PID: coordinator.NotVisible}); unseen == nil || unseen.Unseen == "" || unseen.PID != 0 {
		t.Errorf("a process not in the sidecar's namespace: %+v", unseen)
	}
	if none := p.of(&coordinator.Caller{}); none != nil {
		t.Errorf("a caller not known: %+v", none)
	}
	if p.of(nil) != nil {
		t.Error("no caller: a process")
	}
}

// TestCallerOfAConnection: the kernel's pid of a unix socket's peer, 0
// (not visible) as NotVisible, and none for another connection.
func TestCallerOfAConnection(t *testing.T) {
	ctx := context.Background()
	if got := callerOf(ctx); got != 0 {
		t.Errorf("no peer: caller %d", got)
	}
	if got := callerOf(context.WithValue(ctx, peerKey{}, Peer{PID: 42})); got != 42 {
		t.Errorf("peer 42: caller %d", got)
	}
	if got := callerOf(context.WithValue(ctx, peerKey{}, Peer{PID: 0})); got != coordinator.NotVisible {
		t.Errorf("peer pid 0: caller %d, want NotVisible", got)
	}
}

// TestStartOfAProcess: the start time is read after the command, whatever
// the command holds.
func TestStartOfAProcess(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "stat"), []byte("cpu 1 2 3\nbtime 1700000000\nprocesses 9\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	stat := "77 (a) b (c) S 1 77 77 0 -1 4194304 100 0 0 0 1 2 0 0 20 0 1 0 12345 1000 10 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0"
	boot, err := bootTime(root)
	if err != nil || !boot.Equal(time.Unix(1700000000, 0)) {
		t.Fatalf("boot time: %v, %v", boot, err)
	}
	got, err := startOf([]byte(stat), boot)
	if want := time.Unix(1700000000, 0).Add(123450 * time.Millisecond); err != nil || !got.Equal(want) {
		t.Errorf("start of %q: %v, %v; want %v", stat, got, err, want)
	}
	for _, bad := range []string{"77 (a S 1", "77 (a) S 1 2", "77 (a) S 1 77 77 0 -1 4194304 100 0 0 0 1 2 0 0 20 0 1 0 x 1000"} {
		if _, err := startOf([]byte(bad), boot); err == nil {
			t.Errorf("start of %q: no error", bad)
		}
	}
}

// TestProcessOfAZombieOrAnUnreadableProc: a process that exited and waits
// for its parent is gone; a /proc that does not tell is said so.
func TestProcessOfAZombieOrAnUnreadableProc(t *testing.T) {
	zombie := exec.Command("true")
	if err := zombie.Start(); err != nil {
		t.Fatal(err)
	}
	defer zombie.Wait()
	stat := filepath.Join("/proc", strconv.Itoa(zombie.Process.Pid), "stat")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if b, err := os.ReadFile(stat); err == nil && strings.Contains(string(b), ") Z ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("true never turned a zombie")
		}
	}
	p := newProcs("/proc")
	if got := p.of(&coordinator.Caller{PID: int32(zombie.Process.Pid), Since: time.Now()}); got == nil || !got.Exited {
		t.Errorf("a zombie: %+v, want exited", got)
	}
	root := t.TempDir() // a /proc without its boot time
	if err := os.MkdirAll(filepath.Join(root, "7"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "7", "stat"), []byte("7 (x) S 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 100 1000 10"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "stat"), []byte("cpu 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := newProcs(root).of(&coordinator.Caller{PID: 7, Since: time.Now()}); got == nil || got.Exited || !strings.Contains(got.Unseen, "btime") {
		t.Errorf("a /proc without btime: %+v, want unseen, saying so", got)
	}
}

// TestClipText: a long command is cut within its bound, never inside a
// character.
func TestClipText(t *testing.T) {
	if got := clipText("short", 10); got != "short" {
		t.Errorf("clip of a short text: %q", got)
	}
	for n := 8; n < 16; n++ {
		got := clipText(strings.Repeat("é", 20), n)
		if len(got) > n || !utf8.ValidString(got) || !strings.HasSuffix(got, "...") {
			t.Errorf("clip to %d: %q", n, got)
		}
	}
}
