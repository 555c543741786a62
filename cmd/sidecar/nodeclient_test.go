package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
)

// TestNodeClient installs the Node client as docs/node.md shows, with npm
// from what stands for a clone (its clients/, and a copy of the example),
// offline, runs the page's example against a sidecar, then the package's
// tests (clients/node/test, run with node --test from the app that
// installed it) against two sidecars on etcd, with a hook that revokes a
// lock holder's etcd lease for the loss mid-hold, and one that freezes the
// first sidecar (SIGSTOP) for a loss by silence.
func TestNodeClient(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is needed to test the Node client: %v", err)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(filepath.Join(root, "docs", "node.md"))
	if err != nil {
		t.Fatal(err)
	}
	nodeInStep(t, root)

	clone := t.TempDir()
	if err := os.Symlink(filepath.Join(root, "clients"), filepath.Join(clone, "clients")); err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile(filepath.Join(root, "examples", "clients", "node", "resume.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(page), "```js\n"+string(example)+"```\n") {
		t.Errorf("docs/node.md does not show examples/clients/node/resume.mjs as it is")
	}
	if err := os.MkdirAll(filepath.Join(clone, "examples", "clients", "node"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(clone, "examples", "clients", "node", "resume.mjs"), example, 0o600); err != nil {
		t.Fatal(err)
	}
	lead, err := os.ReadFile(filepath.Join(root, "examples", "clients", "node", "lead.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(clone, "examples", "clients", "node", "lead.mjs"), lead, 0o600); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "PATH="+filepath.Dir(node)+":"+os.Getenv("PATH"), "npm_config_offline=true",
		"npm_config_audit=false", "npm_config_fund=false", "npm_config_update_notifier=false", "NODE_OPTIONS=")
	sh := func(dir, line string, extra ...string) string {
		t.Helper()
		cmd := exec.Command("sh", "-c", line)
		cmd.Dir, cmd.Env = dir, append(env, extra...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", line, err, out)
		}
		return string(out)
	}

	const scope = "nodeclient"
	// A 6s lease: a frozen sidecar's lock goes in 6s (the last test).
	pa, pb := twoSidecars(t, scope, "--lease-ttl", "6s")
	// The page's commands as written, with ./baton.sock the first sidecar's.
	if err := os.Symlink(pa.socket, filepath.Join(clone, "baton.sock")); err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile("(?s)```sh\n(\\$ npm install .*?)```").FindStringSubmatch(string(page))
	if block == nil {
		t.Fatal("docs/node.md shows no npm install block")
	}
	var got string
	for _, line := range strings.Split(strings.TrimSpace(block[1]), "\n") {
		got = sh(clone, strings.TrimPrefix(line, "$ "))
	}
	if strings.Count(got, "\n200 ") != 1 || strings.Count(got, "\n409 ") != 2 || !strings.Contains(got, `"running_execution_id":"exec-`) {
		t.Errorf("the page's example printed:\n%s\nwant one 200 and two 409 naming the running execution", got)
	}
	replicasTakeTurns(t, "node/lead.mjs", scope, [2]string{pa.socket, pb.socket}, func(socket, address string) *exec.Cmd {
		cmd := exec.Command(node, filepath.Join(clone, "examples", "clients", "node", "lead.mjs"))
		cmd.Dir, cmd.Env = clone, append(env, "BATON_SOCKET="+socket, "ADDRESS="+address)
		return cmd
	})

	cli, _ := testEtcd.Client(t)
	revoker := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		revokeHolderLease(t, cli, scope, r.URL.Query().Get("key"))
	}))
	defer revoker.Close()
	// Freezes (SIGSTOP) the first sidecar, or thaws it (?thaw).
	freezer := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		sig := syscall.SIGSTOP
		if r.URL.Query().Has("thaw") {
			sig = syscall.SIGCONT
		}
		if err := pa.cmd.Process.Signal(sig); err != nil {
			t.Error(err)
		}
	}))
	defer freezer.Close()
	defer pa.cmd.Process.Signal(syscall.SIGCONT)
	tests, err := os.ReadFile(filepath.Join(root, "clients", "node", "test", "client.test.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(clone, "client.test.mjs"), tests, 0o600); err != nil {
		t.Fatal(err)
	}
	out := sh(clone, "node --test --test-force-exit --test-timeout=120000 --test-reporter=spec client.test.mjs",
		"BATON_SOCKET_A="+pa.socket, "BATON_SOCKET_B="+pb.socket, "BATON_TEST_REVOKE="+revoker.URL, "BATON_TEST_FREEZE="+freezer.URL)
	t.Logf("the Node client's tests:\n%s", out)
	if n := strings.Count(string(tests), "\n  it(\""); n < 10 || !strings.Contains(out, fmt.Sprintf("pass %d\n", n)) || !strings.Contains(out, "fail 0\n") {
		t.Errorf("the Node client's tests did not all pass:\n%s", out)
	}
}

// chartAppVersion is the chart's appVersion, which the clients' versions
// are.
func chartAppVersion(t *testing.T, root string) string {
	t.Helper()
	chart, err := os.ReadFile(filepath.Join(root, "charts", "baton", "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^appVersion: "?([^"\s]+)"?$`).FindSubmatch(chart)
	if m == nil {
		t.Fatal("charts/baton/Chart.yaml has no appVersion")
	}
	return string(m[1])
}

// nodeInStep checks that the Node client keeps in step with Baton: its
// version is the chart's appVersion, and it depends on nothing.
func nodeInStep(t *testing.T, root string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "clients", "node", "package.json"))
	if err != nil {
		t.Fatal(err)
	}
	var pkg map[string]any
	if err := json.Unmarshal(b, &pkg); err != nil {
		t.Fatal(err)
	}
	if app := chartAppVersion(t, root); pkg["version"] != app {
		t.Errorf("clients/node/package.json's version %v, the chart's appVersion %q: want the same", pkg["version"], app)
	}
	for _, deps := range []string{"dependencies", "devDependencies", "peerDependencies", "optionalDependencies"} {
		if pkg[deps] != nil {
			t.Errorf("clients/node/package.json has %s: the client depends on nothing", deps)
		}
	}
}
