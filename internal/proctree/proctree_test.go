package proctree

import (
	"os"
	"os/exec"
	"slices"
	"syscall"
	"testing"
	"time"
)

// start starts sh -c script as a child of the test process.
func start(t *testing.T, script string) *os.Process {
	t.Helper()
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal(err)
	}
	p, err := os.StartProcess(sh, []string{"sh", "-c", script}, &os.ProcAttr{Files: []*os.File{nil, os.Stdout, os.Stderr}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestStopReachesEveryDescendant: a daemon that left its parent's session
// and was reparented, a child that ignores SIGTERM, and the command itself
// are all stopped; Exited tells the command's status; nothing is left.
// (One test: the reaper makes the whole test process a subreaper.)
func TestStopReachesEveryDescendant(t *testing.T) {
	r, err := NewReaper()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()

	// The daemon forks twice into a session of its own, so its parent is
	// gone and it is reparented to the test process; the stubborn child
	// ignores SIGTERM.
	p := start(t, `(setsid sh -c 'sleep 300' & exit 0); sh -c "trap '' TERM; while :; do sleep 0.05; done" & sleep 300`)
	exited := r.Exited(p.Pid)
	waitFor(t, "four processes under the test", func() bool { return len(r.Live()) >= 4 })
	live := r.Live()
	if !slices.Contains(live, p.Pid) {
		t.Fatalf("live %v lacks the command %d", live, p.Pid)
	}

	began := time.Now()
	n, left := r.Stop(300 * time.Millisecond)
	took := time.Since(began)
	if n < 4 || len(left) != 0 {
		t.Errorf("signalled %d processes, want at least 4; %v left", n, left)
	}
	if left := r.Live(); len(left) != 0 {
		t.Errorf("left running: %v", left)
	}
	if took < 300*time.Millisecond {
		t.Errorf("stopped in %v: the stubborn child ignores SIGTERM, so SIGKILL had to wait for the grace", took)
	}
	for _, pid := range live {
		if err := syscall.Kill(pid, 0); err == nil {
			t.Errorf("process %d is still there", pid)
		}
	}
	select {
	case ws := <-exited:
		if !ws.Signaled() || ws.Signal() != syscall.SIGTERM || ExitCode(ws) != 128+15 {
			t.Errorf("the command's status %v; want killed by SIGTERM", ws)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the command's exit was not delivered")
	}

	// A command that exits on its own: its code comes through, and a
	// stop with nothing left signals nothing.
	q := start(t, "exit 7")
	if ws := <-r.Exited(q.Pid); ExitCode(ws) != 7 {
		t.Errorf("exit 7 came as %v", ws)
	}
	if n, _ := r.Stop(time.Second); n != 0 {
		t.Errorf("a stop with nothing running signalled %d", n)
	}
}

// TestStat reads a process whose name holds spaces and parentheses.
func TestStat(t *testing.T) {
	p, ok := stat(os.Getpid())
	if !ok || p.ppid != os.Getppid() || p.dead {
		t.Errorf("stat of the test process: %+v %v; want ppid %d", p, ok, os.Getppid())
	}
	dir := t.TempDir()
	name := dir + "/a b) (c"
	if err := os.Symlink("/bin/sleep", name); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(name, "5")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if p, ok := stat(cmd.Process.Pid); !ok || p.ppid != os.Getpid() {
		t.Errorf("stat of %q: %+v %v", name, p, ok)
	}
}
