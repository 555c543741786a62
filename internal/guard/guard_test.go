package guard_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/guard"
)

// The test binary is its own guard: Start runs it again with
// BATON_GUARD_TEST set, and then it runs guard.Run on the arguments after
// "--" instead of the tests, as `baton run-guard` does.
func TestMain(m *testing.M) {
	if grace := os.Getenv("BATON_GUARD_TEST"); grace != "" {
		d, err := time.ParseDuration(grace)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		i := slices.Index(os.Args, "--")
		code, err := guard.Run(os.Args[i+1:], d, os.Stderr)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		os.Exit(code)
	}
	os.Exit(m.Run())
}

const grace = 300 * time.Millisecond

// start starts sh -c script through a guard, its output in out.
func start(t *testing.T, script string, out *bytes.Buffer) *guard.Tree {
	t.Helper()
	env := append(os.Environ(), "BATON_GUARD_TEST="+grace.String())
	stdout, stderr := guard.LockedWriters(out, out) // one buffer, two copies into it
	tree, err := guard.Start([]string{os.Args[0], "--"}, []string{"sh", "-c", script}, env, grace, nil, stdout, stderr)
	if err != nil {
		t.Fatal(err)
	}
	return tree
}

// wait is tree.Wait, failing the test past d.
func wait(t *testing.T, tree *guard.Tree, d time.Duration) guard.Ending {
	t.Helper()
	done := make(chan guard.Ending, 1)
	go func() { done <- tree.Wait() }()
	select {
	case e := <-done:
		return e
	case <-time.After(d):
		t.Fatalf("the tree did not end within %v", d)
		return guard.Ending{}
	}
}

// pidIn reads the pid a script wrote to path, waiting for it.
func pidIn(t *testing.T, path string) int {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		b, err := os.ReadFile(path)
		if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && perr == nil && pid > 0 {
			return pid
		}
	}
	t.Fatalf("no pid in %s", path)
	return 0
}

// gone reports whether no process has pid: neither running nor a zombie
// waiting to be reaped.
func gone(pid int) bool {
	_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
	return errors.Is(err, os.ErrNotExist) || syscall.Kill(pid, 0) == syscall.ESRCH
}

// TestLeftoversStopped: a command that exits leaving a process running
// (a worker started in the background) ends with its exit code, and that
// process is gone by then, reaped.
func TestLeftoversStopped(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	var out bytes.Buffer
	tree := start(t, fmt.Sprintf("sleep 300 & echo $! > %s; exit 3", pidFile), &out)
	e := wait(t, tree, 10*time.Second)
	worker := pidIn(t, pidFile)
	if e.Code != 3 || len(e.Left) != 0 || e.Died != "" {
		t.Errorf("ending %+v; want code 3, nothing left, the guard fine", e)
	}
	if !gone(worker) {
		t.Errorf("the worker (pid %d) outlived the command's tree", worker)
	}
	if !strings.Contains(out.String(), "left 1 process(es) running; they were stopped") {
		t.Errorf("the guard did not say it stopped a process: %q", out.String())
	}
}

// TestStopEndsTheTree: told to stop, the guard ends every process of the
// command's, SIGKILL after the grace for one that ignores SIGTERM, and the
// tree ends soon after the grace.
func TestStopEndsTheTree(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	var out bytes.Buffer
	tree := start(t, fmt.Sprintf(`trap "" TERM; sleep 300 & echo $! > %s; wait`, pidFile), &out)
	worker := pidIn(t, pidFile)
	stopped := time.Now()
	tree.Stop()
	e := wait(t, tree, 10*time.Second)
	if took := time.Since(stopped); took < grace/2 {
		t.Errorf("stopped in %v: a shell ignoring SIGTERM was not given the grace (%v)", took, grace)
	}
	if e.Code == 0 || len(e.Left) != 0 {
		t.Errorf("ending %+v; want a code of a killed command, nothing left", e)
	}
	if !gone(worker) {
		t.Errorf("the worker (pid %d) outlived the stop", worker)
	}
}

// TestForwardedSignal: a signal passed on reaches the command, which
// decides how it ends.
func TestForwardedSignal(t *testing.T) {
	ready := filepath.Join(t.TempDir(), "ready")
	var out bytes.Buffer
	tree := start(t, fmt.Sprintf(`trap "exit 42" TERM; echo $$ > %s; while :; do sleep 0.05; done`, ready), &out)
	pidIn(t, ready) // the trap is set
	tree.Forward(syscall.SIGTERM)
	if e := wait(t, tree, 10*time.Second); e.Code != 42 {
		t.Errorf("ending %+v; want the command's own exit 42 on SIGTERM", e)
	}
}

// TestGuardKilled: when the guard dies, the kernel kills the command (its
// parent-death signal), whatever the command left is stopped from here,
// and the ending says what happened to the guard.
func TestGuardKilled(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	var out bytes.Buffer
	tree := start(t, fmt.Sprintf(`sleep 300 & echo $! > %s; wait`, pidFile), &out)
	worker := pidIn(t, pidFile)
	tree.Kill()
	e := wait(t, tree, 10*time.Second)
	if !strings.Contains(e.Died, "the guard of the command") || len(e.Left) != 0 {
		t.Errorf("ending %+v; want the guard's death told, nothing left", e)
	}
	if !gone(worker) {
		t.Errorf("the worker (pid %d) outlived the guard", worker)
	}
}

// TestMissingCommand: a command not in PATH fails Start, naming the PATH
// searched, and nothing runs.
func TestMissingCommand(t *testing.T) {
	env := append(os.Environ(), "BATON_GUARD_TEST="+grace.String())
	_, err := guard.Start([]string{os.Args[0], "--"}, []string{"no-such-command-of-baton"}, env, grace, nil, nil, nil)
	if err == nil || !strings.Contains(err.Error(), `"no-such-command-of-baton" is not in PATH`) {
		t.Fatalf("Start: %v; want the command named as not in PATH", err)
	}
}

// TestNotFound: a command not in PATH is named with the PATH searched;
// run from Baton's image, which has no shell, the message says where baton
// run works instead.
func TestNotFound(t *testing.T) {
	if err := guard.NotFound("sh", "/usr/bin", "/usr/local/bin/baton"); err.Error() != `"sh" is not in PATH (/usr/bin)` {
		t.Errorf("elsewhere: %v", err)
	}
	if err := guard.NotFound("sh", "/usr/bin", "/baton"); !strings.Contains(err.Error(), "Baton's image has no shell") || !strings.Contains(err.Error(), "baton install") {
		t.Errorf("in Baton's image: %v", err)
	}
}
