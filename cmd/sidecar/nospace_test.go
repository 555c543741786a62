//go:build !lean

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	baton "github.com/baton-dev/baton/clients/go"
	"github.com/baton-dev/baton/clients/go/lockapi"
)

// TestEmbeddedEtcdOutOfSpace: the embedded etcd filled to its quota by
// data that is not Baton's. Grants are refused with etcd_no_space and the
// sidecar turns not ready, while the locks held go on: a hold stream keeps
// its lock over three times its ttl, and a lock is released. Once the data
// is gone, the sidecar's own maintenance compacts, defragments and
// disarms the alarm: the sidecar is ready again by itself, and grants
// fences above every one before.
func TestEmbeddedEtcdOutOfSpace(t *testing.T) {
	dir, err := os.MkdirTemp("", "baton-full")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock, etcdURL := filepath.Join(dir, "b.sock"), "unix://"+filepath.Join(dir, "etcd.sock")
	serveInProcess(t, "--socket", sock, "--data-dir", filepath.Join(dir, "data"), "--embedded-client-url", etcdURL,
		// A lease of 4s, and the maintenance every second: while the data
		// in use fills the quota, it defragments the member once (a
		// defragmentation holds up the keep-alives), not at every pass.
		// The hold below is kept for three lease TTLs.
		"--health-addr", "", "--lease-ttl", "4s", "--embedded-quota", fmt.Sprint(8<<20), "--embedded-history", "1h",
		"--etcd-maintenance-interval", "1s")
	ctx := context.Background()
	c, hc := baton.New(sock), unixClient(sock)

	// A ttl of 4s: renewals go through a read of etcd, which its own
	// compaction and defragmentation, once full, may hold up a second or
	// more on a busy machine.
	const ttl = 4 * time.Second
	st, err := c.Hold(ctx, "job/long", lockapi.Request{Owner: "long", TTL: ttl.String()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	granted, err := st.Next()
	if err != nil || granted.Event != lockapi.EventGranted {
		t.Fatalf("hold: %+v %v", granted, err)
	}
	plain := acquireJSON(t, hc, "job/plain", `{"owner":"plain","ttl":"1m"}`, http.StatusOK)

	ecli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcdURL}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer ecli.Close()
	// Filled until NOSPACE, etcd's file may still have room that a
	// defragmentation wins back: the sidecar's maintenance then disarms
	// the alarm by itself, maybe before the sidecar saw it. What it wins
	// back is filled again, until the data itself fills the quota.
	junk := strings.Repeat("x", 16<<10)
	for i, round := 0, 0; ; round++ {
		for ; ; i++ {
			_, err := ecli.Put(ctx, fmt.Sprintf("/junk/%d", i), junk)
			if errors.Is(err, rpctypes.ErrNoSpace) {
				break
			}
			if err != nil || i > 4000 {
				t.Fatalf("filling etcd: %d puts: %v", i, err)
			}
		}
		refused := acquireJSON(t, hc, "job/other", `{"owner":"other"}`, http.StatusServiceUnavailable)
		if refused["code"] != lockapi.CodeEtcdNoSpace || !strings.Contains(fmt.Sprint(refused["message"]), "NOSPACE") {
			t.Fatalf("acquire while etcd is out of space: %v", refused)
		}
		if readyzWithin(t, hc, 10*time.Second, http.StatusServiceUnavailable, lockapi.CodeEtcdNoSpace) == "" {
			break
		}
		if round == 3 {
			waitReadyz(t, hc, http.StatusServiceUnavailable, lockapi.CodeEtcdNoSpace)
		}
	}

	// The hold stream keeps its lock for three times its ttl.
	until := time.Now().Add(3 * ttl)
	for time.Now().Before(until) {
		ev, err := st.Next()
		if err != nil || ev.Event != lockapi.EventHeartbeat || ev.Fence != granted.Fence {
			t.Fatalf("hold stream while etcd is out of space: %+v %v; want heartbeats of fence %d", ev, err, granted.Fence)
		}
	}
	if _, err := c.Release(ctx, "job/plain", "plain"); err != nil {
		t.Fatalf("release while etcd is out of space: %v", err)
	}

	if _, err := ecli.Delete(ctx, "/junk/", clientv3.WithPrefix()); err != nil {
		t.Fatalf("delete the data that filled etcd: %v", err)
	}
	waitReadyz(t, hc, http.StatusOK, "")
	after := acquireJSON(t, hc, "job/other", `{"owner":"other"}`, http.StatusOK)
	if f := after["fence"].(float64); int64(f) <= granted.Fence || f <= plain["fence"].(float64) {
		t.Fatalf("fence %v after the alarm, want above %d and %v", f, granted.Fence, plain["fence"])
	}
	alarms, err := ecli.AlarmList(ctx)
	if err != nil || len(alarms.Alarms) != 0 {
		t.Fatalf("alarms after the maintenance: %+v %v", alarms, err)
	}
	if ev, err := st.Next(); err != nil || ev.Fence != granted.Fence || ev.Event == lockapi.EventLost {
		t.Fatalf("hold stream after the alarm: %+v %v", ev, err)
	}
}

// acquireJSON acquires key with body and wants status; it returns the answer.
func acquireJSON(t *testing.T, c *http.Client, key, body string, status int) map[string]any {
	t.Helper()
	resp, err := c.Post("http://baton/v1/locks/"+key, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &out); err != nil || resp.StatusCode != status {
		t.Fatalf("acquire %s: %d %s, want %d", key, resp.StatusCode, b, status)
	}
	return out
}

// waitReadyz waits until /readyz answers status (and code, when set).
func waitReadyz(t *testing.T, c *http.Client, status int, code string) {
	t.Helper()
	if last := readyzWithin(t, c, 30*time.Second, status, code); last != "" {
		t.Fatalf("readyz: %s; want %d %s", last, status, code)
	}
}

// readyzWithin waits up to d for /readyz to answer status (and code, when
// set), and returns its last answer when it did not ("" when it did).
func readyzWithin(t *testing.T, c *http.Client, d time.Duration, status int, code string) string {
	t.Helper()
	var last string
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		resp, err := c.Get("http://baton/readyz")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		last = fmt.Sprintf("%d %s", resp.StatusCode, b)
		if resp.StatusCode == status && strings.Contains(string(b), code) {
			return ""
		}
	}
	return last
}
