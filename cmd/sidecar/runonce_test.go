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
