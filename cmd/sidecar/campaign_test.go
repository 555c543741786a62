package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// leaderAnswer is GET / of --leader-addr, as the election sidecars answer.
type leaderAnswer struct {
	Name       string `json:"name"`
	LastUpdate string `json:"last_update"`
}

// getLeader asks addr who leads, checking the answer's shape: JSON with
// name and last_update alone, as nais/elector documents it (the retired
// Kubernetes election sidecar's {"name"} is its first field).
func getLeader(t *testing.T, addr string) leaderAnswer {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var raw map[string]any
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" || json.NewDecoder(resp.Body).Decode(&raw) != nil {
		t.Fatalf("GET %s/: %d %s", addr, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var a leaderAnswer
	for k, v := range raw {
		s, ok := v.(string)
		switch {
		case !ok:
			t.Fatalf("GET %s/: %s is %v, not a string", addr, k, v)
		case k == "name":
			a.Name = s
		case k == "last_update":
			if _, err := time.Parse(time.RFC3339, s); err != nil {
				t.Fatalf("GET %s/: last_update %q is not RFC 3339", addr, s)
			}
			a.LastUpdate = s
		default:
			t.Fatalf("GET %s/: a field %q that the election sidecars do not have", addr, k)
		}
	}
	return a
}

// TestCampaignAndLeaderAddr: two sidecars campaign for their pods
// (--campaign) and tell the leader as the election sidecars do
// (--leader-addr): both name the same leader, by its pod's name, on GET /
// and on /sse; the leader's sidecar stopping resigns, and the other's
// answers and stream name its own pod at once.
func TestCampaignAndLeaderAddr(t *testing.T) {
	dir := t.TempDir()
	scope := "campaign-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	addrA, addrB := freePort(t), freePort(t)
	a := startProc(t, filepath.Join(dir, "pod-a"), scope, "--campaign", "jobs/cron", "--leader-addr", addrA)
	waitUntil(t, 20*time.Second, "pod-a leading", func() bool { return getLeader(t, addrA).Name == "pod-a" })
	b := startProc(t, filepath.Join(dir, "pod-b"), scope, "--campaign", "jobs/cron", "--leader-addr", addrB, "--shutdown-grace", "30s")
	waitUntil(t, 20*time.Second, "pod-b naming pod-a", func() bool { return getLeader(t, addrB).Name == "pod-a" })
	waitUntil(t, 20*time.Second, "pod-b campaigning behind pod-a", func() bool {
		code, body := do(t, unixClient(b.socket), "GET", "/v1/elections/jobs/cron", "")
		return code == 200 && strings.Contains(body, `"owner":"pod-a"`) && strings.Contains(body, `"value":"pod-a"`) && strings.Contains(body, `"waiters":1`)
	})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := sseEvents(ctx, t, "http://"+addrB+"/sse")
	next := func() leaderAnswer {
		t.Helper()
		select {
		case a, ok := <-events:
			if !ok {
				t.Fatal("/sse ended")
			}
			return a
		case <-time.After(20 * time.Second):
			t.Fatal("/sse: no event in 20s")
		}
		return leaderAnswer{}
	}
	if first := next(); first.Name != "pod-a" {
		t.Fatalf("/sse's first event names %q; want pod-a", first.Name)
	}
	// pod-a stops: it resigns before it lets its locks go.
	a.cmd.Process.Signal(syscall.SIGTERM)
	for ev := next(); ev.Name != "pod-b"; ev = next() {
		if ev.Name != "" {
			t.Fatalf("/sse named %q after pod-a stopped; want pod-b (or nobody, in between)", ev.Name)
		}
	}
	if got := getLeader(t, addrB); got.Name != "pod-b" {
		t.Errorf("GET / after the hand-over names %q", got.Name)
	}
	<-a.exited
}

// TestLeaderAddrNeedsCampaign: --leader-addr alone, or a bad --campaign or
// address, is a bad command line (exit 2, naming the flag).
func TestLeaderAddrNeedsCampaign(t *testing.T) {
	for _, args := range [][]string{
		{"--leader-addr", "127.0.0.1:0"},
		{"--campaign", "a/../b"},
		{"--campaign", "jobs", "--leader-addr", "4040"},
	} {
		cmd := exec.Command(binary(t), append([]string{"serve", "--socket", filepath.Join(t.TempDir(), "s.sock"), "--etcd-endpoints", "http://127.0.0.1:1"}, args...)...)
		out, err := cmd.CombinedOutput()
		flag := strings.Fields(args[len(args)-2])[0]
		if code := exitOf(t, err); code != 2 || !strings.Contains(string(out), flag) {
			t.Errorf("baton serve %q: exit %d: %s; want 2 naming %s", args, code, out, flag)
		}
	}
}

// sseEvents reads the server-sent events of url until ctx ends, each
// "data: {json}" line decoded.
func sseEvents(ctx context.Context, t *testing.T, url string) <-chan leaderAnswer {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("%s: Content-Type %q", url, ct)
	}
	events := make(chan leaderAnswer, 16)
	go func() {
		defer close(events)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue // the blank line between events
			}
			var a leaderAnswer
			if json.Unmarshal([]byte(data), &a) != nil {
				t.Errorf("%s: an event that is not JSON: %q", url, data)
				return
			}
			events <- a
		}
	}()
	return events
}
