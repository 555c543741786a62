package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	baton "github.com/baton-dev/baton/clients/go"
	"github.com/baton-dev/baton/clients/go/lockapi"
)

func TestLocksCommands(t *testing.T) {
	dir, _ := os.MkdirTemp("", "baton-locks")
	defer os.RemoveAll(dir)
	// Force release over the socket needs a policy that allows it.
	pol := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(pol, []byte(allowForce), 0o600); err != nil {
		t.Fatal(err)
	}
	sc := startProc(t, filepath.Join(dir, "s.sock"), "locks-test", "--policy-file", pol)
	c := unixClient(sc.socket)
	for _, body := range []struct{ key, owner string }{{"tf/prod", "exec-abc"}, {"tf/staging", "exec-def"}, {"other", "exec-x"}} {
		if code := post(t, c, "/v1/locks/"+body.key, `{"owner":"`+body.owner+`","ttl":"10m"}`); code != 200 {
			t.Fatalf("acquire %s: %d", body.key, code)
		}
	}
	baton := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := run(context.Background(), append(args, "--socket", sc.socket), env(nil), &out, &errb)
		return code, out.String(), errb.String()
	}

	code, out, errs := baton("locks", "list", "--prefix", "tf/")
	if code != 0 {
		t.Fatalf("list: exit %d: %s", code, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "KEY") || !strings.Contains(lines[0], "WAITERS") ||
		!strings.Contains(out, "exec-abc") || !strings.Contains(out, "exec-def") || strings.Contains(out, "exec-x") {
		t.Errorf("list table:\n%s", out)
	}
	if !strings.Contains(lines[1], "s.sock") || !strings.Contains(lines[1], "ago") || !strings.Contains(lines[1], " in ") {
		t.Errorf("row %q lacks pod, since or expiry", lines[1])
	}

	code, out, _ = baton("locks", "list", "-o", "json")
	var listed struct {
		Locks []struct {
			Key    string `json:"key"`
			Fence  int64  `json:"fence"`
			Holder struct{ Owner string }
		} `json:"locks"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &listed) != nil || len(listed.Locks) != 3 {
		t.Fatalf("list -o json: exit %d, %s", code, out)
	}

	// The socket's former flag name still works, with its notice on
	// stderr: stdout stays JSON.
	var jout, jerr bytes.Buffer
	code = run(context.Background(), []string{"locks", "list", "-o", "json", "--socket-path", sc.socket}, env(nil), &jout, &jerr)
	if code != 0 || !json.Valid(jout.Bytes()) || !strings.Contains(jerr.String(), "--socket-path is deprecated") {
		t.Errorf("list -o json --socket-path: exit %d, stdout %q, stderr %q; want JSON on stdout, the notice on stderr", code, jout.String(), jerr.String())
	}

	if code, out, _ = baton("locks", "status", "tf/prod"); code != 0 || !strings.Contains(out, "exec-abc") {
		t.Errorf("status: exit %d, %s", code, out)
	}
	if code, out, _ = baton("locks", "status", "free-one"); code != 0 || !strings.Contains(out, "free-one is free") {
		t.Errorf("status of a free lock: exit %d, %s", code, out)
	}

	if code, out, _ = baton("locks", "release", "tf/prod", "--owner", "exec-abc"); code != 0 || !strings.Contains(out, "released tf/prod") {
		t.Errorf("release: exit %d, %s", code, out)
	}
	if code, _, errs = baton("locks", "release", "tf/staging", "--force", "--fence", "999999"); code != 1 || !strings.Contains(errs, "fence_mismatch") {
		t.Errorf("force with a stale fence: exit %d, %s", code, errs)
	}
	if code, out, _ = baton("locks", "release", "tf/staging", "--force"); code != 0 || !strings.Contains(out, "it was held by exec-def (pod s.sock)") {
		t.Errorf("force release: exit %d, %s", code, out)
	}
	if code, _, errs = baton("locks", "release", "tf/staging", "--owner", "exec-def"); code != 1 || !strings.Contains(errs, "lock_lost") {
		t.Errorf("owner release after force: exit %d, %s", code, errs)
	}
	for _, args := range [][]string{
		{"locks", "release", "other"},
		{"locks", "release", "other", "--owner", "a", "--force"},
		{"locks", "release", "other", "--owner", "a", "--fence", "3"},
		{"locks", "status", "bad key"},
		{"locks", "list", "-o", "yaml"},
		{"locks", "list", "--prefix", "a b"},
	} {
		if code, _, errs := baton(args...); code != 2 {
			t.Errorf("%v: exit %d, want 2: %s", args, code, errs)
		}
	}
}

// TestLocksNameTheCluster: with clusters sharing one etcd, the table and
// the force release's message name the holder's cluster beside its pod.
func TestLocksNameTheCluster(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	h := lockapi.Holder{Owner: "run-7", Pod: "api-1", Cluster: "east", AcquiredAt: now.Add(-time.Minute), ExpiresAt: now.Add(time.Minute)}
	var b strings.Builder
	printLocks(&b, []lockapi.Status{{Key: "report", Held: true, Holder: &h, Fence: 42}}, now)
	if !strings.Contains(b.String(), "east/api-1") {
		t.Errorf("table:\n%s\nwant the pod as east/api-1", b.String())
	}
	if got := holderName(&h); got != "run-7 (pod api-1 in cluster east)" {
		t.Errorf("holderName: %q", got)
	}
	h.Cluster = ""
	if got := holderName(&h); got != "run-7 (pod api-1)" {
		t.Errorf("holderName without a cluster: %q", got)
	}
}

// TestLocksStatusShowsWaiters: baton locks status lists the contenders
// waiting, first in line first, with their owner, pod and since, and how
// many more of a pod's callers wait behind its first.
func TestLocksStatusShowsWaiters(t *testing.T) {
	pa, pb := twoSidecars(t, "locks-waiters")
	if code := post(t, unixClient(pa.socket), "/v1/locks/q/job", `{"owner":"runner","ttl":"1m"}`); code != 200 {
		t.Fatalf("acquire: %d", code)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := baton.New(pb.socket)
	for _, owner := range []string{"w1", "w2"} {
		s, err := b.Hold(ctx, "q/job", lockapi.Request{Owner: owner, Wait: "30s"})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		go func() {
			for {
				if _, err := s.Next(); err != nil {
					return
				}
			}
		}()
		eventually(t, owner+" queued", func() bool {
			st, err := b.Status(ctx, "q/job")
			return err == nil && len(st.Waiting) == 1 && st.Waiting[0].Queued == map[string]int{"w1": 0, "w2": 1}[owner]
		})
	}
	status := func(args ...string) (int, string) {
		var out, errb bytes.Buffer
		code := run(context.Background(), append([]string{"locks", "status", "q/job", "--socket", pa.socket}, args...), env(nil), &out, &errb)
		return code, out.String() + errb.String()
	}
	// Asked of the holder's sidecar: the holder's process (this test's, which
	// acquired it), and the waiters of the other sidecar, whose processes
	// only that one knows.
	self := fmt.Sprintf("pid %d: %s", os.Getpid(), os.Args[0])
	code, out := status()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 6 || !strings.Contains(lines[1], "runner") || !strings.HasPrefix(lines[2], "held here by runner: "+self[:min(len(self), 40)]) ||
		!strings.HasPrefix(lines[4], "WAITING") || !strings.Contains(lines[5], "w1") || !strings.Contains(lines[5], "b.sock") || !strings.Contains(lines[5], "ago") ||
		!strings.Contains(lines[5], "1 more of its pod") || !strings.HasSuffix(lines[5], " -") {
		t.Errorf("locks status:\n%s", out)
	}
	code, out = status("-o", "json")
	var st lockapi.Status
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || len(st.Waiting) != 1 || st.Waiters != 2 || len(st.QueuedHere) != 0 {
		t.Fatalf("locks status -o json: exit %d, %s", code, out)
	}
	if w := st.Waiting[0]; w.Owner != "w1" || w.Queued != 1 || w.Since.IsZero() || w.Since.After(time.Now()) || !strings.HasSuffix(w.Pod, "b.sock") || w.Process != nil {
		t.Errorf("the waiter: %+v", w)
	}
	if p := st.Holder.Process; p == nil || p.PID != os.Getpid() || !strings.HasPrefix(p.Command, os.Args[0]) || p.Exited {
		t.Errorf("the holder's process: %+v, want this test's, pid %d", p, os.Getpid())
	}
	// Asked of the waiters' sidecar: its contender's process, and the
	// caller queued behind it there, by name.
	code, out = status("--socket", pb.socket)
	if code != 0 || !strings.Contains(out, "QUEUED HERE") || !regexp.MustCompile(`(?m)^1 +w2 +\d+s ago +pid \d+: `).MatchString(out) ||
		!regexp.MustCompile(`(?m)^1 +w1 .* 1 more of its pod +pid \d+: `).MatchString(out) {
		t.Errorf("locks status, asked of the waiters' sidecar:\n%s", out)
	}
	code, out = status("--socket", pb.socket, "-o", "json")
	st = lockapi.Status{}
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || len(st.Waiting) != 1 || len(st.QueuedHere) != 1 {
		t.Fatalf("locks status -o json, asked of the waiters' sidecar: exit %d, %s", code, out)
	}
	if q := st.QueuedHere[0]; q.Owner != "w2" || q.Since.Before(st.Waiting[0].Since) || q.Process == nil || q.Process.PID != os.Getpid() {
		t.Errorf("the caller queued behind w1: %+v", q)
	}
	if w := st.Waiting[0]; w.Process == nil || w.Process.PID != os.Getpid() || st.Holder.Process != nil {
		t.Errorf("asked of the waiters' sidecar: the waiter's process %+v, the holder's %+v", w.Process, st.Holder.Process)
	}
}

// TestLocksStatusShowsAnExitedHolder: a lock taken by a process that has
// since exited (curl with a ttl) shows it so, by its pid.
func TestLocksStatusShowsAnExitedHolder(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Fatalf("curl, which the docs' commands use: %v", err)
	}
	pa, _ := twoSidecars(t, "locks-exited")
	cmd := exec.Command(curl, "-sS", "--unix-socket", pa.socket, "-X", "POST", "http://baton/v1/locks/q/gone", "-d", `{"owner":"gone","ttl":"1m"}`)
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), `"granted":true`) {
		t.Fatalf("curl: %v, %s", err, out)
	}
	st, err := baton.New(pa.socket).Status(context.Background(), "q/gone")
	if err != nil {
		t.Fatal(err)
	}
	if p := st.Holder.Process; p == nil || p.PID != cmd.Process.Pid || !p.Exited || p.Command != "" {
		t.Errorf("the process of a holder that exited: %+v, want pid %d, exited", p, cmd.Process.Pid)
	}
	var out bytes.Buffer
	if code := run(context.Background(), []string{"locks", "status", "q/gone", "--socket", pa.socket}, env(nil), &out, &out); code != 0 ||
		!strings.Contains(out.String(), fmt.Sprintf("held here by gone: pid %d (exited)", cmd.Process.Pid)) {
		t.Errorf("locks status: exit %d:\n%s", code, out.String())
	}
	// Its owner asks again from another process (a retried call): that
	// one goes on with the lock, and is shown.
	if code := post(t, unixClient(pa.socket), "/v1/locks/q/gone", `{"owner":"gone","ttl":"1m"}`); code != 200 {
		t.Fatalf("acquire again: %d", code)
	}
	if st, err = baton.New(pa.socket).Status(context.Background(), "q/gone"); err != nil {
		t.Fatal(err)
	}
	if p := st.Holder.Process; p == nil || p.PID != os.Getpid() || p.Exited {
		t.Errorf("the process of a holder that asked again from this one: %+v, want pid %d", p, os.Getpid())
	}
}

// TestLocksStatusShowsAnUnseenProcess: a sidecar in a process namespace of
// its own, as in a pod whose containers do not share theirs, cannot see
// the process that holds a lock through it, and says why.
func TestLocksStatusShowsAnUnseenProcess(t *testing.T) {
	if out, err := exec.Command("unshare", "--pid", "--fork", "--mount-proc", "true").CombinedOutput(); err != nil {
		t.Fatalf("unshare, which a pid namespace of its own needs (the tests run as root): %v, %s", err, out)
	}
	dir := t.TempDir()
	wrapper := filepath.Join(dir, "unshared")
	script := "#!/bin/sh\nexec unshare --pid --fork --kill-child --mount-proc " + binary(t) + " \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	sock, err := os.MkdirTemp("", "bu")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sock) })
	p := startBinary(t, wrapper, filepath.Join(sock, "u.sock"), "locks-unseen")
	if code := post(t, unixClient(p.socket), "/v1/locks/q/unseen", `{"owner":"far","ttl":"1m"}`); code != 200 {
		t.Fatalf("acquire: %d", code)
	}
	st, err := baton.New(p.socket).Status(context.Background(), "q/unseen")
	if err != nil {
		t.Fatal(err)
	}
	if pr := st.Holder.Process; pr == nil || pr.PID != 0 || !strings.Contains(pr.Unseen, "shareProcessNamespace") {
		t.Errorf("the process of a holder the sidecar cannot see: %+v", pr)
	}
	var out bytes.Buffer
	if code := run(context.Background(), []string{"locks", "status", "q/unseen", "--socket", p.socket}, env(nil), &out, &out); code != 0 ||
		!strings.Contains(out.String(), "held here by far: (not visible to the sidecar: shareProcessNamespace)") {
		t.Errorf("locks status: exit %d:\n%s", code, out.String())
	}
}
