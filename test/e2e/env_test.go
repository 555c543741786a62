//go:build e2e

package e2e

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// env is one scenario's world: etcd, sidecars, the store, the history.
type env struct {
	t        *testing.T
	dir      string
	base     time.Time
	h        *history
	store    *store
	etcd     *etcdProc // single member; nil on a cluster
	cluster  *cluster
	cli      *clientv3.Client
	sidecars []*sidecar
	clients  int
}

// envOptions shape an env.
type envOptions struct {
	noFence bool // the store ignores tokens (negative control)
	cluster bool // a 3-member etcd cluster instead of one member
}

func newEnv(t *testing.T, o envOptions) *env {
	t.Helper()
	e := &env{t: t, dir: shortDir(t), base: time.Now()}
	e.h = newHistory(e.base)
	e.store = newStore(t, e.dir, !o.noFence, e.base)
	if o.cluster {
		e.cluster = startCluster(t, e.dir)
	} else {
		e.etcd = singleEtcd(t, e.dir)
	}
	e.cli = etcdClient(t, e.endpoints())
	return e
}

func (e *env) endpoints() []string {
	if e.cluster != nil {
		return e.cluster.endpoints()
	}
	return []string{e.etcd.spec.ClientURL}
}

// addSidecars starts n sidecars; on a cluster they dial the members
// directly.
func (e *env) addSidecars(n int, o sidecarOptions) []*sidecar {
	e.t.Helper()
	if e.cluster != nil {
		o.direct = true
	}
	var out []*sidecar
	for range n {
		s := startSidecar(e.t, e.dir, fmt.Sprintf("s%d", len(e.sidecars)), e.endpoints(), o)
		e.sidecars = append(e.sidecars, s)
		out = append(out, s)
	}
	return out
}

// startClients starts n sidecars with k app clients each, their store pauses up
// to maxSleep.
func (e *env) startClients(n, k int, maxSleep time.Duration) []*app {
	var out []*app
	for _, sc := range e.addSidecars(n, sidecarOptions{}) {
		out = append(out, e.apps(sc, k, maxSleep)...)
	}
	return out
}

// apps makes n app clients of sc, their store pauses up to maxSleep.
func (e *env) apps(sc *sidecar, n int, maxSleep time.Duration) []*app {
	var out []*app
	for range n {
		id := e.clients
		e.clients++
		out = append(out, &app{id: id, owner: fmt.Sprintf("%s-c%d", sc.name, id), sc: sc, store: newStoreClient(e.store, maxSleep), h: e.h})
	}
	return out
}

// runApps starts every app's loop on lock; the WaitGroup says when all
// are done.
func runApps(apps []*app, stop <-chan struct{}, lock string, n int, p holdPlan) *sync.WaitGroup {
	ctx, cancel := stopContext(stop)
	var wg sync.WaitGroup
	for _, a := range apps {
		wg.Go(func() { a.loop(ctx, lock, n, p) })
	}
	go func() {
		wg.Wait()
		cancel()
	}()
	return &wg
}

// holderOf returns the sidecar of lock's current holder, waiting up to 10s
// for one.
func (e *env) holderOf(lock string) *sidecar {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, s := range e.sidecars {
			if !s.alive() {
				continue
			}
			if owner := holding(e.h.snapshot(), lock); owner != "" && slices.Contains(e.ownersOf(s), owner) {
				return s
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	e.dump()
	e.t.Fatalf("no holder of %s after 10s", lock)
	return nil
}

func (e *env) ownersOf(s *sidecar) []string {
	var out []string
	for _, op := range e.h.snapshot() {
		if op.Kind == opAcquire && strings.HasPrefix(op.Owner, s.name+"-") {
			out = append(out, op.Owner)
		}
	}
	return out
}

// holding returns the owner whose grant of lock has no end yet in ops.
func holding(ops []histOp, lock string) string {
	open := map[string]bool{}
	for _, op := range ops {
		if op.Lock != lock {
			continue
		}
		k := fmt.Sprintf("%s\x00%d", op.Owner, op.Fence)
		switch {
		case op.Kind == opAcquire && op.Result == resOK:
			open[k] = true
		case op.Kind != opAcquire:
			delete(open, k)
		}
	}
	for _, op := range slices.Backward(ops) {
		if open[fmt.Sprintf("%s\x00%d", op.Owner, op.Fence)] {
			return op.Owner
		}
	}
	return ""
}

// grantedAfter waits up to d for a grant of lock returned after t0 and
// returns its time.
func (e *env) grantedAfter(lock string, t0, d time.Duration) (time.Duration, bool) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		for _, op := range e.h.snapshot() {
			if op.Kind == opAcquire && op.Result == resOK && op.Lock == lock && op.Return > t0 {
				return op.Return, true
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return 0, false
}

// finish stops the sidecars, counts leftovers, checks the history and adds
// the outcome to the report. The fence and lost-update invariants are
// required unless noFence.
func (e *env) finish(name string, r requirements, more func(*outcome)) *outcome {
	e.t.Helper()
	for _, s := range e.sidecars {
		if s.alive() {
			s.resume()
			s.stop(e.t)
		}
		s.checkRaces(e.t)
	}
	ops := e.h.snapshot()
	o := analyze(name, ops, e.store)
	o.keys, o.leases = leftovers(e.t, e.cli, leaseTTL+3*time.Second)
	checkLinearizable(o, ops, artifactDir())
	o.took = time.Since(e.base)
	if more != nil {
		more(o)
	}
	report.add(o)
	if !e.store.fenced {
		return o
	}
	o.require(e.t, r)
	return o
}

// dump logs what a failing scenario's parts said: the last operations,
// the sidecars' and etcd members' stderr.
func (e *env) dump() {
	ops := e.h.snapshot()
	for _, op := range ops[max(0, len(ops)-20):] {
		e.t.Logf("op %+v", op)
	}
	for _, s := range e.sidecars {
		l := s.logs()
		e.t.Logf("sidecar %s stderr (last 3000 bytes):\n%s", s.name, l[max(0, len(l)-3000):])
	}
	var members []*etcdProc
	if e.cluster != nil {
		members = e.cluster.members
	} else {
		members = []*etcdProc{e.etcd}
	}
	for _, m := range members {
		l := m.stderr.String()
		e.t.Logf("etcd %s stderr (last 2000 bytes):\n%s", m.spec.Name, l[max(0, len(l)-2000):])
	}
}
