package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRunSemaphoreAndReaders: `baton run --limit 2` runs two commands at
// once and refuses a third; a third with another limit is told the limit
// in force (exit 2); readers run together; `baton locks list` shows every
// holder.
func TestRunSemaphoreAndReaders(t *testing.T) {
	dir, _ := os.MkdirTemp("", "baton-claims")
	defer os.RemoveAll(dir)
	sc := startProc(t, filepath.Join(dir, "s.sock"), "claims-test")
	stop := filepath.Join(dir, "stop")
	// Each command says it started, then runs until the stop file exists.
	until := `echo started; while [ ! -f ` + stop + ` ]; do sleep 0.05; done`
	started := func(out *syncBuffer) func() bool {
		return func() bool { return strings.Contains(out.String(), "started") }
	}

	var waits []func() error
	for _, args := range [][]string{
		{"--key", "tenant-a/pipelines", "--limit", "2", "--owner", "p1"},
		{"--key", "tenant-a/pipelines", "--limit", "2", "--owner", "p2"},
		{"--key", "catalog", "--mode", "read", "--owner", "r1"},
		{"--key", "catalog", "--mode", "read", "--owner", "r2"},
	} {
		cmd, out, errb := batonRun(t, sc.socket, append(args, "--", "sh", "-c", until)...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		waits = append(waits, cmd.Wait)
		waitUntil(t, 10*time.Second, strings.Join(args, " ")+" running: "+errb.String(), started(out))
	}

	cmd, out, errb := batonRun(t, sc.socket, "--key", "tenant-a/pipelines", "--limit", "2", "--", "sh", "-c", "echo ran")
	if code := exitOf(t, cmd.Run()); code != exitHeld || strings.Contains(out.String(), "ran") {
		t.Errorf("a third of limit 2: exit %d, want %d; stderr %s", code, exitHeld, errb.String())
	}
	cmd, _, errb = batonRun(t, sc.socket, "--key", "tenant-a/pipelines", "--limit", "3", "--", "true")
	if code := exitOf(t, cmd.Run()); code != 2 || !strings.Contains(errb.String(), "limit_mismatch") || !strings.Contains(errb.String(), "limit 2") {
		t.Errorf("another limit: exit %d, want 2; stderr %s", code, errb.String())
	}
	cmd, _, errb = batonRun(t, sc.socket, "--key", "catalog", "--", "true")
	if code := exitOf(t, cmd.Run()); code != exitHeld {
		t.Errorf("a writer while readers run: exit %d, want %d; stderr %s", code, exitHeld, errb.String())
	}
	for _, args := range [][]string{
		{"--key", "k", "--limit", "0"}, {"--key", "k", "--limit", "2", "--weight", "3"},
		{"--key", "k", "--weight", "1"}, {"--key", "k", "--mode", "shared"}, {"--key", "k", "--mode", "read", "--limit", "2"},
	} {
		cmd, _, errb := batonRun(t, sc.socket, append(args, "--", "true")...)
		if code := exitOf(t, cmd.Run()); code != 2 {
			t.Errorf("%v: exit %d, want 2; stderr %s", args, code, errb.String())
		}
	}

	var list bytes.Buffer
	if code := run(context.Background(), []string{"locks", "list", "--socket", sc.socket}, env(nil), &list, &list); code != 0 {
		t.Fatalf("locks list: exit %d: %s", code, list.String())
	}
	for _, want := range []string{"2/2 units", "2 readers", "p1", "p2", "r1", "r2"} {
		if !strings.Contains(list.String(), want) {
			t.Errorf("locks list lacks %q:\n%s", want, list.String())
		}
	}
	if err := os.WriteFile(stop, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, wait := range waits {
		if err := wait(); err != nil {
			t.Errorf("a command under the lock: %v", err)
		}
	}
}
