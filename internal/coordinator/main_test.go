package coordinator

import (
	"context"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/lease"
	"github.com/baton-dev/baton/internal/lockstore"
	"github.com/baton-dev/baton/internal/lockstore/etcdstore"
	"github.com/baton-dev/baton/internal/lockstore/memstore"
	"github.com/baton-dev/baton/internal/testing/etcdtest"
)

// The tests run on an in-memory store, in milliseconds; with
// BATON_STORE=etcd (make test does both) the same tests run on a real
// embedded etcd, with real sessions.
var (
	onEtcd   = os.Getenv("BATON_STORE") == "etcd"
	testEtcd *etcdtest.Server
)

func TestMain(m *testing.M) {
	if s := os.Getenv("BATON_STORE"); s != "" && s != "etcd" && s != "memory" {
		fmt.Fprintf(os.Stderr, "BATON_STORE=%q: use etcd, or memory (the default)\n", s)
		os.Exit(2)
	}
	if !onEtcd {
		// The tests mostly wait for deadlines and delays: run them all at
		// once, whatever the number of cores, unless told otherwise.
		flag.Parse()
		if !flagSet("test.parallel") {
			_ = flag.Set("test.parallel", "64")
		}
		os.Exit(etcdtest.MainWithoutEtcd(m))
	}
	os.Exit(etcdtest.Main(m, func(s *etcdtest.Server) { testEtcd = s }))
}

