package electcompat

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/coordinator"
	"github.com/baton-dev/baton/internal/keyspace"
)

// TestLeaderAnswers: GET / and /sse tell the leader's name (its value,
// else its pod, else its owner) and when it changed; a renewal or a change
// of the waiters is no change; the same pod elected again is; nobody
// leading leaves name out.
func TestLeaderAnswers(t *testing.T) {
	k, _ := keyspace.ParseKey("jobs")
	l := NewLeader(k, "", nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	srv := httptest.NewServer(l.Handler())
	defer srv.Close()
	get := func() string {
		resp, err := http.Get(srv.URL + "/")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.TrimSpace(string(b))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/sse", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	next := func() Answer {
		t.Helper()
		for lines.Scan() {
			if data, ok := strings.CutPrefix(lines.Text(), "data: "); ok {
				var a Answer
				if err := json.Unmarshal([]byte(data), &a); err != nil {
					t.Fatal(err)
				}
				return a
			}
		}
		t.Fatal("/sse ended")
		return Answer{}
	}
	if a := next(); a.Name != "" {
		t.Fatalf("before any leader /sse said %+v", a)
	}
	led := func(fence int64, h keyspace.Holder) coordinator.Status {
		return coordinator.Status{Key: k, Held: true, Fence: fence, Holder: h}
	}
	l.tell(led(7, keyspace.Holder{Owner: "o", Pod: "pod-a", Value: "pod-a"}))
	first := next()
	if first.Name != "pod-a" || first.LastUpdate == "" {
		t.Fatalf("/sse: %+v", first)
	}
	if got := get(); !strings.HasPrefix(got, `{"name":"pod-a","last_update":"`) {
		t.Fatalf("GET /: %s", got)
	}
	l.tell(led(7, keyspace.Holder{Owner: "o", Pod: "pod-a", Value: "pod-a", Queued: 3})) // no change of leader
	l.tell(coordinator.Status{Key: k})                                                   // nobody leads
	if a := next(); a.Name != "" {
		t.Fatalf("after the leader went /sse said %+v; want no name", a)
	}
	if got := get(); strings.Contains(got, "name") {
		t.Errorf("GET / with nobody leading: %s", got)
	}
	l.tell(led(9, keyspace.Holder{Owner: "exec-1", Pod: "pod-b"}))
	if a := next(); a.Name != "pod-b" {
		t.Errorf("a leader with no value is named %q; want its pod", a.Name)
	}
	l.tell(led(11, keyspace.Holder{Owner: "etcdctl", Foreign: true}))
	if a := next(); a.Name != "etcdctl" {
		t.Errorf("a leader with neither value nor pod is named %q; want its owner", a.Name)
	}
}

// valid is a leadership valid until a time.
type valid struct{ until time.Time }

func (v valid) ValidFor(now time.Time) time.Duration { return max(v.until.Sub(now), 0) }

// TestLeaderNamesThePodOnlyWhileItsLeadershipIsCertain: a pod that
// campaigns is named leader while its own campaign holds a leadership
// that is certainly its own, not on etcd's word alone: cut off from etcd,
// it hears no other leader elected, but knows when its own may have ended.
func TestLeaderNamesThePodOnlyWhileItsLeadershipIsCertain(t *testing.T) {
	k, _ := keyspace.ParseKey("jobs")
	var self Self
	l := NewLeader(k, "pod-a", &self, slog.New(slog.NewTextHandler(io.Discard, nil)))
	led := coordinator.Status{Key: k, Held: true, Fence: 7, Holder: keyspace.Holder{Owner: "pod-a", Pod: "pod-a", Value: "pod-a"}}
	l.tell(led)
	if a := l.Answer(); a.Name != "" {
		t.Fatalf("etcd names pod-a, its campaign holds nothing yet: answered %+v", a)
	}
	self.set(valid{time.Now().Add(time.Hour)})
	l.recheck()
	if a := l.Answer(); a.Name != "pod-a" {
		t.Fatalf("with its leadership certain: answered %+v", a)
	}
	self.set(valid{time.Now().Add(-time.Second)}) // not confirmed in time
	l.recheck()
	if a := l.Answer(); a.Name != "" {
		t.Fatalf("its leadership no longer certain: answered %+v", a)
	}
	l.tell(coordinator.Status{Key: k, Held: true, Fence: 9, Holder: keyspace.Holder{Owner: "pod-b", Pod: "pod-b", Value: "pod-b"}})
	if a := l.Answer(); a.Name != "pod-b" {
		t.Fatalf("another pod leading: answered %+v", a)
	}
}
