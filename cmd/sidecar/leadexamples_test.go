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

	baton "github.com/baton-dev/baton/clients/go"
	"github.com/baton-dev/baton/clients/go/lockapi"
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
	pa, pb := twoSidecars(t, "guide-go-election")
	replicasTakeTurns(t, "golead/main.go", [2]string{pa.socket, pb.socket}, func(socket, address string) *exec.Cmd {
		cmd := exec.Command(bin)
		cmd.Env = append(os.Environ(), "BATON_SOCKET="+socket, "ADDRESS="+address)
		return cmd
	})
}

// replicasTakeTurns runs one language's election example of the user
// guide (examples/clients/EXAMPLE, which the guide must show as it is) as
// two replicas of a scheduler, each on a sidecar of its own, started while
// a third candidate leads: each stands by naming that leader's address and
// fence; once it resigns, one replica leads, then the other, each with a
// larger fence, the second only after the first's five rounds; each
// resigns and exits 0.
func replicasTakeTurns(t *testing.T, example string, sockets [2]string, start func(socket, address string) *exec.Cmd) {
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
	var outs [2]*stampedLines
	var exited [2]chan error
	for i := range outs {
		outs[i], exited[i] = &stampedLines{}, make(chan error, 1)
		cmd := start(sockets[i], fmt.Sprintf("10.0.0.%d:8080", i+1))
		cmd.Stdout, cmd.Stderr = outs[i], outs[i]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer cmd.Process.Kill()
		go func() { exited[i] <- cmd.Wait() }()
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		st, err := c.Leader(ctx, "scheduler")
		if err == nil && st.Waiters == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the two replicas are not both standing by after a minute: %+v %v\n%s\n%s", st, err, outs[0], outs[1])
		}
	}
	if _, err := zero.Release(ctx); err != nil {
		t.Fatal(err)
	}
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
	var led [2]time.Time
	var fences [2]int64
	for i, out := range outs {
		led[i], fences[i] = out.tookTurn(t, fmt.Sprintf("10.0.0.%d:8080", i+1), zero.Fence())
	}
	if fences[0] == fences[1] {
		t.Errorf("both replicas led with fence %d", fences[0])
	}
	if gap := led[1].Sub(led[0]).Abs(); gap < 800*time.Millisecond {
		t.Errorf("the second replica led %v after the first, before the first's five rounds of 200 ms ended", gap)
	}
}

// stampedLines is an example's output, each line with when it came.
type stampedLines struct {
	mu      sync.Mutex
	partial []byte
	lines   []string
	at      []time.Time
}

func (s *stampedLines) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.partial = append(s.partial, p...)
	for {
		i := bytes.IndexByte(s.partial, '\n')
		if i < 0 {
			return len(p), nil
		}
		s.lines, s.at = append(s.lines, string(s.partial[:i])), append(s.at, time.Now())
		s.partial = s.partial[i+1:]
	}
}

func (s *stampedLines) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.lines, "\n") + string(s.partial)
}

// tookTurn checks that the replica announcing address printed, in order,
// that it stood by while the leader of fence zero led, that it led with a
// larger fence, and that it resigned; it returns when it led, and its
// fence.
func (s *stampedLines) tookTurn(t *testing.T, address string, zero int64) (time.Time, int64) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	standby := fmt.Sprintf("standby: 10.0.0.0:8080 leads with fence %d", zero)
	leads := regexp.MustCompile(`^` + regexp.QuoteMeta(address) + ` leads scheduler with fence (\d+)$`)
	if len(s.lines) != 3 || s.lines[0] != standby || !leads.MatchString(s.lines[1]) || s.lines[2] != address+" resigned" {
		t.Errorf("the replica %s printed:\n%s\nwant %q, a line that it leads, and that it resigned", address, strings.Join(s.lines, "\n"), standby)
		return time.Time{}, 0
	}
	fence, _ := strconv.ParseInt(leads.FindStringSubmatch(s.lines[1])[1], 10, 64)
	if fence <= zero {
		t.Errorf("the replica %s led with fence %d, not above the leader's before it, %d", address, fence, zero)
	}
	return s.at[1], fence
}
