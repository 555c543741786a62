package main

import (
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// writer is a script that starts a grandchild of baton run in a session
// of its own (as a daemon would), which appends "<unix nanos> <fence>" to
// file every 20ms and its pid to file.pid; the script itself then sleeps
// for its argument, or exits at once with "exit".
func writer(file string) string {
	return `#!/bin/sh
setsid sh -c 'echo $$ > ` + file + `.pid; while :; do echo "$(date +%s%N) $BATON_FENCE" >> ` + file + `; sleep 0.02; done' &
if [ "$1" = exit ]; then sleep 0.3; exit 0; fi
exec sleep "$1"`
}

// lastWrite reads the time of the last line of a writer's file.
func lastWrite(t *testing.T, file string) time.Time {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	f := strings.Fields(lines[len(lines)-1])
	ns, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		t.Fatalf("last line %q: %v", lines[len(lines)-1], err)
	}
	return time.Unix(0, ns)
}

// gone reports whether the writer whose pid is in file.pid is gone.
func gone(t *testing.T, file string) bool {
	t.Helper()
	b, err := os.ReadFile(file + ".pid")
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid > 0 && syscall.Kill(pid, 0) != nil
}

// grantAfter waits on another connection for key and returns when it was
// granted; claim is more of the request's fields (a semaphore's).
func grantAfter(t *testing.T, c *http.Client, key string, claim ...string) (time.Time, func()) {
	t.Helper()
	code, body := do(t, c, "POST", "/v1/locks/"+key, `{"owner":"next","wait":"30s"`+strings.Join(claim, "")+`}`)
	at := time.Now()
	if code != 200 {
		t.Fatalf("the next caller: %d %s", code, body)
	}
	return at, func() { do(t, c, "DELETE", "/v1/locks/"+key+"?owner=next", "") }
}

