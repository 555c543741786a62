package main

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// memberChildEnv holds, for a re-executed bench binary that runs one member
// of a three-member etcd instead of the bench, "dir|name|initial cluster|peer URL".
const memberChildEnv = "BATON_BENCH_MEMBER"

// clusterSize is the members of the bench's etcd cluster.
const clusterSize = 3

// runMemberChild runs one member of a cluster with fsync on: peers on
// loopback TCP, clients on a unix socket in dir, until SIGTERM.
func runMemberChild(spec string) int {
	parts := strings.Split(spec, "|")
	if len(parts) != 4 {
		fmt.Fprintf(os.Stderr, "%s=%q: want dir|name|initial cluster|peer URL\n", memberChildEnv, spec)
		return 2
	}
	dir, name, initial := parts[0], parts[1], parts[2]
	peer, err := url.Parse(parts[3])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	client := url.URL{Scheme: "unix", Path: filepath.Join(dir, name+".sock")}
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = name, filepath.Join(dir, name)
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*peer}, []url.URL{*peer}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.InitialCluster, cfg.InitialClusterToken = initial, "bench"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		fmt.Fprintln(os.Stderr, err)
		return 1
	case <-time.After(time.Minute):
		fmt.Fprintln(os.Stderr, "member not ready after 1m")
		return 1
	}
	readyUntilSignal("ready")
	e.Close()
	return 0
}

// startMembers starts a three-member etcd, each member its own process,
// and returns them and their client endpoints.
func (w *world) startMembers() ([]*proc, []string, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	names, peers := make([]string, clusterSize), make([]string, clusterSize)
	var initial []string
	for i := range clusterSize {
		addr, err := freeAddr()
		if err != nil {
			return nil, nil, err
		}
		names[i], peers[i] = fmt.Sprintf("m%d", i), "http://"+addr
		initial = append(initial, names[i]+"="+peers[i])
	}
	// The members wait for each other: start them all, then wait.
	type started struct {
		p   *proc
		err error
	}
	ch := make(chan started, clusterSize)
	for i := range clusterSize {
		cmd := exec.Command(self)
		cmd.Env = append(os.Environ(), memberChildEnv+"="+strings.Join([]string{w.dir, names[i], strings.Join(initial, ","), peers[i]}, "|"))
		go func() {
			p, err := startProc(cmd, "ready")
			ch <- started{p, err}
		}()
	}
	var procs []*proc
	var firstErr error
	for range clusterSize {
		s := <-ch
		if s.err != nil && firstErr == nil {
			firstErr = s.err
		}
		if s.p != nil {
			procs = append(procs, s.p)
		}
	}
	if firstErr != nil {
		stopAll(procs)
		return nil, nil, fmt.Errorf("three-member etcd: %w", firstErr)
	}
	eps := make([]string, clusterSize)
	for i, n := range names {
		eps[i] = "unix://" + filepath.Join(w.dir, n+".sock")
	}
	return procs, eps, nil
}

// etcdCluster: Baton and etcd's concurrency.Mutex on the single member the
// other steps use and on a three-member cluster, interleaved: what a
// production etcd, whose every write waits for a second member's fsync,
// costs each.
func (w *world) etcdCluster(ctx context.Context, r *results) error {
	procs, eps, err := w.startMembers()
	if err != nil {
		return err
	}
	defer stopAll(procs)
	cli3, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli3.Close()
	main, err := w.mainSidecar()
	if err != nil {
		return err
	}
	on3, err := w.startSidecarOn("three-members", strings.Join(eps, ","))
	if err != nil {
		return err
	}
	defer on3.term() // before its etcd stops, so that it revokes its lease
	cs := []contender{w.batonNamed(main, batonOne), w.batonNamed(on3, batonThree), mutexTryOn(w.cli, mutexOne), mutexTryOn(cli3, mutexThree)}
	r.cluster = map[string]map[int]series{}
	return w.interleave(ctx, cs, func(_, c int, ct contender, cycle func(context.Context, int) error) error {
		if r.cluster[ct.name] == nil {
			r.cluster[ct.name] = map[int]series{}
		}
		r.cluster[ct.name][c] = append(r.cluster[ct.name][c], runFor(ctx, c, w.o.slice, cycle))
		return nil
	})
}

// The etcd-cluster step's contenders.
const (
	batonOne   = "Baton, 1 member"
	batonThree = "Baton, 3 members"
	mutexOne   = "concurrency.Mutex TryLock, 1 member"
	mutexThree = "concurrency.Mutex TryLock, 3 members"
)

// mutexTryOn is etcd's concurrency.Mutex, TryLock and Unlock, one session
// on cli.
func mutexTryOn(cli *clientv3.Client, name string) contender {
	return contender{name: name, setup: func(ctx context.Context, c int) (func(context.Context, int) error, func(), error) {
		sess, err := concurrency.NewSession(cli, concurrency.WithTTL(60))
		if err != nil {
			return nil, nil, err
		}
		return func(ctx context.Context, i int) error {
			m := concurrency.NewMutex(sess, fmt.Sprintf("/bench/mutex/k%d", i))
			if err := m.TryLock(ctx); err != nil {
				return err
			}
			return m.Unlock(ctx)
		}, func() { sess.Close() }, nil
	}}
}

// printCluster writes the etcd-cluster step's table.
func (r *results) printCluster(w io.Writer) {
	fmt.Fprintf(w, "\n## One etcd member against three (each its own process, fsync on; acquire + release cycles, each client its own key)\n\n| contender |")
	for _, c := range concurrencies {
		fmt.Fprintf(w, " C=%d cycles/s | C=%d p50 | C=%d p99 |", c, c, c)
	}
	fmt.Fprintf(w, "\n|---|%s\n", strings.Repeat("---|---|---|", len(concurrencies)))
	for _, name := range []string{batonOne, batonThree, mutexOne, mutexThree} {
		fmt.Fprintf(w, "| %s |", name)
		for _, c := range concurrencies {
			s := r.cluster[name][c]
			fmt.Fprintf(w, " %.0f | %s | %s |", s.rate(), ms(s.quantile(0.5)), ms(s.quantile(0.99)))
		}
		fmt.Fprintln(w)
	}
}
