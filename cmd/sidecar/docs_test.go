package main

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadmeClients runs the curl, Python, Node and Go clients that README
// shows against a real sidecar: once on a free lock (granted, then released
// by closing the connection) and once on a held one (the webhook pattern:
// 409 with the running execution's id). It also checks README shows each
// file as it is. A missing interpreter fails the test.
func TestReadmeClients(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "baton-docs")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "baton.sock")
	serveInProcess(t, "--socket", sock, "--data-dir", filepath.Join(dir, "etcd"),
		"--embedded-client-url", "http://127.0.0.1:0", "--health-addr", "")
	c := unixClient(sock)

	for _, cl := range []struct {
		file, key string
		cmd       []string
	}{
		{"hold.sh", "nightly/report", []string{"bash", "hold.sh"}},
		{"client.py", "flow-123/readiness", []string{"python3", "client.py"}},
		{"client.js", "tenant-acme/gcp_billing_export", []string{"node", "client.js"}},
		{"go/main.go", "terraform-prod", []string{"go", "run", "./go"}},
	} {
		t.Run(cl.file, func(t *testing.T) {
			src, err := os.ReadFile(filepath.Join("../../examples/clients", cl.file))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(readme), string(src)) {
				t.Errorf("README does not show examples/clients/%s as it is", cl.file)
			}
			if _, err := exec.LookPath(cl.cmd[0]); err != nil {
				t.Fatalf("%s is needed to test the README's client: %v", cl.cmd[0], err)
			}
			runClient := func() string {
				t.Helper()
				cmd := exec.Command(cl.cmd[0], cl.cmd[1:]...)
				cmd.Dir = "../../examples/clients"
				cmd.Env = append(os.Environ(), "BATON_SOCKET="+sock)
				got, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("%v: %v\n%s", cl.cmd, err, got)
				}
				return string(got)
			}

			got := runClient()
			if !strings.Contains(got, "with fence") || !strings.Contains(got, "released") {
				t.Errorf("on a free lock %v printed %q; want a grant with its fence and a release", cl.cmd, got)
			}
			waitStatus(t, c, cl.key, `"held":false`)

			if code, body := do(t, c, http.MethodPost, "/v1/locks/"+cl.key, `{"owner":"exec-running"}`); code != 200 {
				t.Fatalf("hold the lock: %d %s", code, body)
			}
			got = runClient()
			if !strings.Contains(got, "409") || !strings.Contains(got, `"running_execution_id":"exec-running"`) {
				t.Errorf("on a held lock %v printed %q; want 409 with the running execution id", cl.cmd, got)
			}
			do(t, c, http.MethodDelete, "/v1/locks/"+cl.key+"?owner=exec-running", "")

			// No sidecar there: the client says which socket it tried.
			none := filepath.Join(dir, "none.sock")
			cmd := exec.Command(cl.cmd[0], cl.cmd[1:]...)
			cmd.Dir = "../../examples/clients"
			cmd.Env = append(os.Environ(), "BATON_SOCKET="+none)
			got2, err := cmd.CombinedOutput()
			if err == nil || !strings.Contains(string(got2), none) || !strings.Contains(string(got2), "BATON_SOCKET") {
				t.Errorf("with no sidecar %v: %v, printed %q; want a failure naming %s and BATON_SOCKET", cl.cmd, err, got2, none)
			}
		})
	}
}
