package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// batonRun starts `baton run` against socket and returns it unstarted.
func batonRun(t *testing.T, socket string, args ...string) (*exec.Cmd, *syncBuffer, *syncBuffer) {
	t.Helper()
	cmd := exec.Command(binary(t), append([]string{"run", "--socket", socket}, args...)...)
	var out, errb syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	return cmd, &out, &errb
}

func exitOf(t *testing.T, err error) int {
	t.Helper()
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("not an exit: %v", err)
	}
	return ee.ExitCode()
}

func TestRunCommandUnderLock(t *testing.T) {
	dir, _ := os.MkdirTemp("", "baton-run")
	defer os.RemoveAll(dir)
	// A scope of its own each run: the lock delay that a lock of a run
	// leaves behind holds the next run's (go test -count=2) back.
	sc := startProc(t, filepath.Join(dir, "s.sock"), "run-test-"+strconv.FormatInt(time.Now().UnixNano(), 36))
	c := unixClient(sc.socket)

	t.Run("runs with the lock and exits with the command's code", func(t *testing.T) {
		cmd, out, errb := batonRun(t, sc.socket, "--key", "flow-1/plan", "--owner", "exec-9", "--",
			"sh", "-c", `echo "key=$BATON_KEY owner=$BATON_OWNER fence=$BATON_FENCE"; exit 3`)
		if code := exitOf(t, cmd.Run()); code != 3 {
			t.Fatalf("exit %d, want the command's 3; stderr: %s", code, errb.String())
		}
		if !strings.Contains(out.String(), "key=flow-1/plan owner=exec-9 fence=") || strings.Contains(out.String(), "fence=\n") {
			t.Errorf("command saw %q", out.String())
		}
		if code := post(t, c, "/v1/locks/flow-1/plan", `{"owner":"next"}`); code != 200 {
			t.Errorf("lock not free after the command: %d", code)
		}
	})

	t.Run("does not run the command when someone else holds the lock", func(t *testing.T) {
		cmd, out, errb := batonRun(t, sc.socket, "--key", "flow-1/plan", "--", "sh", "-c", "echo ran")
		if code := exitOf(t, cmd.Run()); code != exitHeld {
			t.Fatalf("exit %d, want %d", code, exitHeld)
		}
		if strings.Contains(out.String(), "ran") {
			t.Error("the command ran")
		}
		if !strings.Contains(errb.String(), "already running: held by next (pod s.sock) since ") {
			t.Errorf("stderr %q", errb.String())
		}
	})

	t.Run("gives up when the wait runs out", func(t *testing.T) {
		cmd, out, errb := batonRun(t, sc.socket, "--key", "flow-1/plan", "--wait", "300ms", "--", "sh", "-c", "echo ran")
		if code := exitOf(t, cmd.Run()); code != exitHeld {
			t.Fatalf("exit %d, want %d; stderr %s", code, exitHeld, errb.String())
		}
		if strings.Contains(out.String(), "ran") || !strings.Contains(errb.String(), "the wait ran out after 300ms (wait_timeout): held by next (pod s.sock)") {
			t.Errorf("stdout %q stderr %q", out.String(), errb.String())
		}
	})

	t.Run("waits its turn", func(t *testing.T) {
		cmd, out, errb := batonRun(t, sc.socket, "--key", "flow-1/plan", "--wait", "20s", "--", "sh", "-c", "echo ran")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Released only once baton run says it waits: a release before its
		// own acquire (a busy machine starts it slowly) would leave it
		// nobody to wait behind.
		waitUntil(t, 10*time.Second, "baton run waiting", func() bool { return strings.Contains(errb.String(), "1 ahead") })
		if code, body := do(t, c, "DELETE", "/v1/locks/flow-1/plan?owner=next", ""); code != 200 {
			t.Fatalf("release: %d %s", code, body)
		}
		if code := exitOf(t, cmd.Wait()); code != 0 || !strings.Contains(out.String(), "ran") {
			t.Fatalf("exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
		}
	})

	t.Run("keeps the lock while the command runs, past its ttl", func(t *testing.T) {
		// A 20-minute job under a 5-minute ttl, in short: 5.5 windows.
		cmd, _, errb := batonRun(t, sc.socket, "--key", "long", "--owner", "job-1", "--ttl", "1s", "--", "sleep", "5.5")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		ended := func(err error, refused string) {
			t.Helper()
			if code := exitOf(t, err); code != 0 {
				t.Fatalf("exit %d, want 0; stderr %s", code, errb.String())
			}
			if refused != "" {
				_, status := do(t, c, "GET", "/v1/locks/long", "")
				t.Errorf("lock not free after the command: %s; its status %s; baton run's stderr %q", refused, status, errb.String())
			}
			for _, owner := range []string{"after", "intruder"} { // whichever got it
				do(t, c, "DELETE", "/v1/locks/long?owner="+owner, "")
			}
		}
		// The intruder tries only once the command holds the lock: a try
		// before baton run's own (a busy machine starts it slowly) would
		// take the lock from under it.
		waitUntil(t, 10*time.Second, "baton run holds the lock", func() bool {
			_, body := do(t, c, "GET", "/v1/locks/long", "")
			return strings.Contains(body, `"owner":"job-1"`)
		})
		// The lock must be seen held past three of its ttl windows: how
		// often it is seen depends on how busy the machine is.
		held, heldAt := 0, time.Duration(0)
		for {
			select {
			case err := <-exited:
				if heldAt < 3*time.Second {
					t.Fatalf("the lock was last seen held %v after the start (%d times), not past three 1s ttl windows", heldAt.Round(time.Millisecond), held)
				}
				refused := ""
				if code, body := do(t, c, "POST", "/v1/locks/long", `{"owner":"after"}`); code != 200 {
					refused = fmt.Sprintf("%d %s", code, body)
				}
				ended(err, refused)
				return
			case <-time.After(200 * time.Millisecond):
			}
			switch code := post(t, c, "/v1/locks/long", `{"owner":"intruder"}`); {
			case code == 409:
				held, heldAt = held+1, time.Since(start)
			case code == 200 && held > 0:
				// Granted: only once the command ended and released it,
				// between that release and baton run's exit.
				select {
				case err := <-exited:
					ended(err, "")
					return
				case <-time.After(5 * time.Second):
					t.Fatalf("granted to another caller while the command runs; stderr %s", errb.String())
				}
			case strings.Contains(errb.String(), "baton:"):
				t.Fatalf("try while the command runs: %d; stderr %s", code, errb.String())
			}
			// not granted to the command yet
		}
	})

	t.Run("stops the command at --max-hold", func(t *testing.T) {
		cmd, out, errb := batonRun(t, sc.socket, "--key", "short", "--ttl", "1s", "--max-hold", "1500ms", "--kill-grace", "5s", "--",
			"sh", "-c", `trap 'echo got TERM; exit 9' TERM; while :; do sleep 0.05; done`)
		start := time.Now()
		code := exitOf(t, cmd.Run())
		if code != exitLost {
			t.Fatalf("exit %d, want %d; stderr %s", code, exitLost, errb.String())
		}
		if !strings.Contains(out.String(), "got TERM") || !strings.Contains(errb.String(), "lost") || !strings.Contains(errb.String(), "max_hold") {
			t.Errorf("stdout %q stderr %q", out.String(), errb.String())
		}
		if took := time.Since(start); took < 1500*time.Millisecond {
			t.Errorf("stopped %v after start, before its max hold", took)
		}
	})

	t.Run("kills a command that ignores SIGTERM after the grace", func(t *testing.T) {
		cmd, _, errb := batonRun(t, sc.socket, "--key", "stubborn", "--max-hold", "1s", "--kill-grace", "200ms", "--",
			"sh", "-c", `trap '' TERM; while :; do sleep 0.05; done`)
		if code := exitOf(t, cmd.Run()); code != exitLost {
			t.Fatalf("exit %d, want %d; stderr %s", code, exitLost, errb.String())
		}
	})

	t.Run("forwards SIGTERM and releases", func(t *testing.T) {
		cmd, out, _ := batonRun(t, sc.socket, "--key", "fwd", "--", "sh", "-c", `trap 'echo got TERM; exit 4' TERM; echo started; while :; do sleep 0.05; done`)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(out.String(), "started") && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		cmd.Process.Signal(syscall.SIGTERM)
		if code := exitOf(t, cmd.Wait()); code != 4 || !strings.Contains(out.String(), "got TERM") {
			t.Fatalf("exit %d, stdout %q", code, out.String())
		}
		if code := post(t, c, "/v1/locks/fwd", `{"owner":"after"}`); code != 200 {
			t.Errorf("lock not free after the forwarded signal: %d", code)
		}
	})

	t.Run("bad usage", func(t *testing.T) {
		for _, args := range [][]string{{"--key", "a b", "--", "true"}, {"--key", "k", "true"}, {"--", "true"},
			{"--key", "k", "--ttl", "0", "--", "true"}, {"--key", "k", "--max-hold", "0s", "--", "true"}, {"--key", "k", "--max-hold", "-1s", "--", "true"},
			{"--key", "k", "--max-hold", "100h", "--", "true"}} {
			cmd, _, errb := batonRun(t, sc.socket, args...)
			if code := exitOf(t, cmd.Run()); code != 2 {
				t.Errorf("%v: exit %d, want 2; stderr %s", args, code, errb.String())
			}
		}
	})

	t.Run("no sidecar", func(t *testing.T) {
		cmd, _, errb := batonRun(t, filepath.Join(dir, "none.sock"), "--key", "k", "--", "true")
		if code := exitOf(t, cmd.Run()); code != exitUnavailable || !strings.Contains(errb.String(), "cannot reach") {
			t.Errorf("exit %d, stderr %s", code, errb.String())
		}
	})
}

// TestRunDurationsTakeSeconds: baton run's durations take a number of
// seconds, as the API's do (--wait 5), besides Go's durations; anything
// else is a usage error naming both forms.
func TestRunDurationsTakeSeconds(t *testing.T) {
	for _, c := range []struct {
		flag, value string
		want        time.Duration
	}{
		{"wait", "5", 5 * time.Second}, {"wait", "0.5", 500 * time.Millisecond}, {"wait", "1m", time.Minute},
		{"wait", "forever", waitForever}, {"ttl", "90", 90 * time.Second}, {"max-hold", "3600", time.Hour},
		{"kill-grace", "2", 2 * time.Second}, {"lock-delay", "1.5s", 1500 * time.Millisecond},
		{"ttl", "1.005", 1005 * time.Millisecond}, {"ttl", "9223372036", 9223372036 * time.Second},
	} {
		tree := newRootCmd(context.Background(), env(nil), io.Discard, io.Discard, nil)
		cmd, _, _ := tree.Find([]string{"run"})
		if err := cmd.ParseFlags([]string{"--" + c.flag, c.value}); err != nil {
			t.Errorf("--%s %s: %v", c.flag, c.value, err)
			continue
		}
		var got time.Duration
		switch v := cmd.Flags().Lookup(c.flag).Value.(type) {
		case *waitValue:
			got = time.Duration(*v)
		case *secondsValue:
			got = time.Duration(*v)
		}
		if got != c.want {
			t.Errorf("--%s %s = %v; want %v", c.flag, c.value, got, c.want)
		}
	}
	for _, bad := range []string{"soon", "5x", "NaN", "1e300", "9223372036.854776", "-9223372036.854776"} {
		var errb bytes.Buffer
		code := run(context.Background(), []string{"run", "--key", "k", "--wait", bad, "--", "true"}, env(nil), io.Discard, &errb)
		if code != 2 || !strings.Contains(errb.String(), "30 for seconds") {
			t.Errorf("--wait %s: exit %d, %q; want 2 and the forms it takes", bad, code, errb.String())
		}
	}
}
