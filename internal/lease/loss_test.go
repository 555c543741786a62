package lease

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/pkg/v3/proxy"
	"go.uber.org/zap"
)

// TestSessionEndsBeforeEtcdExpiresTheLease cuts a sidecar off from etcd
// (a blackholing proxy) and checks that its session ends while etcd still
// holds the lease: the holders of its locks hear of the loss before etcd
// can hand their locks to anyone else.
func TestSessionEndsBeforeEtcdExpiresTheLease(t *testing.T) {
	dir, err := os.MkdirTemp("", "baton-px")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	psock := filepath.Join(dir, "p.sock")
	px := proxy.NewServer(proxy.ServerConfig{
		Logger: zap.NewNop(),
		From:   url.URL{Scheme: "unix", Host: psock},
		To:     url.URL{Scheme: "unix", Host: strings.TrimPrefix(testEtcd.Endpoints()[0], "unix://")},
	})
	<-px.Ready()
	defer px.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"unix://" + psock}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	direct, _ := testEtcd.Client(t)
	ctx := context.Background()

	cfg := testConfig()
	cfg.LossMargin = 900 * time.Millisecond // room for a loaded machine's scheduling
	s, err := Open(ctx, cli, cfg)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // a renewal or two
	if !s.Alive() {
		t.Fatal("session ended while etcd was reachable")
	}
	px.BlackholeTx()
	px.BlackholeRx()
	cut := time.Now()
	select {
	case <-s.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the session did not end after etcd went silent")
	}
	told := time.Since(cut)
	if why := s.lostBecause(); !strings.Contains(why, "no renewal of lease") {
		t.Errorf("the session ended because %q; want no renewal heard", why)
	}
	ttl, err := direct.TimeToLive(ctx, s.ID())
	if err != nil {
		t.Fatal(err)
	}
	if ttl.TTL < 0 {
		t.Fatalf("etcd had already expired the lease when the session ended (%v after the cut)", told)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		ttl, err := direct.TimeToLive(ctx, s.ID())
		if err == nil && ttl.TTL < 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("etcd never expired the lease")
		}
		time.Sleep(20 * time.Millisecond)
	}
	expired := time.Since(cut)
	t.Logf("cut off: session ended after %v, etcd expired the lease after %v (lead %v, TTL %v)", told.Round(time.Millisecond), expired.Round(time.Millisecond), (expired - told).Round(time.Millisecond), s.TTL())
}
