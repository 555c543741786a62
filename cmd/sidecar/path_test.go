package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"runtime/trace"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	xtrace "golang.org/x/exp/trace"

	"github.com/baton-dev/baton/internal/keyspace"
)

// pathRuns is how many acquires TestAcquirePath traces; a file is on the
// path when it is seen in most of them.
const pathRuns = 5

// TestAcquirePath measures the path of one acquire from the socket to etcd
// and back in a sidecar wired as `baton serve` wires it: Go's execution
// tracer records the stack of the goroutine serving the request each time
// it waits or enters the kernel (reading the request, sending the etcd
// transaction, waiting for etcd's answer, writing the grant), and the
// files of Baton's code on those stacks are the path. It must cross at
// most 8 files in at most 4 packages, and docs/design.md must name each of
// them where it walks through the path.
func TestAcquirePath(t *testing.T) {
	c := pathSidecar(t, "path-test")
	for range 3 { // what is done once per process is not the path
		if code, body := do(t, c, http.MethodPost, "/v1/locks/warm", `{"owner":"o"}`); code != http.StatusOK {
			t.Fatalf("warm-up acquire: %d %s", code, body)
		}
		if code, body := do(t, c, http.MethodDelete, "/v1/locks/warm?owner=o", ""); code != http.StatusOK {
			t.Fatalf("warm-up release: %d %s", code, body)
		}
	}

	files, pkgs := tracedPath(t, func(i int) {
		code, body := do(t, c, http.MethodPost, fmt.Sprintf("/v1/locks/path-%d", i), `{"owner":"o"}`)
		if code != http.StatusOK {
			t.Fatalf("acquire: %d %s", code, body)
		}
	})
	t.Logf("the path of one acquire: %d files in %d packages: %s", len(files), pkgs, strings.Join(files, ", "))
	// The ends of the path, or the tracer saw nothing of it.
	for _, end := range []string{"internal/server/locks.go", "internal/lockstore/etcdstore/commit.go"} {
		if !slices.Contains(files, end) {
			t.Fatalf("%s is not on the traced path %v: the trace missed the request", end, files)
		}
	}
	if len(files) > 8 || pkgs > 4 {
		t.Errorf("one acquire crosses %d files in %d packages; at most 8 in 4", len(files), pkgs)
	}
	checkPathDoc(t, "## The path of one acquire", files)
}

// TestBlockingAcquirePath is TestAcquirePath for a blocking acquire that
// queues behind a holder and is granted when it releases: from the
// request, through the queue write and the wait on the lock's watch, to
// the grant. The holder is etcd's own concurrency.Mutex (as `etcdctl lock`),
// so that the only lock request the sidecar serves is the waiter's. It must
// cross at most 10 files.
func TestBlockingAcquirePath(t *testing.T) {
	waiter := pathSidecar(t, "blocking-path-test")
	cli, _ := testEtcd.Client(t)
	sess, err := concurrency.NewSession(cli)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	layout, err := keyspace.NewLayout("blocking-path-test")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	handOver := func(name string) {
		k, err := keyspace.ParseKey(name)
		if err != nil {
			t.Fatal(err)
		}
		m := concurrency.NewMutex(sess, layout.MutexName(k))
		if err := m.Lock(ctx); err != nil {
			t.Fatal(err)
		}
		got := make(chan string, 1)
		go func() {
			code, body := do(t, waiter, http.MethodPost, "/v1/locks/"+name, `{"owner":"w","wait":"30s"}`)
			got <- fmt.Sprint(code, " ", body)
		}()
		waitUntil(t, 10*time.Second, "the waiter queued", func() bool {
			resp, err := cli.Get(ctx, layout.LockPrefix(k), clientv3.WithPrefix(), clientv3.WithCountOnly())
			return err == nil && resp.Count == 2
		})
		if err := m.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if r := <-got; !strings.HasPrefix(r, "200 ") {
			t.Fatalf("the waiter: %s", r)
		}
	}
	for i := range 2 { // what is done once per process is not the path
		handOver(fmt.Sprintf("warm-%d", i))
	}
	files, pkgs := tracedPath(t, func(i int) { handOver(fmt.Sprintf("path-%d", i)) })
	t.Logf("the path of a blocking acquire: %d files in %d packages: %s", len(files), pkgs, strings.Join(files, ", "))
	for _, end := range []string{"internal/server/locks.go", "internal/coordinator/wait.go", "internal/lockstore/etcdstore/commit.go"} {
		if !slices.Contains(files, end) {
			t.Fatalf("%s is not on the traced path %v: the trace missed the request", end, files)
		}
	}
	if len(files) > 10 {
		t.Errorf("a blocking acquire crosses %d files; at most 10", len(files))
	}
	checkPathDoc(t, "## The path of a blocking acquire", files)
}

