package etcdstore

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-dev/baton/internal/lockstore"
	"github.com/baton-dev/baton/internal/lockstore/storetest"
	"github.com/baton-dev/baton/internal/testing/etcdtest"
)

var testEtcd *etcdtest.Server

func TestMain(m *testing.M) {
	os.Exit(etcdtest.Main(m, func(s *etcdtest.Server) { testEtcd = s }))
}

// fixture is a Store on the test etcd, with its client and a count of the
// client's calls.
type fixture struct {
	s     *Store
	cli   *clientv3.Client
	calls *etcdtest.Counter
	base  string // the test's own prefix
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	cli, calls := testEtcd.Client(t)
	return &fixture{s: New(cli, 5*time.Second), cli: cli, calls: calls, base: fmt.Sprintf("/etcdstore/%s/%d/", t.Name(), time.Now().UnixNano())}
}

// grant grants a lease of a minute.
func (f *fixture) grant(t testing.TB) lockstore.LeaseID {
	t.Helper()
	l, err := f.cli.Grant(context.Background(), 60)
	if err != nil {
		t.Fatal(err)
	}
	return lockstore.LeaseID(l.ID)
}

// TestEtcdConforms runs the conformance suite on etcd.
func TestEtcdConforms(t *testing.T) {
	f := newFixture(t)
	storetest.Run(t, storetest.Harness{
		Store: f.s,
		Grant: func(t *testing.T) lockstore.LeaseID { return f.grant(t) },
		Revoke: func(t *testing.T, id lockstore.LeaseID) {
			if _, err := f.cli.Revoke(context.Background(), clientv3.LeaseID(id)); err != nil {
				t.Fatal(err)
			}
		},
		Full: func(t *testing.T, full bool) { etcdtest.SetNoSpace(t, f.cli, full) },
	})
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

// together runs op(0..n-1) at once, all queued behind one transaction held
// in flight, fails the test on any error and returns the number of etcd
// transactions they made.
func (f *fixture) together(t *testing.T, n int, op func(i int) error) int64 {
	t.Helper()
	queued, send := hold(t, f.s.commits)
	before := f.calls.Txns()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = op(i) })
	}
	queued(n)
	send()
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return f.calls.Txns() - before
}

// hold makes m's callers queue, as behind a transaction in flight, until
// the returned func sends what queued meanwhile; it waits for n callers.
func hold(t *testing.T, m *committer) (queued func(n int), send func()) {
	t.Helper()
	m.mu.Lock()
	if m.running {
		m.mu.Unlock()
		t.Fatal("a transaction is in flight")
	}
	m.running = true
	m.mu.Unlock()
	queued = func(n int) {
		t.Helper()
		waitFor(t, 5*time.Second, fmt.Sprintf("%d queued transactions", n), func() bool {
			m.mu.Lock()
			defer m.mu.Unlock()
			return len(m.queue) == n
		})
	}
	return queued, func() { go m.run() }
}
