package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// batonElect returns `baton elect` against socket, unstarted.
func batonElect(t *testing.T, socket string, args ...string) (*exec.Cmd, *syncBuffer, *syncBuffer) {
	t.Helper()
	cmd := exec.Command(binary(t), append([]string{"elect", "--socket", socket}, args...)...)
	var out, errb syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	return cmd, &out, &errb
}

// TestElect: two replicas run baton elect; the leader's command runs, the
// standby's waits. SIGTERM to the leader stops its command and hands over
// at once, without waiting for the lock delay its kill grace sets; an
// operator forcing the next leader out stops its command and every
// process it started, exit 70.
func TestElect(t *testing.T) {
	dir := t.TempDir()
	pol := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(pol, []byte(allowForce), 0o600); err != nil {
		t.Fatal(err)
	}
	metrics := freePort(t)
	sc := startProc(t, filepath.Join(dir, "s.sock"), "elect-test-"+strconv.FormatInt(time.Now().UnixNano(), 36), "--policy-file", pol, "--metrics-addr", metrics)
	c := unixClient(sc.socket)

	// The first's lock delay (its kill grace and a second) is longer than
	// the test waits for the hand-over: only a resignation hands over in time.
	one, out1, err1 := batonElect(t, sc.socket, "jobs/scheduler", "--owner", "replica-1", "--value", "10.0.0.1:8080", "--kill-grace", "50s", "--",
		"sh", "-c", `echo "election=$BATON_ELECTION owner=$BATON_OWNER fence=$BATON_FENCE"; exec sleep 600`)
	if err := one.Start(); err != nil {
		t.Fatal(err)
	}
	defer one.Process.Kill()
	waitUntil(t, 20*time.Second, "the first replica's command", func() bool {
		if strings.Contains(err1.String(), "baton:") && !strings.Contains(out1.String(), "fence=") {
			t.Fatalf("the first replica: %s", err1.String())
		}
		return strings.Contains(out1.String(), "fence=")
	})
	m := regexp.MustCompile(`election=jobs/scheduler owner=replica-1 fence=(\d+)`).FindStringSubmatch(out1.String())
	if m == nil {
		t.Fatalf("the leader's command saw %q", out1.String())
	}
	fence1, _ := strconv.ParseInt(m[1], 10, 64)

	child := filepath.Join(dir, "child")
	two, out2, err2 := batonElect(t, sc.socket, "jobs/scheduler", "--owner", "replica-2", "--value", "10.0.0.2:8080", "--kill-grace", "1s", "--",
		"sh", "-c", `echo "led fence=$BATON_FENCE"; sleep 600 & echo $! > `+child+`; wait`)
	if err := two.Start(); err != nil {
		t.Fatal(err)
	}
	defer two.Process.Kill()
	waitUntil(t, 20*time.Second, "the standby waiting", func() bool {
		return strings.Contains(err2.String(), "waiting for the leadership of election jobs/scheduler: 1 ahead")
	})
	code, body := do(t, c, "GET", "/v1/elections/jobs/scheduler", "")
	var st struct {
		Held   bool `json:"held"`
		Fence  int64
		Holder struct{ Owner, Value string }
	}
	if code != 200 || json.Unmarshal([]byte(body), &st) != nil || st.Holder.Owner != "replica-1" || st.Holder.Value != "10.0.0.1:8080" || st.Fence != fence1 {
		t.Fatalf("the leader read over the socket: %d %s", code, body)
	}
	if out2.String() != "" {
		t.Fatalf("the standby's command ran while the first led: %q", out2.String())
	}

	// SIGTERM: the command stops, baton elect resigns, the standby leads.
	if err := one.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := exitOf(t, one.Wait()); code == 0 || code == exitLost {
		t.Errorf("the first replica exited %d after SIGTERM; want its command's status; stderr: %s", code, err1.String())
	}
	waitUntil(t, 30*time.Second, "the standby leading", func() bool { return strings.Contains(out2.String(), "led fence=") })
	fence2, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(out2.String()), "led fence=")), 10, 64)
	if fence2 <= fence1 {
		t.Errorf("the second leader's fence %d is not above the first's %d", fence2, fence1)
	}
	// The sidecar counts both leaderships, and tells how long the
	// election had no leader before the standby led.
	election := map[string]string{"election": "jobs/scheduler"}
	fams := scrapeMetrics(t, metrics)
	for name, want := range map[string]float64{"baton_election_elected_total": 2, "baton_election_leading": 1, "baton_election_candidates": 0, "baton_election_leaderless_seconds": 1} {
		if got, ok := value(fams, name, election); !ok || got != want {
			t.Errorf("%s%v = %v (%v), want %v", name, election, got, ok, want)
		}
	}

	// An operator forces it out: its command and what it started stop.
	waitUntil(t, 10*time.Second, "the child's pid", func() bool { b, _ := os.ReadFile(child); return len(b) > 0 })
	pidText, _ := os.ReadFile(child)
	pid, _ := strconv.Atoi(strings.TrimSpace(string(pidText)))
	if code, body := do(t, c, "DELETE", "/v1/elections/jobs/scheduler?force=true&by=test", ""); code != 200 {
		t.Fatalf("force the leader out: %d %s", code, body)
	}
	if code := exitOf(t, two.Wait()); code != exitLost {
		t.Fatalf("the forced-out leader exited %d, want %d; stderr: %s", code, exitLost, err2.String())
	}
	if !strings.Contains(err2.String(), "the leadership of election jobs/scheduler lost") {
		t.Errorf("stderr does not say the leadership was lost: %s", err2.String())
	}
	if err := syscall.Kill(pid, 0); err == nil {
		t.Errorf("the command's child %d outlived the leadership", pid)
	}
}

