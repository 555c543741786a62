package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRunOnceCommand: `baton run --once KEY` runs a command once: a later
// run does not run it and exits 0 saying who ran it and its result; a
// failed run is run again, unless --if-failed skip.
func TestRunOnceCommand(t *testing.T) {
	dir, _ := os.MkdirTemp("", "baton-once")
	defer os.RemoveAll(dir)
	sc := startProc(t, filepath.Join(dir, "s.sock"), "once-test")
	runOnce := func(args ...string) (int, string, string) {
		t.Helper()
		cmd, out, errb := batonRun(t, sc.socket, args...)
		return exitOf(t, cmd.Run()), out.String(), errb.String()
	}
	// Run-once records outlive the sidecar: keys of this run's own.
	run := fmt.Sprint(time.Now().UnixNano())
	mig, backfill := "migrate/v42-"+run, "backfill-"+run
	migrate := []string{"--once", mig, "--owner", "deploy-1", "--", "sh", "-c", `echo ran; echo "schema v42" > "$BATON_RESULT_FILE"`}
	if code, out, errs := runOnce(migrate...); code != 0 || !strings.Contains(out, "ran") || !strings.Contains(errs, mig+" succeeded") {
		t.Fatalf("first run: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	code, out, errs := runOnce("--once", mig, "--", "sh", "-c", "echo ran")
	if code != 0 || strings.Contains(out, "ran") || !strings.Contains(errs, "already done: deploy-1 (pod s.sock) ran it") || !strings.Contains(errs, `result "schema v42\n"`) {
		t.Errorf("second run: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if code, out, _ := runOnce("--once", mig, "--if-done", "rerun", "--", "sh", "-c", "echo ran"); code != 0 || !strings.Contains(out, "ran") {
		t.Errorf("--if-done rerun: exit %d, stdout %q", code, out)
	}

	if code, _, errs := runOnce("--once", backfill, "--", "sh", "-c", "exit 3"); code != 3 || !strings.Contains(errs, backfill+" failed") {
		t.Errorf("a failing run: exit %d, stderr %q", code, errs)
	}
	if code, out, errs := runOnce("--once", backfill, "--if-failed", "skip", "--", "sh", "-c", "echo ran"); code != 1 || strings.Contains(out, "ran") || !strings.Contains(errs, `already failed`) {
		t.Errorf("--if-failed skip after a failure: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if code, out, _ := runOnce("--once", backfill, "--", "sh", "-c", "echo ran"); code != 0 || !strings.Contains(out, "ran") {
		t.Errorf("a retry after a failure: exit %d, stdout %q", code, out)
	}
	for _, args := range [][]string{
		{"--once", "k", "--key", "k"}, {"--once", "k", "--if-done", "never"}, {"--key", "k", "--if-failed", "skip"}, {"--once", "k", "--limit", "2"},
	} {
		if code, _, errs := runOnce(append(args, "--", "true")...); code != 2 {
			t.Errorf("%v: exit %d, want 2: %s", args, code, errs)
		}
	}
}

// TestRunWithLockDelay: `baton run --lock-delay` holds the lock with a lock
// delay; the command exiting releases it cleanly, so the next run starts
// at once; a bad delay is a usage error.
func TestRunWithLockDelay(t *testing.T) {
	dir, _ := os.MkdirTemp("", "baton-delay")
	defer os.RemoveAll(dir)
	sc := startProc(t, filepath.Join(dir, "s.sock"), "delay-test")
	for range 2 {
		cmd, out, errb := batonRun(t, sc.socket, "--key", "payments/batch", "--lock-delay", "30s", "--", "sh", "-c", "echo ran")
		if code := exitOf(t, cmd.Run()); code != 0 || !strings.Contains(out.String(), "ran") {
			t.Fatalf("exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
		}
	}
	for _, d := range []string{"-1s", "2h"} {
		cmd, _, errb := batonRun(t, sc.socket, "--key", "payments/batch", "--lock-delay", d, "--", "true")
		if code := exitOf(t, cmd.Run()); code != 2 {
			t.Errorf("--lock-delay %s: exit %d, want 2: %s", d, code, errb.String())
		}
	}
}

// TestRunOnceSharedOwner: two replicas that run one step once with the
// same owner (configured alike): while the first runs, the second is
// refused as already running (exit 75), not as a bad command line; one
// that waits is then told the step is done (exit 0), and never runs it.
func TestRunOnceSharedOwner(t *testing.T) {
	dir, _ := os.MkdirTemp("", "baton-once-owner")
	defer os.RemoveAll(dir)
	sc := startProc(t, filepath.Join(dir, "s.sock"), "once-owner-test")
	key := fmt.Sprint("migrate/v43-", time.Now().UnixNano())
	first, fout, ferr := batonRun(t, sc.socket, "--once", key, "--owner", "deploy-1", "--", "sh", "-c", "echo started; sleep 1; echo ran")
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "the first replica", func() bool { return strings.Contains(fout.String(), "started") })
	cmd, out, errb := batonRun(t, sc.socket, "--once", key, "--owner", "deploy-1", "--", "echo", "second ran")
	if code := exitOf(t, cmd.Run()); code != exitHeld || strings.Contains(out.String(), "second ran") || !strings.Contains(errb.String(), "already running: held by deploy-1") {
		t.Errorf("the second replica: exit %d, stdout %q, stderr %q; want 75 naming the first", code, out.String(), errb.String())
	}
	waiter, wout, werr := batonRun(t, sc.socket, "--once", key, "--owner", "deploy-1", "--wait", "30s", "--", "echo", "waiter ran")
	if code := exitOf(t, waiter.Run()); code != 0 || strings.Contains(wout.String(), "waiter ran") || !strings.Contains(werr.String(), "already done") {
		t.Errorf("a replica that waited: exit %d, stdout %q, stderr %q; want 0, already done", code, wout.String(), werr.String())
	}
	if code := exitOf(t, first.Wait()); code != 0 || !strings.Contains(fout.String(), "ran") {
		t.Errorf("the first replica: exit %d, stdout %q, stderr %q", code, fout.String(), ferr.String())
	}
}
