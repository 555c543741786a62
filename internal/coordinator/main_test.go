package coordinator

import (
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-dev/baton/internal/etcdtest"
	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/lease"
)

var testEtcd *etcdtest.Server

func TestMain(m *testing.M) {
	os.Exit(etcdtest.Main(m, func(s *etcdtest.Server) { testEtcd = s }))
}

// sidecar is one coordinator with its own client and session, as in one pod.
type sidecar struct {
	c      *Coordinator
	keeper *lease.Keeper
	cli    *clientv3.Client
	calls  *etcdtest.Counter
	stop   context.CancelFunc
}

// scopeOf gives each test its own scope, so tests never see each other's keys.
func scopeOf(t testing.TB) string {
	h := fnv.New64a()
	h.Write([]byte(strings.SplitN(t.Name(), "/", 2)[0]))
	return fmt.Sprintf("t%x", h.Sum64())
}

func newSidecar(t testing.TB, pod string, mods ...func(*Config)) *sidecar {
	return newSidecarOn(t, testEtcd, pod, mods...)
}

func newSidecarOn(t testing.TB, srv *etcdtest.Server, pod string, mods ...func(*Config)) *sidecar {
	t.Helper()
	cli, calls := srv.Client(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil)).With("pod", pod)
	}
	lcfg := lease.Default()
	lcfg.TTL = 2 * time.Second
	lcfg.GrantTimeout = time.Second
	lcfg.RetryMin = 50 * time.Millisecond
	lcfg.RetryMax = 200 * time.Millisecond
	keeper, err := lease.NewKeeper(cli, lcfg, log)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Default()
	cfg.Scope = scopeOf(t)
	cfg.Identity = Identity{Pod: pod, Namespace: "ns", Node: "node-1"}
	cfg.RequestTimeout = time.Second
	for _, m := range mods {
		m(&cfg)
	}
	c, err := New(cfg, cli, keeper, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	go func() { keeper.Run(ctx); done <- struct{}{} }()
	go func() { c.Run(ctx); done <- struct{}{} }()
	s := &sidecar{c: c, keeper: keeper, cli: cli, calls: calls, stop: cancel}
	t.Cleanup(func() {
		c.Shutdown()
		rctx, rcancel := context.WithTimeout(context.Background(), time.Second)
		keeper.Close(rctx)
		rcancel()
		cancel()
		<-done
		<-done
	})
	waitFor(t, 10*time.Second, "sidecar ready", func() bool { return c.Ready() == nil })
	return s
}

func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func key(t testing.TB, s string) keyspace.Key {
	t.Helper()
	k, err := keyspace.ParseKey(s)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// contenders returns the contender keys of lock k in etcd.
func (s *sidecar) contenders(t *testing.T, k keyspace.Key) []string {
	t.Helper()
	resp, err := s.cli.Get(context.Background(), s.c.Layout().LockPrefix(k), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, kv := range resp.Kvs {
		keys = append(keys, string(kv.Key))
	}
	return keys
}

func (s *sidecar) acquire(t *testing.T, k keyspace.Key, owner string, wait time.Duration) (Grant, error) {
	t.Helper()
	return s.c.Acquire(context.Background(), AcquireRequest{Key: k, Owner: owner, Wait: wait})
}

func (s *sidecar) mustAcquire(t *testing.T, k keyspace.Key, owner string) Grant {
	t.Helper()
	g, err := s.acquire(t, k, owner, 0)
	if err != nil {
		t.Fatalf("acquire %s by %s: %v", k, owner, err)
	}
	return g
}
