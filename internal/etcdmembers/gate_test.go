package etcdmembers

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// downward writes annotations as Kubernetes' downward API does: one
// key="quoted value" a line, replaced as a whole.
func downward(t *testing.T, path string, annotations map[string]string) {
	t.Helper()
	var b strings.Builder
	for k, v := range annotations {
		fmt.Fprintf(&b, "%s=%q\n", k, v)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestGatePassesAMemberWithData: with a write-ahead log file in the data
// directory, the gate returns at once and gives no state, whatever the
// annotations say: etcd restarts as the member it was.
func TestGatePassesAMemberWithData(t *testing.T) {
	dir := t.TempDir()
	wal := filepath.Join(dir, "data", "member", "wal")
	if err := os.MkdirAll(wal, 0o700); err != nil {
		t.Fatal(err)
	}
	if has, err := HasData(filepath.Join(dir, "data")); err != nil || has {
		t.Fatalf("an empty wal directory: has data %v, %v", has, err)
	}
	if err := os.WriteFile(filepath.Join(wal, "0000000000000000-0000000000000000.wal"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	state, err := Gate(ctx, filepath.Join(dir, "data"), filepath.Join(dir, "no-such-file"), 10*time.Millisecond, quiet())
	if err != nil || state != "" {
		t.Fatalf("gate on a member with data: %q, %v", state, err)
	}
}

// TestGateWaitsForTheVerdict: without data the gate waits, ignoring other
// annotations and a value it does not know, until the verdict is written.
func TestGateWaitsForTheVerdict(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "annotations")
	downward(t, file, map[string]string{"other": "new", StateAnnotation: "maybe"})
	got := make(chan string, 1)
	errs := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() {
		state, err := Gate(ctx, filepath.Join(dir, "data"), file, 10*time.Millisecond, quiet())
		errs <- err
		got <- state
	}()
	select {
	case err := <-errs:
		t.Fatalf("the gate returned before the verdict: %v, %q", err, <-got)
	case <-time.After(300 * time.Millisecond):
	}
	downward(t, file, map[string]string{"other": "new", StateAnnotation: StateExisting})
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	if s := <-got; s != StateExisting {
		t.Fatalf("state %q, want existing", s)
	}

	// Cancelled while waiting: it says so.
	downward(t, file, nil)
	cctx, ccancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer ccancel()
	if _, err := Gate(cctx, filepath.Join(dir, "data"), file, 10*time.Millisecond, quiet()); err == nil {
		t.Fatal("a gate cancelled while it waits returned no error")
	}
}

func TestReadStateRefusesAnUnquotedValue(t *testing.T) {
	file := filepath.Join(t.TempDir(), "annotations")
	if err := os.WriteFile(file, []byte(StateAnnotation+"=new\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if s, err := ReadState(file); err == nil {
		t.Fatalf("an unquoted value read as %q", s)
	}
}

func TestParsePeers(t *testing.T) {
	p, err := ParsePeers("e-0=https://e-0.p.ns.svc:2380,e-1=https://e-1.p.ns.svc:2380")
	if err != nil || len(p) != 2 || p[1] != (Peer{Name: "e-1", URL: "https://e-1.p.ns.svc:2380"}) {
		t.Fatalf("%+v, %v", p, err)
	}
	for _, bad := range []string{"", "e-0", "e-0=", "=https://x:2380", "e-0=ftp://x:2380", "e-0=https://x:1,e-0=https://y:1"} {
		if p, err := ParsePeers(bad); err == nil {
			t.Errorf("ParsePeers(%q) = %+v, want an error", bad, p)
		}
	}
}
