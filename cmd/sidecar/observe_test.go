package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/baton-dev/baton/clients/go/lockapi"
)

// observer follows an election through a sidecar's socket as an app
// would: it reads :observe, and when the stream ends (the sidecar
// restarted) it asks again. It keeps every leader it was told, by fence.
type observer struct {
	mu      sync.Mutex
	fences  []int64 // the leaders told, in order (state and granted lines)
	streams int     // how many streams it opened
}

func (o *observer) follow(ctx context.Context, socket, name string) {
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", socket)
	}}}
	for ctx.Err() == nil {
		req, _ := http.NewRequestWithContext(ctx, "GET", "http://baton/v1/elections/"+name+":observe", nil)
		resp, err := c.Do(req)
		if err == nil && resp.StatusCode != http.StatusOK { // the sidecar starting, or without etcd
			resp.Body.Close()
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
		if err != nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		o.mu.Lock()
		o.streams++
		o.mu.Unlock()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			var ev lockapi.WatchEvent
			if json.Unmarshal(sc.Bytes(), &ev) != nil {
				break
			}
			fence := ev.Fence
			if ev.Event == lockapi.WatchState && ev.Lock != nil && ev.Lock.Held {
				fence = ev.Lock.Fence
			}
			if fence != 0 && (ev.Event == lockapi.WatchState || ev.Event == lockapi.WatchGranted) {
				o.mu.Lock()
				o.fences = append(o.fences, fence)
				o.mu.Unlock()
			}
		}
		resp.Body.Close()
	}
}

func (o *observer) told() (fences []int64, streams int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]int64(nil), o.fences...), o.streams
}

// TestObserveNeverGoesBack: a follower's observe stream, and the streams
// it opens again after its sidecar restarted, never name a leader older
// than one named before, across ten changes of leader, a SIGKILL and
// restart of the follower's sidecar and an etcd compaction while it
// watches; and while each leader leads, the last leader named is it. (The
// watch's resync after a gap it cannot resume, and the stream's refusal to
// name an older leader that an etcd restored from an older snapshot brings
// back, are tested in internal/coordinator and internal/server.)
func TestObserveNeverGoesBack(t *testing.T) {
	dir, err := os.MkdirTemp("", "baton-observe")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	scope := "observe-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	leaders := startProc(t, filepath.Join(dir, "a.sock"), scope)
	followerSock := filepath.Join(dir, "b.sock")
	follower := startProc(t, followerSock, scope)
	ctx, cancel := context.WithCancel(context.Background())
	var o observer
	done := make(chan struct{})
	go func() { defer close(done); o.follow(ctx, followerSock, "jobs") }()
	defer func() { cancel(); <-done }()

	cli, _ := testEtcd.Client(t)
	var last int64
	for i := range 10 {
		owner := fmt.Sprintf("replica-%d", i)
		g := campaignOn(t, leaders.socket, "jobs", owner)
		last = g
		switch i {
		case 3: // the follower's sidecar restarts; the observer asks again
			follower.cmd.Process.Signal(syscall.SIGKILL)
			<-follower.exited
			follower = startProc(t, followerSock, scope)
		case 6: // etcd compacts its history under the follower's watch
			resp, err := cli.Get(context.Background(), "compact-probe")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := cli.Compact(context.Background(), resp.Header.Revision); err != nil {
				t.Fatal(err)
			}
		}
		waitUntil(t, 20*time.Second, "the observer told of "+owner, func() bool {
			fences, _ := o.told()
			return len(fences) > 0 && fences[len(fences)-1] == g
		})
		if code, body := do(t, unixClient(leaders.socket), "DELETE", "/v1/elections/jobs?owner="+owner, ""); code != 200 {
			t.Fatalf("resign %s: %d %s", owner, code, body)
		}
	}
	fences, streams := o.told()
	for i := 1; i < len(fences); i++ {
		if fences[i] < fences[i-1] {
			t.Fatalf("the observer was told fence %d after %d: %v", fences[i], fences[i-1], fences)
		}
	}
	if streams < 2 || fences[len(fences)-1] != last {
		t.Errorf("streams %d, leaders told %v; want a second stream after the restart and %d last", streams, fences, last)
	}
}

// campaignOn campaigns as owner in election name through socket, and
// returns the fence once elected; the stream stays open until the test
// ends or the owner resigns.
func campaignOn(t *testing.T, socket, name, owner string) int64 {
	t.Helper()
	fence, err := campaignIn(t, socket, name, owner)
	if err != nil {
		t.Fatal(err)
	}
	return fence
}

// campaignIn is campaignOn for a goroutine other than the test's: it
// returns the error.
func campaignIn(t *testing.T, socket, name, owner string) (int64, error) {
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", socket)
	}}}
	resp, err := c.Post("http://baton/v1/elections/"+name+":campaign", "application/json", strings.NewReader(`{"owner":"`+owner+`"}`))
	if err != nil {
		return 0, err
	}
	t.Cleanup(func() { resp.Body.Close() })
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var ev lockapi.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return 0, err
		}
		if ev.Event == lockapi.EventGranted {
			return ev.Fence, nil
		}
	}
	return 0, fmt.Errorf("%s's campaign ended before its grant", owner)
}
