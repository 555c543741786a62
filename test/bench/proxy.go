package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/proxy/grpcproxy"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// proxyChildEnv holds, for a re-executed bench binary that runs etcd's
// gRPC proxy instead of the bench, "socket|etcd endpoint".
const proxyChildEnv = "BATON_BENCH_PROXY"

// runProxyChild serves etcd's gRPC proxy (what `etcd grpc-proxy start`
// serves: its KV, watch, lease, cluster and maintenance proxies) on a unix
// socket, in front of the bench's etcd, until SIGTERM. Sidecars behind it
// share its one connection to etcd: one watch stream and one keep-alive
// stream, whose identical watches it coalesces.
func runProxyChild(spec string) int {
	socket, endpoint, ok := strings.Cut(spec, "|")
	if !ok {
		fmt.Fprintf(os.Stderr, "%s=%q: want socket|endpoint\n", proxyChildEnv, spec)
		return 2
	}
	lg := zap.NewNop()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 10 * time.Second, Logger: lg})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cli.Close()
	kvp, _ := grpcproxy.NewKvProxy(cli)
	watchp, _ := grpcproxy.NewWatchProxy(cli.Ctx(), lg, cli)
	leasep, _ := grpcproxy.NewLeaseProxy(cli.Ctx(), cli)
	clusterp, _ := grpcproxy.NewClusterProxy(lg, cli, "", "")
	srv := grpc.NewServer()
	pb.RegisterKVServer(srv, kvp)
	pb.RegisterWatchServer(srv, watchp)
	pb.RegisterLeaseServer(srv, leasep)
	pb.RegisterClusterServer(srv, clusterp)
	pb.RegisterMaintenanceServer(srv, grpcproxy.NewMaintenanceProxy(cli))
	ln, err := net.Listen("unix", socket)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	go srv.Serve(ln)
	readyUntilSignal("ready")
	srv.Stop()
	return 0
}

// startProxies starts n of etcd's gRPC proxies, as a DaemonSet would run
// one per node, and returns their endpoints.
func (w *world) startProxies(n int) ([]*proc, []string, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	var procs []*proc
	var endpoints []string
	for i := range n {
		sock := filepath.Join(w.dir, fmt.Sprintf("proxy-%d.sock", i))
		cmd := exec.Command(self)
		cmd.Env = append(os.Environ(), proxyChildEnv+"="+sock+"|"+w.etcd.endpoint)
		p, err := startProc(cmd, "ready")
		if err != nil {
			stopAll(procs)
			return nil, nil, fmt.Errorf("proxy %d: %w", i, err)
		}
		procs, endpoints = append(procs, p), append(endpoints, "unix://"+sock)
	}
	return procs, endpoints, nil
}

func stopAll(procs []*proc) {
	for _, p := range procs {
		p.term()
	}
}

// etcdStreams are the streams etcd serves; a figure that could not be
// read is -1.
type etcdStreams struct {
	watch, watchers, keepAlive float64
}

// minus is what s serves beyond o: -1 for a figure either could not read.
// Open streams are read as etcd's opened less its handled, so a stream of
// o's time that closed since would make s.minus(o) smaller than what s's
// sidecars are served, even negative: o must be read once etcd's streams
// have settled (settledStreams), and a difference that still comes out
// negative is no measurement.
func (s etcdStreams) minus(o etcdStreams) etcdStreams {
	sub := func(a, b float64) float64 {
		if a < 0 || b < 0 || a < b {
			return -1
		}
		return a - b
	}
	return etcdStreams{sub(s.watch, o.watch), sub(s.watchers, o.watchers), sub(s.keepAlive, o.keepAlive)}
}

// streamsNow reads the streams etcd serves now: watch streams, watchers
// and lease keep-alive streams.
func (w *world) streamsNow(ctx context.Context) etcdStreams {
	v := w.metrics(ctx, watchStreamsMetric, watchersMetric, keepAliveStartedMetric)
	keepAlive := -1.0
	if v[2] >= 0 {
		keepAlive = v[2] - w.metricSum(ctx, "grpc_server_handled_total{", `grpc_method="LeaseKeepAlive"`)
	}
	return etcdStreams{watch: v[0], watchers: v[1], keepAlive: keepAlive}
}

// settledStreams reads the streams etcd serves once the count has stopped
// changing (the same in two reads half a second apart, for at most 10 s):
// the streams of the engines an earlier step closed end at etcd a little
// after their client closed them.
func (w *world) settledStreams(ctx context.Context) etcdStreams {
	last := w.streamsNow(ctx)
	for range 20 {
		select {
		case <-ctx.Done():
			return last
		case <-time.After(500 * time.Millisecond):
		}
		now := w.streamsNow(ctx)
		if now == last {
			return now
		}
		last = now
	}
	return last
}