// TestElectBadCommandLine: a missing or invalid name, or no command after
// --, is exit 2 and campaigns for nothing.
func TestElectBadCommandLine(t *testing.T) {
	for _, args := range [][]string{
		{"--", "true"},
		{"a/../b", "--", "true"},
		{"name", "true"},
		{"name", "--value", strings.Repeat("v", 4097), "--", "true"},
		{"name", "--ttl", "0.5", "--", "true"},
	} {
		cmd, _, errb := batonElect(t, filepath.Join(t.TempDir(), "none.sock"), args...)
		if code := exitOf(t, cmd.Run()); code != 2 || errb.String() == "" {
			t.Errorf("baton elect %q: exit %d, stderr %q; want 2 and why", args, code, errb.String())
		}
	}
}

// TestElectDoc runs the user guide's election block as written, in a
// sandbox like the repository's root: baton elect leads in the
// background, curl reads the leader, and etcdctl elect -l observes it in
// the same election.
func TestElectDoc(t *testing.T) {
	var block *docBlock
	for _, b := range docBlocks(t) {
		if strings.Contains(b.text, "$ baton elect scheduler --socket ./baton.sock") {
			block = &b
		}
	}
	if block == nil {
		t.Fatal("docs/user-guide.md has no baton elect block")
	}
	sb := newSandbox(t)
	ran := filepath.Join(sb.dir, ".ran-schedule.sh")
	script := "#!/bin/sh\necho \"$BATON_ELECTION $BATON_FENCE\" > " + ran + "\nexec sleep 600\n"
	if err := os.WriteFile(filepath.Join(sb.dir, "schedule.sh"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	cmds := commandsOf(block.text)
	if len(cmds) != 3 || !strings.HasSuffix(strings.TrimSpace(strings.Split(cmds[0].cmd, "#")[0]), "&") {
		t.Fatalf("the block's commands: %+v; want baton elect in the background, then two", cmds)
	}
	bg := sb.background(t, cmds[0].cmd+"\nwait")
	defer func() {
		syscall.Kill(-bg.c.Process.Pid, syscall.SIGTERM)
		<-bg.exited
	}()
	waitUntil(t, 20*time.Second, "the leader's command", func() bool { b, _ := os.ReadFile(ran); return len(b) > 0 })
	if b, _ := os.ReadFile(ran); !strings.HasPrefix(string(b), "scheduler ") {
		t.Errorf("the leader's command saw %q; want the election's name and its fence", b)
	}
	for _, c := range cmds[1:] {
		lines := 0
		if c.interrupt {
			lines = len(c.shown)
		}
		out, code := sb.run(t, nil, c.cmd, lines, nil)
		if code != 0 && lines == 0 {
			t.Fatalf("%q: exit %d: %s", c.cmd, code, out)
		}
		if err := sameShape(c.shown, out); err != nil {
			t.Errorf("%q: %v; printed:\n%s", c.cmd, err, out)
		}
	}
}

// TestEtcdctlElect: etcdctl elect, the binary, in one election with
// Baton's candidates, both ways: it waits while Baton leads and leads once
// Baton's leader resigns, announcing its proposal, which Baton tells as a
// leader that is not Baton's; Baton's next candidate waits behind it, and
// leads with a larger fence once etcdctl resigns (interrupted, it revokes
// its session).
func TestEtcdctlElect(t *testing.T) {
	sb := newSandbox(t)
	first := campaignOn(t, sb.sock, "jobs", "baton-1")
	c, out := sb.start(t, "exec etcdctl elect /baton/v1/default/elections/jobs etcdctl-proposal")
	defer func() {
		syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
		c.Wait()
	}()
	time.Sleep(time.Second)
	if out.String() != "" {
		t.Fatalf("etcdctl elect printed %q while Baton leads; want it waiting", out.String())
	}
	sb.do(t, "DELETE", "/v1/elections/jobs?owner=baton-1", "")
	waitUntil(t, 10*time.Second, "etcdctl elect leading", func() bool { return strings.Contains(out.String(), "etcdctl-proposal") })
	var st struct {
		Held   bool  `json:"held"`
		Fence  int64 `json:"fence"`
		Holder struct {
			Foreign bool   `json:"foreign"`
			Value   string `json:"value"`
		} `json:"holder"`
	}
	if err := json.Unmarshal([]byte(sb.do(t, "GET", "/v1/elections/jobs", "")), &st); err != nil || !st.Held || !st.Holder.Foreign || st.Holder.Value != "etcdctl-proposal" || st.Fence <= first {
		t.Fatalf("Baton tells etcdctl's leadership as %+v (%v); want a foreign leader announcing etcdctl-proposal above fence %d", st, err, first)
	}
	granted := make(chan int64, 1)
	go func() {
		f, err := campaignIn(t, sb.sock, "jobs", "baton-2")
		if err != nil {
			t.Error(err)
		}
		granted <- f
	}()
	time.Sleep(500 * time.Millisecond)
	select {
	case f := <-granted:
		t.Fatalf("Baton's candidate led (fence %d) while etcdctl leads", f)
	default:
	}
	syscall.Kill(-c.Process.Pid, syscall.SIGINT)
	select {
	case f := <-granted:
		if f <= st.Fence {
			t.Errorf("Baton's candidate leads at fence %d, not above etcdctl's %d", f, st.Fence)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Baton's candidate did not lead after etcdctl elect was interrupted")
	}
}