// TestRunStopsEveryProcess: no process that baton run's command started
// outlives the lock, and none writes after the next holder is granted it:
// a grandchild in a session of its own is stopped when the command exits,
// at --max-hold, and when baton run is SIGKILLed (its guard stops it, and
// the lock is held back by its lock delay meanwhile).
func TestRunStopsEveryProcess(t *testing.T) {
	dir, _ := os.MkdirTemp("", "baton-tree")
	defer os.RemoveAll(dir)
	sc := startProc(t, filepath.Join(dir, "s.sock"), "tree-test")
	c := unixClient(sc.socket)
	script := filepath.Join(dir, "w.sh")
	out := func(name string) string { return filepath.Join(dir, name) }

	t.Run("what the command leaves running is stopped before the release", func(t *testing.T) {
		if err := os.WriteFile(script, []byte(writer(out("exit"))), 0o755); err != nil {
			t.Fatal(err)
		}
		cmd, _, errb := batonRun(t, sc.socket, "--key", "tree/exit", "--", script, "exit")
		if code := exitOf(t, cmd.Run()); code != 0 {
			t.Fatalf("exit %d; stderr %s", code, errb.String())
		}
		if !gone(t, out("exit")) || !strings.Contains(errb.String(), "process(es) running; they were stopped") {
			t.Errorf("the daemon outlived the run; stderr %s", errb.String())
		}
		granted, release := grantAfter(t, c, "tree/exit")
		defer release()
		if last := lastWrite(t, out("exit")); !last.Before(granted) {
			t.Errorf("a write at %v, after the next grant at %v", last, granted)
		}
	})

	t.Run("at --max-hold every process is stopped before the next grant", func(t *testing.T) {
		if err := os.WriteFile(script, []byte(writer(out("max"))), 0o755); err != nil {
			t.Fatal(err)
		}
		// A max hold of 3s: on a busy machine the daemon's first write can
		// come a second or more after the command starts.
		cmd, _, errb := batonRun(t, sc.socket, "--key", "tree/max", "--max-hold", "3s", "--kill-grace", "300ms", "--", script, "60")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Queued once baton run holds the lock (its command runs), not
		// after a time a loaded machine may outlast.
		firstWrite(t, out("max"), errb)
		granted, release := grantAfter(t, c, "tree/max")
		defer release()
		if code := exitOf(t, cmd.Wait()); code != exitLost || !strings.Contains(errb.String(), "max_hold") {
			t.Fatalf("exit %d, want %d; stderr %s", code, exitLost, errb.String())
		}
		if !gone(t, out("max")) {
			t.Error("the grandchild outlived the lock")
		}
		if last := lastWrite(t, out("max")); !last.Before(granted) {
			t.Errorf("a write at %v, after the next grant at %v", last, granted)
		}
	})

	// A semaphore's unit has no lock delay: the guard keeps the hold's
	// connection, so the unit is let go only once the processes are gone;
	// and its command is stopped before --max-hold, which lets it go.
	t.Run("a semaphore's unit outlives its processes, kill -9 and max-hold", func(t *testing.T) {
		if err := os.WriteFile(script, []byte(writer(out("sem"))), 0o755); err != nil {
			t.Fatal(err)
		}
		for _, how := range []string{"kill", "max-hold"} {
			os.Remove(out("sem"))
			args := []string{"--key", "tree/sem-" + how, "--limit", "2", "--weight", "2", "--kill-grace", "500ms"}
			if how == "max-hold" {
				args = append(args, "--max-hold", "2s")
			}
			cmd, _, errb := batonRun(t, sc.socket, append(args, "--", "sh", "-c", `trap '' TERM; `+script+` 60`)...)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			firstWrite(t, out("sem"), errb)
			next := make(chan time.Time, 1)
			go func() {
				at, release := grantAfter(t, c, "tree/sem-"+how, `,"limit":2,"weight":2`)
				release()
				next <- at
			}()
			time.Sleep(200 * time.Millisecond)
			if how == "kill" {
				_ = cmd.Process.Kill()
			}
			_ = cmd.Wait()
			granted := <-next
			if !gone(t, out("sem")) {
				t.Errorf("%s: the grandchild outlived baton run; stderr %s", how, errb.String())
			}
			if last := lastWrite(t, out("sem")); !last.Before(granted) {
				t.Errorf("%s: a write at %v, after the next grant at %v", how, last, granted)
			}
		}
	})

	t.Run("kill -9 of baton run stops its processes before the next grant", func(t *testing.T) {
		if err := os.WriteFile(script, []byte(writer(out("kill"))), 0o755); err != nil {
			t.Fatal(err)
		}
		cmd, _, errb := batonRun(t, sc.socket, "--key", "tree/kill", "--kill-grace", "500ms", "--", "sh", "-c", `trap '' TERM; `+script+` 60`)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		firstWrite(t, out("kill"), errb)
		next := make(chan time.Time, 1)
		go func() {
			at, release := grantAfter(t, c, "tree/kill")
			release()
			next <- at
		}()
		time.Sleep(200 * time.Millisecond)
		killed := time.Now()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		granted := <-next
		if !gone(t, out("kill")) {
			t.Errorf("the grandchild outlived baton run; stderr %s", errb.String())
		}
		if last := lastWrite(t, out("kill")); !last.Before(granted) {
			t.Errorf("a write at %v, after the next grant at %v", last, granted)
		}
		if d := granted.Sub(killed); d < 1500*time.Millisecond {
			t.Errorf("granted %v after baton run was killed, within its lock delay (kill grace + 1s)", d)
		}
	})
}

// TestRunNested: what a run exports (BATON_KEY, BATON_OWNER) is never read
// back as a nested run's flags: the inner run takes a lock of its own, and
// its end leaves the outer run's lock held.
func TestRunNested(t *testing.T) {
	dir, _ := os.MkdirTemp("", "baton-nested")
	defer os.RemoveAll(dir)
	sc := startProc(t, filepath.Join(dir, "s.sock"), "nested-test")
	c := unixClient(sc.socket)
	self := binary(t)

	cmd, out, errb := batonRun(t, sc.socket, "--key", "outer", "--owner", "o1", "--",
		self, "run", "--key", "inner", "--", "sh", "-c", `echo "inner $BATON_KEY $BATON_OWNER"`)
	if code := exitOf(t, cmd.Run()); code != 0 {
		t.Fatalf("exit %d; stderr %s", code, errb.String())
	}
	if got := out.String(); !strings.HasPrefix(got, "inner inner exec-") {
		t.Errorf("the inner command saw %q; want key inner and an owner of its own", got)
	}

	// The inner run ends while the outer command goes on: the outer lock
	// stays held.
	cmd, _, errb = batonRun(t, sc.socket, "--key", "outer", "--owner", "o1", "--",
		"sh", "-c", self+` run --key inner -- true && curl -s --unix-socket `+sc.socket+` http://baton/v1/locks/outer`)
	cmd.Stdout = nil
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v; stderr %s", err, errb.String())
	}
	if !strings.Contains(string(b), `"held":true`) || !strings.Contains(string(b), `"owner":"o1"`) {
		t.Errorf("the outer lock after the inner run: %s", b)
	}

	// Without --key, a nested run says so rather than taking the outer's.
	cmd, _, errb = batonRun(t, sc.socket, "--key", "outer", "--", self, "run", "--", "true")
	if code := exitOf(t, cmd.Run()); code != 2 || !strings.Contains(errb.String(), "--key") {
		t.Errorf("a nested run without --key: exit %d; stderr %s", code, errb.String())
	}
	if code := post(t, c, "/v1/locks/outer", `{"owner":"after"}`); code != 200 {
		t.Errorf("outer not free after the runs: %d", code)
	}
}

