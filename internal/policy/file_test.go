package policy

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestFollowFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("policies:\n- name: p\n  rules:\n  - serviceAccounts: [\"*\"]\n    keys: [\"a/\"]\n")
	g := NewGuard("", "file", slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); FollowFile(ctx, path, g, 10*time.Millisecond) }()
	defer func() { cancel(); <-done }()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if cond() {
				return
			}
		}
		t.Fatalf("%s: not within 5s", what)
	}
	waitFor("the file read", func() bool { return g.Check(Lock, "a/1") == nil && errors.Is(g.Check(Lock, "b"), ErrForbidden) })
	// JSON is YAML too; the size changes, so the change is seen even
	// within the file system's time granularity.
	write(`{"policies":[{"name":"p","rules":[{"serviceAccounts":["*"],"keys":["bb/"]}]}]}`)
	waitFor("the JSON file read", func() bool { return g.Check(Lock, "bb/1") == nil })
	os.Remove(path)
	waitFor("a missing file failing closed", func() bool { return errors.Is(g.Check(Lock, "bb/1"), ErrNoPolicy) })
	write("policies:\n- name: p\n  rules:\n  - serviceAccounts: [\"*\"]\n    keys: [2024]\n")
	waitFor("a wrong type failing closed", func() bool {
		err := g.Check(Lock, "bb/1")
		return errors.Is(err, ErrNoPolicy) && strings.Contains(err.Error(), "cannot unmarshal number")
	})
	write("")
	waitFor("an empty file: the default", func() bool { return g.Check(Lock, "zz") == nil })
}
