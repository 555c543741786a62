package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestReadmeClients runs the Python, Node and Go clients that README shows
// against a real sidecar, and checks README shows them verbatim.
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
	ctx, cancel := context.WithCancel(context.Background())
	var out, errb syncBuffer
	done := make(chan int)
	go func() {
		done <- run(ctx, []string{"serve", "--socket-path", sock, "--data-dir", filepath.Join(dir, "etcd"),
			"--embedded-client-url", "http://127.0.0.1:0", "--health-addr", ""}, env(nil), &out, &errb)
	}()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out.String(), "serving on") {
		if time.Now().After(deadline) {
			t.Fatalf("no ready line; stderr: %s", errb.String())
		}
		time.Sleep(20 * time.Millisecond)
	}

	for _, c := range []struct {
		file string
		cmd  []string
	}{
		{"client.py", []string{"python3", "client.py"}},
		{"client.js", []string{"node", "client.js"}},
		{"go/main.go", []string{"go", "run", "./go"}},
	} {
		t.Run(c.file, func(t *testing.T) {
			src, err := os.ReadFile(filepath.Join("../../examples/clients", c.file))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(readme), string(src)) {
				t.Errorf("README does not show examples/clients/%s as it is", c.file)
			}
			if _, err := exec.LookPath(c.cmd[0]); err != nil {
				if os.Getenv("CI") == "true" {
					t.Fatalf("%s is not installed", c.cmd[0])
				}
				t.Skipf("%s is not installed", c.cmd[0])
			}
			cmd := exec.Command(c.cmd[0], c.cmd[1:]...)
			cmd.Dir = "../../examples/clients"
			cmd.Env = append(os.Environ(), "BATON_SOCKET="+sock)
			got, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%v: %v\n%s", c.cmd, err, got)
			}
			if !strings.Contains(string(got), "with fence") || !strings.Contains(string(got), "released") {
				t.Errorf("%v printed %q; want a grant with its fence and a release", c.cmd, got)
			}
		})
	}
}