// TestRunWaitsForever: --wait forever waits as long as it takes (past the
// sidecar's --max-wait); a second run of the same owner is not let in
// beside the first.
func TestRunWaitsForever(t *testing.T) {
	dir, _ := os.MkdirTemp("", "baton-forever")
	defer os.RemoveAll(dir)
	sc := startProc(t, filepath.Join(dir, "s.sock"), "forever-test", "--max-wait", "1s")
	c := unixClient(sc.socket)
	if code := post(t, c, "/v1/locks/leader", `{"owner":"leader-1"}`); code != 200 {
		t.Fatal(code)
	}
	cmd, out, errb := batonRun(t, sc.socket, "--key", "leader", "--wait", "forever", "--", "echo", "leading")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // past --max-wait
	if strings.Contains(out.String(), "leading") {
		t.Fatalf("ran while the leader held the lock; stderr %s", errb.String())
	}
	if code, body := do(t, c, "DELETE", "/v1/locks/leader?owner=leader-1", ""); code != 200 {
		t.Fatal(code, body)
	}
	if code := exitOf(t, cmd.Wait()); code != 0 || !strings.Contains(out.String(), "leading") {
		t.Fatalf("exit %d, stdout %q, stderr %s", code, out.String(), errb.String())
	}

	// Two runs of one owner: the second is refused while the first runs.
	first, fout, _ := batonRun(t, sc.socket, "--key", "deploy", "--owner", "deploy-1", "--", "sh", "-c", "echo started; sleep 30")
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = first.Process.Signal(syscall.SIGTERM); _ = first.Wait() }()
	waitUntil(t, 10*time.Second, "the first run", func() bool { return strings.Contains(fout.String(), "started") })
	second, sout, serr := batonRun(t, sc.socket, "--key", "deploy", "--owner", "deploy-1", "--", "echo", "ran")
	if code := exitOf(t, second.Run()); code != exitHeld || strings.Contains(sout.String(), "ran") || !strings.Contains(serr.String(), "held by deploy-1") {
		t.Errorf("a second run of the same owner: exit %d, stdout %q, stderr %s", code, sout.String(), serr.String())
	}
}

// TestRunKillGraceAndMaxLockDelay: a sidecar whose --max-lock-delay is
// shorter than the kill grace plus 1s cannot hold the lock back while
// baton run stops its command: baton run says so, naming --kill-grace
// (exit 2), and runs with a kill grace that fits.
func TestRunKillGraceAndMaxLockDelay(t *testing.T) {
	dir, _ := os.MkdirTemp("", "baton-maxdelay")
	defer os.RemoveAll(dir)
	sc := startProc(t, filepath.Join(dir, "s.sock"), "maxdelay-test", "--max-lock-delay", "3s")
	cmd, out, errb := batonRun(t, sc.socket, "--key", "k", "--", "echo", "ran")
	if code := exitOf(t, cmd.Run()); code != 2 || strings.Contains(out.String(), "ran") ||
		!strings.Contains(errb.String(), "--kill-grace 5s") || !strings.Contains(errb.String(), "--max-lock-delay") {
		t.Errorf("exit %d, stdout %q, stderr %q; want 2 naming --kill-grace and --max-lock-delay", code, out.String(), errb.String())
	}
	cmd, out, errb = batonRun(t, sc.socket, "--key", "k", "--kill-grace", "1s", "--", "echo", "ran")
	if code := exitOf(t, cmd.Run()); code != 0 || !strings.Contains(out.String(), "ran") {
		t.Errorf("with --kill-grace 1s: exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
}

// firstWrite waits for the command's grandchild to write path (baton run
// holds the lock and its command runs), failing with baton run's stderr
// after 10s.
func firstWrite(t *testing.T, path string, errb *syncBuffer) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no write of the command's grandchild after 10s; baton run's stderr: %q", errb.String())
		}
	}
}