// pathSidecar serves a sidecar for scope, wired as `baton serve` wires
// it, on a socket of a short path, and returns its client.
func pathSidecar(t *testing.T, scope string) *http.Client {
	t.Helper()
	dir, err := os.MkdirTemp("", "baton-path")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "baton.sock")
	serveInProcess(t, "--socket", sock, "--etcd-endpoints", strings.Join(testEtcd.Endpoints(), ","),
		"--scope", scope, "--health-addr", "", "--metrics-addr", freePort(t))
	return unixClient(sock)
}

// tracedPath traces pathRuns runs of run(i) and returns the files of
// Baton's code on the stacks of the goroutines that served the lock
// requests in most runs, and how many packages hold them.
func tracedPath(t *testing.T, run func(i int)) (files []string, pkgs int) {
	t.Helper()
	seen := map[string]int{}
	for i := range pathRuns {
		var buf bytes.Buffer
		if err := trace.Start(&buf); err != nil {
			t.Fatal(err)
		}
		run(i)
		trace.Stop()
		fs, err := requestFiles(&buf)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fs {
			seen[f]++
		}
	}
	dirs := map[string]bool{}
	for f, n := range seen {
		if n > pathRuns/2 {
			files = append(files, f)
			dirs[path.Dir(f)] = true
		}
	}
	slices.Sort(files)
	return files, len(dirs)
}

// checkPathDoc fails unless docs/design.md's section titled heading names
// each of files.
func checkPathDoc(t *testing.T, heading string, files []string) {
	t.Helper()
	doc, err := os.ReadFile("../../docs/design.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, found := strings.Cut(string(doc), heading+"\n")
	if !found {
		t.Fatalf("docs/design.md has no section %q", heading)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	for _, f := range files {
		if !strings.Contains(section, "`"+strings.TrimPrefix(f, "internal/")) {
			t.Errorf("docs/design.md's %q does not name %s", strings.TrimPrefix(heading, "## "), strings.TrimPrefix(f, "internal/"))
		}
	}
}

// requestFiles reads an execution trace and returns the files of Baton's
// code on the stacks of the goroutines that served a lock request.
func requestFiles(r io.Reader) ([]string, error) {
	tr, err := xtrace.NewReader(r)
	if err != nil {
		return nil, err
	}
	stacks := map[xtrace.GoID][][]xtrace.StackFrame{}
	for {
		ev, err := tr.ReadEvent()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if !waitsOrEntersKernel(ev) {
			continue
		}
		if fr := slices.Collect(ev.Stack().Frames()); len(fr) > 0 {
			stacks[ev.Goroutine()] = append(stacks[ev.Goroutine()], fr)
		}
	}
	files := map[string]bool{}
	for _, ss := range stacks {
		serving := slices.ContainsFunc(ss, func(s []xtrace.StackFrame) bool {
			return slices.ContainsFunc(s, func(f xtrace.StackFrame) bool { return strings.HasSuffix(f.Func, "internal/server.(*Server).lock") })
		})
		if !serving {
			continue
		}
		for _, s := range ss {
			for _, f := range s {
				if rel, ok := ourFile(f.File); ok {
					files[rel] = true
				}
			}
		}
	}
	return slices.Sorted(func(yield func(string) bool) {
		for f := range files {
			if !yield(f) {
				return
			}
		}
	}), nil
}

// waitsOrEntersKernel reports whether ev is its own goroutine blocking or
// entering a system call: the points where a request waits on its path. A
// preemption, a goroutine waking another, and a wait for a contended
// mutex (the noise of a busy machine: the code that waits is anywhere the
// mutex is taken) are not.
func waitsOrEntersKernel(ev xtrace.Event) bool {
	if ev.Kind() != xtrace.EventStateTransition {
		return false
	}
	st := ev.StateTransition()
	if st.Resource.Kind != xtrace.ResourceGoroutine || st.Resource.Goroutine() != ev.Goroutine() {
		return false
	}
	switch _, to := st.Goroutine(); to {
	case xtrace.GoSyscall:
		return true
	case xtrace.GoWaiting:
		return !strings.HasPrefix(st.Reason, "sync.")
	}
	return false
}

// ourFile returns file relative to the module's root, when it is a
// production file of Baton's (built with -trimpath or not).
func ourFile(file string) (string, bool) {
	const module = "github.com/baton-dev/baton/"
	root, err := filepath.Abs("../..") // tests run in their package's directory
	if err != nil {
		return "", false
	}
	rel, ok := strings.CutPrefix(file, root+"/")
	if !ok {
		rel, ok = strings.CutPrefix(file, module)
	}
	if !ok || strings.HasSuffix(rel, "_test.go") {
		return "", false
	}
	return rel, true
}
