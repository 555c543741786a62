package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	baton "github.com/baton-dev/baton/clients/go"
	"github.com/baton-dev/baton/clients/go/lockapi"
	"github.com/baton-dev/baton/internal/keyspace"
)

// TestGuideGoElection runs the user guide's Go election example
// (examples/clients/golead) as two replicas taking turns.
func TestGuideGoElection(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "golead")
	build := exec.Command("go", "build", "-o", bin, "./golead")
	build.Dir = "../../examples/clients"
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./golead: %v\n%s", err, out)
	}
	const scope = "guide-go-election"
	pa, pb := twoSidecars(t, scope)
	replicasTakeTurns(t, "golead/main.go", scope, [2]string{pa.socket, pb.socket}, func(socket, address string) *exec.Cmd {
		cmd := exec.Command(bin)
		cmd.Env = append(os.Environ(), "BATON_SOCKET="+socket, "ADDRESS="+address)
		return cmd
	})
}

// replicasTakeTurns runs one language's election example of the user
// guide (examples/clients/EXAMPLE, which the guide must show as it is) as
// two replicas of a scheduler, each on a sidecar of scope of its own,
// started while a third candidate leads: each stands by naming that
// leader's address and fence. Once it resigns, one replica leads, and is
// forced out mid-round (its key deleted in etcd, as a force release does):
// it says it lost the leadership, force_released, and stops; the other
// leads next, with a larger fence, and resigns after its rounds. Both
// exit 0.
func replicasTakeTurns(t *testing.T, example, scope string, sockets [2]string, start func(socket, address string) *exec.Cmd) {
	t.Helper()
	guide, err := os.ReadFile("../../docs/user-guide.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(filepath.Join("../../examples/clients", example))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(guide, src) {
		t.Errorf("docs/user-guide.md does not show examples/clients/%s as it is", example)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := baton.New(sockets[0])
	zero, err := c.Lead(ctx, "scheduler", lockapi.Request{Owner: "replica-0", Value: "10.0.0.0:8080"})
	if err != nil {
		t.Fatal(err)
	}
	var outs [2]*outputLines
	var exited [2]chan error
	for i := range outs {
		outs[i], exited[i] = &outputLines{}, make(chan error, 1)
		cmd := start(sockets[i], fmt.Sprintf("10.0.0.%d:8080", i+1))
		cmd.Stdout, cmd.Stderr = outs[i], outs[i]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer cmd.Process.Kill()
		go func() { exited[i] <- cmd.Wait() }()
	}
	waitUntil(t, time.Minute, "the two replicas standing by", func() bool {
		st, err := c.Leader(ctx, "scheduler")
		return err == nil && st.Waiters == 2
	})
	if _, err := zero.Release(ctx); err != nil {
		t.Fatal(err)
	}
	first, fence := -1, int64(0)
	waitUntil(t, 30*time.Second, "a replica leading", func() bool {
		for i, out := range outs {
			if f := out.led(fmt.Sprintf("10.0.0.%d:8080", i+1)); f > 0 {
				first, fence = i, f
				return true
			}
		}
		return false
	})
	forceOut(t, scope, "scheduler", fence)
	for i := range exited {
		select {
		case err := <-exited[i]:
			if err != nil {
				t.Fatalf("replica %d: %v\n%s", i+1, err, outs[i])
			}
		case <-time.After(time.Minute):
			t.Fatalf("replica %d still runs a minute after the leader resigned:\n%s", i+1, outs[i])
		}
	}
	second := 1 - first
	lost := outs[first].tookTurn(t, fmt.Sprintf("10.0.0.%d:8080", first+1), zero.Fence(), "lost the leadership: force_released")
	next := outs[second].tookTurn(t, fmt.Sprintf("10.0.0.%d:8080", second+1), zero.Fence(), "resigned")
	if lost != fence || next <= fence {
		t.Errorf("the first replica led with fence %d (forced out at %d), the second with %d: want the second's larger", lost, fence, next)
	}
}

// forceOut deletes the key of election name's leader of fence in scope,
// in etcd, as a force release does.
func forceOut(t *testing.T, scope, name string, fence int64) {
	t.Helper()
	deleteHolder(t, scope, keyspace.Elections, name, fence)
}

// deleteHolder deletes the key of fence of lock or election name (as space
// says) in scope, in etcd, as the mirror's force release does.
func deleteHolder(t *testing.T, scope string, space keyspace.Space, name string, fence int64) {
	t.Helper()
	cli, _ := testEtcd.Client(t)
	layout, err := keyspace.NewLayout(scope)
	if err != nil {
		t.Fatal(err)
	}
	k, err := keyspace.ParseKey(name)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, layout.In(space).LockPrefix(k), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		if kv.CreateRevision == fence {
			if _, err := cli.Delete(ctx, string(kv.Key)); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("no key of fence %d in %s %s: %v", fence, space, name, resp.Kvs)
}

// outputLines is an example's output, line by line.
type outputLines struct {
	mu      sync.Mutex
	partial []byte
	lines   []string
}

func (s *outputLines) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.partial = append(s.partial, p...)
	for {
		i := bytes.IndexByte(s.partial, '\n')
		if i < 0 {
			return len(p), nil
		}
		s.lines = append(s.lines, string(s.partial[:i]))
		s.partial = s.partial[i+1:]
	}
}

func (s *outputLines) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.lines, "\n") + string(s.partial)
}

// led is the fence the replica announcing address said it leads with, 0
// before it did.
func (s *outputLines) led(address string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.lines {
		if m := leadsLine(address).FindStringSubmatch(l); m != nil {
			f, _ := strconv.ParseInt(m[1], 10, 64)
			return f
		}
	}
	return 0
}

// leadsLine is the line of the replica announcing address once it leads.
func leadsLine(address string) *regexp.Regexp {
	return regexp.MustCompile(`^` + regexp.QuoteMeta(address) + ` leads scheduler with fence (\d+)$`)
}

// tookTurn checks that the replica announcing address printed, and only
// that, that it stood by while the leader of fence zero led, that it led
// with a larger fence, then how it ended (address and end); it returns
// its fence.
func (s *outputLines) tookTurn(t *testing.T, address string, zero int64, end string) int64 {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	standby := fmt.Sprintf("standby: 10.0.0.0:8080 leads with fence %d", zero)
	if len(s.lines) != 3 || s.lines[0] != standby || !leadsLine(address).MatchString(s.lines[1]) || s.lines[2] != address+" "+end {
		t.Errorf("the replica %s printed:\n%s\nwant %q, a line that it leads, and %q", address, strings.Join(s.lines, "\n"), standby, address+" "+end)
		return 0
	}
	fence, _ := strconv.ParseInt(leadsLine(address).FindStringSubmatch(s.lines[1])[1], 10, 64)
	if fence <= zero {
		t.Errorf("the replica %s led with fence %d, not above the leader's before it, %d", address, fence, zero)
	}
	return fence
}