// flagSet reports whether the flag name was given.
func flagSet(name string) (set bool) {
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// world is the store the sidecars of a test share.
type world struct {
	mem *memstore.Store  // on memory
	srv *etcdtest.Server // on etcd
}

// newWorld returns the test's store: a fresh Memory, or the package's etcd.
func newWorld(t testing.TB) *world {
	if onEtcd {
		return &world{srv: testEtcd}
	}
	return &world{mem: memstore.New()}
}

// newOwnWorld returns a store for a test that takes it down: a Memory, or
// an etcd of its own.
func newOwnWorld(t testing.TB) *world {
	if !onEtcd {
		return newWorld(t)
	}
	srv, err := etcdtest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return &world{srv: srv}
}

// down makes the store unreachable; up brings it back.
func (w *world) down(t testing.TB) {
	if w.mem != nil {
		// etcd stays down past the lease TTL: every sidecar gives its
		// session up.
		w.mem.SetDown(true)
		w.mem.LoseSessions()
		return
	}
	w.srv.Stop()
}

func (w *world) up(t testing.TB) {
	t.Helper()
	if w.mem != nil {
		w.mem.SetDown(false)
		return
	}
	if err := w.srv.Restart(); err != nil {
		t.Fatal(err)
	}
}

// sidecar is one coordinator with its own store client and sessions, as
// in one pod.
type sidecar struct {
	c        *Coordinator
	w        *world
	raw      lockstore.Store // the store, uncounted: the test's own view
	calls    *counted        // the coordinator's calls
	sessions lockstore.Sessions
	cli      *clientv3.Client // on etcd
	keeper   *lease.Keeper    // on etcd
	mem      *memstore.Sessions
}

// scopeOf gives each test its own scope, so tests never see each other's keys.
func scopeOf(t testing.TB) string {
	h := fnv.New64a()
	h.Write([]byte(strings.SplitN(t.Name(), "/", 2)[0]))
	return fmt.Sprintf("t%x", h.Sum64())
}

// worlds remembers each test's world, so its sidecars share one.
var worlds sync.Map // top-level test name → *world

func newSidecar(t testing.TB, pod string, mods ...func(*Config)) *sidecar {
	name := strings.SplitN(t.Name(), "/", 2)[0]
	w, _ := worlds.LoadOrStore(name, newWorld(t))
	return newSidecarOn(t, w.(*world), pod, mods...)
}

func newSidecarOn(t testing.TB, w *world, pod string, mods ...func(*Config)) *sidecar {
	t.Helper()
	return newSidecarWith(t, w, pod, nil, mods...)
}

// newSidecarWith is newSidecarOn with the coordinator's options opts.
func newSidecarWith(t testing.TB, w *world, pod string, opts []Option, mods ...func(*Config)) *sidecar {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if os.Getenv("BATON_TEST_LOG") != "" { // the components' logs, to stderr
		log = slog.New(slog.NewTextHandler(os.Stderr, nil)).With("pod", pod)
	}
	cfg := Default()
	cfg.Scope = scopeOf(t)
	cfg.Identity = Identity{Pod: pod, Namespace: "ns", Node: "node-1"}
	cfg.RequestTimeout = time.Second
	for _, m := range mods {
		m(&cfg)
	}
	s := &sidecar{w: w}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	if w.mem != nil {
		s.raw, s.mem = w.mem, w.mem.Sessions()
		s.sessions = s.mem
		done <- struct{}{}
	} else {
		cli, _ := w.srv.Client(t)
		lcfg := lease.Default()
		lcfg.TTL = 2 * time.Second
		lcfg.GrantTimeout = time.Second
		lcfg.RetryMin = 50 * time.Millisecond
		lcfg.RetryMax = 200 * time.Millisecond
		keeper, err := lease.NewKeeper(cli, lcfg, log)
		if err != nil {
			t.Fatal(err)
		}
		s.cli, s.keeper, s.raw = cli, keeper, etcdstore.New(cli, cfg.RequestTimeout)
		s.sessions = etcdstore.NewSessions(keeper)
		go func() { keeper.Run(ctx); done <- struct{}{} }()
	}
	s.calls = &counted{Store: s.raw}
	c, err := New(cfg, s.calls, s.sessions, log, opts...)
	if err != nil {
		t.Fatal(err)
	}
	s.c = c
	go func() { c.Run(ctx); done <- struct{}{} }()
	t.Cleanup(func() {
		c.Shutdown()
		s.revoke()
		cancel()
		<-done
		<-done
	})
	waitFor(t, 10*time.Second, "sidecar ready", func() bool { return c.Ready() == nil })
	return s
}

// revoke ends the sidecar's session and deletes its keys, as a sidecar
// shutting down does.
func (s *sidecar) revoke() {
	if s.keeper != nil {
		rctx, cancel := context.WithTimeout(context.Background(), time.Second)
		s.keeper.Close(rctx)
		cancel()
		return
	}
	if sess := s.mem.Last(); sess != nil {
		sess.Revoke()
	}
}

// session returns the sidecar's current session.
func (s *sidecar) session(t testing.TB) lockstore.Session {
	t.Helper()
	sess, err := s.sessions.Current()
	if err != nil {
		t.Fatal(err)
	}
	return sess
}

// expire ends the sidecar's current session as etcd ends a lease that
// expired or that someone revoked: its keys go, then the sidecar hears.
func (s *sidecar) expire(t testing.TB) {
	t.Helper()
	sess := s.session(t)
	if s.mem != nil {
		s.mem.Last().Expire()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := s.cli.Revoke(ctx, clientv3.LeaseID(sess.ID())); err != nil {
		t.Fatal(err)
	}
}

// deleteKey deletes a contender key as an operator with etcdctl would.
func (s *sidecar) deleteKey(t testing.TB, key string) {
	t.Helper()
	if _, err := s.raw.Delete(key, 0); err != nil {
		t.Fatal(err)
	}
}

// first reads the first contender of lock k.
func (s *sidecar) first(t testing.TB, k keyspace.Key) *lockstore.Contender {
	t.Helper()
	f, err := s.raw.First(context.Background(), s.c.Layout().LockPrefix(k))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// needsEtcd skips a test that is about etcd itself when running on memory.
func needsEtcd(t testing.TB) {
	t.Helper()
	if !onEtcd {
		t.Skip("about etcd itself: runs with BATON_STORE=etcd")
	}
}

// counted counts the calls of a Store: writes (each an etcd transaction
// when alone) and reads.
type counted struct {
	lockstore.Store
	writes, reads atomic.Int64
	deletes       atomic.Int64                  // deletes the watches delivered
	readDelay     atomic.Int64                  // the way back of each First's answer, in ns: it was read before
	answerGate    atomic.Pointer[chan struct{}] // when set, each First's answer waits for it to close
	queueGate     atomic.Pointer[gate]          // when set, each Queue says it started and waits for it to open
	updateGate    atomic.Pointer[gate]          // when set, each Update says it started and waits for it to open
	updatedGate   atomic.Pointer[gate]          // when set, each Update, once written, says so and waits for it to open
}

// gate holds a store call up: the call says it started on entered, then
// waits until open is closed.
type gate struct{ entered, open chan struct{} }

// pass says a call came to g and waits for it to open; a nil g is open.
func (g *gate) pass() {
	if g != nil {
		g.entered <- struct{}{}
		<-g.open
	}
}

func (c *counted) Writes() int64 { return c.writes.Load() }
func (c *counted) Reads() int64  { return c.reads.Load() }

func (c *counted) Try(lock string, p lockstore.Put) (lockstore.Outcome, error) {
	c.writes.Add(1)
	return c.Store.Try(lock, p)
}

func (c *counted) Queue(lock string, p lockstore.Put) (lockstore.Outcome, error) {
	c.writes.Add(1)
	c.queueGate.Load().pass()
	return c.Store.Queue(lock, p)
}

func (c *counted) TryIn(lock string, p lockstore.Put, seen int64) (lockstore.Outcome, error) {
	c.writes.Add(1)
	return c.Store.TryIn(lock, p, seen)
}

func (c *counted) Join(lock string, p lockstore.Put) (lockstore.Outcome, error) {
	c.writes.Add(1)
	return c.Store.Join(lock, p)
}

func (c *counted) Line(ctx context.Context, lock, key string, create int64) ([]lockstore.Contender, int64, bool, error) {
	c.reads.Add(1)
	return c.Store.Line(ctx, lock, key, create)
}

func (c *counted) Finish(key string, create int64, record, value string, lease lockstore.LeaseID, also string) (lockstore.Outcome, error) {
	c.writes.Add(1)
	return c.Store.Finish(key, create, record, value, lease, also)
}

func (c *counted) DeleteWith(key string, create int64, also string) (lockstore.Outcome, error) {
	c.writes.Add(1)
	return c.Store.DeleteWith(key, create, also)
}

func (c *counted) Mark(key string, create int64, marker, value string) (lockstore.Outcome, error) {
	c.writes.Add(1)
	return c.Store.Mark(key, create, marker, value)
}

func (c *counted) Swap(key, old, value string) (lockstore.Outcome, error) {
	c.writes.Add(1)
	return c.Store.Swap(key, old, value)
}

func (c *counted) Read(ctx context.Context, key string) ([]byte, bool, error) {
	c.reads.Add(1)
	return c.Store.Read(ctx, key)
}

func (c *counted) Snapshot(ctx context.Context, prefix string) ([]lockstore.Contender, int64, error) {
	c.reads.Add(1)
	return c.Store.Snapshot(ctx, prefix)
}

func (c *counted) Update(p lockstore.Put, create, mod int64) (lockstore.Outcome, error) {
	c.writes.Add(1)
	c.updateGate.Load().pass()
	out, err := c.Store.Update(p, create, mod)
	c.updatedGate.Load().pass()
	return out, err
}

func (c *counted) Delete(key string, create int64) (lockstore.Outcome, error) {
	c.writes.Add(1)
	return c.Store.Delete(key, create)
}

// Watch counts the deletes the watch delivers.
func (c *counted) Watch(ctx context.Context, prefix string, from int64) <-chan lockstore.WatchResponse {
	in := c.Store.Watch(ctx, prefix, from)
	out := make(chan lockstore.WatchResponse)
	go func() {
		defer close(out)
		for r := range in {
			c.deletes.Add(int64(len(r.Deleted)))
			select {
			case out <- r:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

func (c *counted) First(ctx context.Context, lock string) (*lockstore.Contender, error) {
	first, err := c.Store.First(ctx, lock)
	c.reads.Add(1)
	time.Sleep(time.Duration(c.readDelay.Load()))
	if g := c.answerGate.Load(); g != nil {
		<-*g
	}
	return first, err
}

func (c *counted) Ahead(ctx context.Context, lock, key string, create int64) ([]string, int64, bool, error) {
	c.reads.Add(1)
	return c.Store.Ahead(ctx, lock, key, create)
}

func (c *counted) Contenders(ctx context.Context, prefix string, limit int) ([]lockstore.Contender, bool, error) {
	c.reads.Add(1)
	return c.Store.Contenders(ctx, prefix, limit)
}

func (c *counted) Holds(ctx context.Context, key string, create int64) (bool, error) {
	c.reads.Add(1)
	return c.Store.Holds(ctx, key, create)
}

func (c *counted) LeaseGone(ctx context.Context, id lockstore.LeaseID) (bool, error) {
	c.reads.Add(1)
	return c.Store.LeaseGone(ctx, id)
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

// contenders returns the contender keys of lock k.
func (s *sidecar) contenders(t testing.TB, k keyspace.Key) []string {
	t.Helper()
	cs, _, err := s.raw.Contenders(context.Background(), s.c.Layout().LockPrefix(k), 0)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, c := range cs {
		keys = append(keys, c.Key)
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

// parallel runs the test beside the others on memory, where each has a
// store of its own; on etcd they run one at a time, as their timings
// assume an etcd that serves one test.
func parallel(t *testing.T) {
	if !onEtcd {
		t.Parallel()
	}
}
