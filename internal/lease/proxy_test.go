package lease

import (
	"context"
	"net"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/pkg/v3/proxy"
	"go.etcd.io/etcd/server/v3/proxy/grpcproxy"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// TestSessionThroughEtcdsProxy keeps a session through etcd's gRPC proxy
// (what the chart's etcd.proxy runs on each node), 150 ms away from it as
// on a busy node. The proxy renews the lease on its own schedule and
// answers an ask only at its next renewal, so a session that asked a
// third of the TTL after each answer missed a renewal whenever its ask
// arrived just after one, heard nothing for twice the proxy's period
// (3 s at a 3 s TTL) and was given up as lost while etcd still held the
// lease. Asking every sixth of the TTL leaves an ask waiting at each
// renewal: the session lives, and hears a renewal at every one of the
// proxy's.
func TestSessionThroughEtcdsProxy(t *testing.T) {
	direct, _ := testEtcd.Client(t)
	dir := t.TempDir()
	psock, nsock := filepath.Join(dir, "grpc-proxy.sock"), filepath.Join(dir, "node.sock")
	leases, _ := grpcproxy.NewLeaseProxy(direct.Ctx(), direct)
	srv := grpc.NewServer()
	pb.RegisterLeaseServer(srv, leases)
	ln, err := net.Listen("unix", psock)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Stop()
	slow := proxy.NewServer(proxy.ServerConfig{
		Logger: zap.NewNop(),
		From:   url.URL{Scheme: "unix", Host: nsock},
		To:     url.URL{Scheme: "unix", Host: psock},
	})
	<-slow.Ready()
	defer slow.Close()
	slow.DelayTx(150*time.Millisecond, 50*time.Millisecond)
	slow.DelayRx(150*time.Millisecond, 50*time.Millisecond)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"unix://" + nsock}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()

	cfg := testConfig()
	cfg.TTL = 3 * time.Second
	// The grant's first call also dials through the proxy, each of its
	// handshake's round trips delayed: on a loaded machine a second is
	// not always enough.
	cfg.GrantTimeout = 2 * time.Second
	ctx := context.Background()
	s, err := Open(ctx, cli, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Revoke(ctx)
	id := s.ID()
	heard, longest, last := 0, time.Duration(0), time.Now()
	for end := time.After(6 * cfg.TTL); ; {
		select {
		case <-s.Renewed():
			heard, longest, last = heard+1, max(longest, time.Since(last)), time.Now()
			continue
		case <-s.Done():
			t.Fatalf("the session ended after %d renewals heard through the proxy, the longest %v apart", heard, longest.Round(time.Millisecond))
		case <-end:
		}
		break
	}
	if ttl, err := direct.TimeToLive(ctx, id); err != nil || ttl.TTL <= 0 {
		t.Fatalf("etcd's lease after the session: %v, %v", ttl, err)
	}
	t.Logf("%d renewals heard through etcd's gRPC proxy in %v, the longest %v apart", heard, 6*cfg.TTL, longest.Round(time.Millisecond))
}
