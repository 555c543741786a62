package main

import (
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// docStep is one command of a doc's console block and what it prints.
type docStep struct {
	cmd  string
	want []string
}

// consoleSteps reads the first ```console block of a markdown page.
func consoleSteps(t *testing.T, page string) []docStep {
	t.Helper()
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(b), "```console\n")
	if !ok {
		t.Fatalf("%s has no console block", page)
	}
	block, _, _ = strings.Cut(block, "```")
	var steps []docStep
	for _, l := range strings.Split(strings.TrimSpace(block), "\n") {
		if cmd, ok := strings.CutPrefix(l, "$ "); ok {
			steps = append(steps, docStep{cmd: cmd})
		} else if len(steps) > 0 {
			steps[len(steps)-1].want = append(steps[len(steps)-1].want, l)
		}
	}
	return steps
}

// TestDaprDoc runs docs/dapr.md's console session against the binary it
// names, on ports of the test's own: every command, and what each prints
// (of a table, the key and the holder of each row: the rest changes).
func TestDaprDoc(t *testing.T) {
	steps := consoleSteps(t, "../../docs/dapr.md")
	if len(steps) < 6 || !strings.HasSuffix(steps[0].cmd, " &") {
		t.Fatalf("docs/dapr.md's session %+v: want the sidecar started in the background first", steps)
	}
	dir := t.TempDir()
	httpAddr, grpcAddr := freePort(t), freePort(t)
	subst := strings.NewReplacer("bin/baton", binary(t), "127.0.0.1:3500", httpAddr, "127.0.0.1:50001", grpcAddr)

	// The sidecar, with what keeps it off the ports of other tests.
	serve := subst.Replace(strings.TrimSuffix(steps[0].cmd, " &")) +
		" --health-addr '' --embedded-client-url http://" + freePort(t) + " --data-dir ./etcd"
	cmd := exec.Command("bash", "-c", "exec "+serve)
	cmd.Dir = dir
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + httpAddr + "/v1.0/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusNoContent {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: Dapr's health never 204; stderr: %s", serve, stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}

	for _, st := range steps[1:] {
		c := exec.Command("bash", "-c", subst.Replace(st.cmd))
		c.Dir = dir
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", st.cmd, err, out)
		}
		got := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(got) != len(st.want) {
			t.Fatalf("%s printed %q; docs/dapr.md shows %q", st.cmd, got, st.want)
		}
		for i, w := range st.want {
			g := got[i]
			if f, wf := strings.Fields(g), strings.Fields(w); !strings.HasPrefix(w, "{") && len(f) >= 2 && len(wf) >= 2 {
				g, w = f[0]+" "+f[1], wf[0]+" "+wf[1]
			}
			if g != w {
				t.Errorf("%s printed %q; docs/dapr.md shows %q", st.cmd, got[i], st.want[i])
			}
		}
	}
}
