// Package storetest is the conformance suite of lockstore.Store: what the
// coordinator counts on from a store, checked the same way on etcd
// (etcdstore) and on the in-memory store (memstore.Store).
package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/lockstore"
)

// Harness is a store under test and its leases.
type Harness struct {
	// Store is the store under test; every test writes under a prefix of
	// its own, so one store may serve them all.
	Store lockstore.Store
	// Grant grants a lease.
	Grant func(t *testing.T) lockstore.LeaseID
	// Revoke revokes a lease: its keys go.
	Revoke func(t *testing.T, id lockstore.LeaseID)
	// Full, when set, raises etcd's NOSPACE alarm (true), or disarms it.
	Full func(t *testing.T, full bool)
}

// Run runs the suite on h.
func Run(t *testing.T, h Harness) {
	for _, tc := range []struct {
		name string
		f    func(*testing.T, *suite)
	}{
		{"TryGrantsAFreeLockOnly", testTry},
		{"QueueTellsWhoIsAhead", testQueue},
		{"TryInComparesTheLine", testTryIn},
		{"JoinTellsTheLine", testJoin},
		{"UpdateComparesRevisions", testUpdate},
		{"DeleteComparesTheCreateRevision", testDelete},
		{"ContendersInKeyOrder", testContenders},
		{"RevokeDeletesTheLeasesKeys", testRevoke},
		{"WatchReportsDeletes", testWatch},
		{"WatchResumesInThePast", testWatchResume},
		{"WatchAllFollowsASnapshot", testWatchAll},
		{"FinishWritesTheOutcomeAsItLetsGo", testFinish},
		{"ConcurrentTriesGrantOne", testConcurrentTries},
		{"CheckAccessWritesNothing", testCheckAccess},
		{"OutOfSpaceRefusesWritesNotDeletes", testOutOfSpace},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.f(t, &suite{h: h, base: fmt.Sprintf("/storetest/%d/%s/", time.Now().UnixNano(), tc.name)})
		})
	}
}

// suite is one test's view of the harness.
type suite struct {
	h    Harness
	base string
}

// lock returns the prefix of lock name; key the contender key of lease id.
func (s *suite) lock(name string) string { return s.base + name + "/" }

func key(lock string, id lockstore.LeaseID) string { return fmt.Sprintf("%s%x", lock, int64(id)) }

func record(owner string) keyspace.Holder {
	now := time.Now().UTC().Truncate(time.Millisecond)
	return keyspace.Holder{Owner: owner, Pod: "pod", Namespace: "ns", Node: "node", AcquiredAt: now, ExpiresAt: now.Add(time.Minute)}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

// must fails the test on a write's error, else returns its outcome.
func must(t *testing.T) func(lockstore.Outcome, error) lockstore.Outcome {
	return func(out lockstore.Outcome, err error) lockstore.Outcome {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
}

func testTry(t *testing.T, s *suite) {
	st, lock := s.h.Store, s.lock("l")
	l1, l2 := s.h.Grant(t), s.h.Grant(t)
	k1, k2 := key(lock, l1), key(lock, l2)
	first := must(t)(st.Try(lock, lockstore.Put{Key: k1, Lease: l1, Record: record("one")}))
	if !first.OK || first.Rev <= 0 {
		t.Fatalf("try of a free lock: %+v", first)
	}
	if ok, err := st.Holds(ctx(t), k1, first.Rev); err != nil || !ok {
		t.Fatalf("the granted key is not there as created at %d: %v %v", first.Rev, ok, err)
	}
	out := must(t)(st.Try(lock, lockstore.Put{Key: k2, Lease: l2, Record: record("two")}))
	if out.OK || out.First == nil || out.First.Key != k1 || out.First.Create != first.Rev || out.First.Lease != l1 || out.First.Holder.Owner != "one" {
		t.Fatalf("try of a held lock: %+v, want refused naming %s at %d", out, k1, first.Rev)
	}
	if cs, _, err := st.Contenders(ctx(t), lock, 0); err != nil || len(cs) != 1 {
		t.Fatalf("a refused try left keys: %+v %v", cs, err)
	}
	f, err := st.First(ctx(t), lock)
	if err != nil || f == nil || f.Key != k1 || f.Create != first.Rev || f.Holder.Owner != "one" || f.Holder.Pod != "pod" {
		t.Fatalf("first = %+v, %v", f, err)
	}
	if f, err := st.First(ctx(t), s.lock("free")); err != nil || f != nil {
		t.Fatalf("first of a free lock = %+v, %v", f, err)
	}
}

func testQueue(t *testing.T, s *suite) {
	st, lock := s.h.Store, s.lock("q")
	var keys []string
	var revs []int64
	for i := range 3 {
		id := s.h.Grant(t)
		k := key(lock, id)
		out := must(t)(st.Queue(lock, lockstore.Put{Key: k, Lease: id, Record: record(fmt.Sprint("w", i))}))
		want := slices.Clone(keys)
		slices.Reverse(want)
		if !out.OK || !slices.Equal(out.Ahead, want) {
			t.Fatalf("queue %d: %+v, want ahead %v (last created first)", i, out, want)
		}
		keys, revs = append(keys, k), append(revs, out.Rev)
	}
	again := must(t)(st.Queue(lock, lockstore.Put{Key: keys[1], Lease: s.h.Grant(t), Record: record("again")}))
	if again.OK {
		t.Fatalf("queued a key that exists: %+v", again)
	}
	ahead, rev, mine, err := st.Ahead(ctx(t), lock, keys[2], revs[2])
	if err != nil || !mine || rev < revs[2] || !slices.Equal(ahead, []string{keys[1], keys[0]}) {
		t.Fatalf("ahead of the third = %v at %d mine %v, %v", ahead, rev, mine, err)
	}
	must(t)(st.Delete(keys[1], revs[1]))
	ahead, _, mine, err = st.Ahead(ctx(t), lock, keys[2], revs[2])
	if err != nil || !mine || !slices.Equal(ahead, []string{keys[0]}) {
		t.Fatalf("ahead after the second left = %v mine %v, %v", ahead, mine, err)
	}
	if _, _, mine, err := st.Ahead(ctx(t), lock, keys[1], revs[1]); err != nil || mine {
		t.Fatalf("a deleted key is still mine (%v)", err)
	}
	if f, err := st.First(ctx(t), lock); err != nil || f.Key != keys[0] {
		t.Fatalf("first = %+v, %v; want the first queued", f, err)
	}
}

func testUpdate(t *testing.T, s *suite) {
	st, lock := s.h.Store, s.lock("u")
	id := s.h.Grant(t)
	k := key(lock, id)
	created := must(t)(st.Try(lock, lockstore.Put{Key: k, Lease: id, Record: record("a")}))
	rec := record("a")
	rec.Queued = 3
	up := must(t)(st.Update(lockstore.Put{Key: k, Lease: id, Record: rec}, created.Rev, created.Rev))
	if !up.OK || up.Rev <= created.Rev {
		t.Fatalf("update at the right revisions: %+v", up)
	}
	if stale := must(t)(st.Update(lockstore.Put{Key: k, Lease: id, Record: record("stale")}, created.Rev, created.Rev)); stale.OK {
		t.Fatal("an update compared with an old mod revision was applied")
	}
	if other := must(t)(st.Update(lockstore.Put{Key: k, Lease: id, Record: record("other")}, created.Rev+100, 0)); other.OK {
		t.Fatal("an update of another create revision was applied")
	}
	cs, _, err := st.Contenders(ctx(t), lock, 0)
	if err != nil || len(cs) != 1 || cs[0].Mod != up.Rev || cs[0].Create != created.Rev || cs[0].Holder.Queued != 3 {
		t.Fatalf("after the update: %+v, %v", cs, err)
	}
	anyMod := must(t)(st.Update(lockstore.Put{Key: k, Lease: id, Record: record("extended")}, created.Rev, 0))
	if !anyMod.OK {
		t.Fatal("an update that compares no mod revision was refused")
	}
	if f, _ := st.First(ctx(t), lock); f == nil || f.Holder.Owner != "extended" || f.Create != created.Rev {
		t.Fatalf("first after the update: %+v", f)
	}
}

func testDelete(t *testing.T, s *suite) {
	st, lock := s.h.Store, s.lock("d")
	id := s.h.Grant(t)
	k := key(lock, id)
	created := must(t)(st.Try(lock, lockstore.Put{Key: k, Lease: id, Record: record("a")}))
	if out := must(t)(st.Delete(k, created.Rev+1)); out.OK {
		t.Fatal("a delete compared with another create revision was applied")
	}
	if ok, _ := st.Holds(ctx(t), k, created.Rev); !ok {
		t.Fatal("the key went")
	}
	if out := must(t)(st.Delete(k, created.Rev)); !out.OK || out.Rev <= created.Rev {
		t.Fatalf("delete at the create revision: %+v", out)
	}
	if ok, _ := st.Holds(ctx(t), k, created.Rev); ok {
		t.Fatal("the key is still there")
	}
	if out := must(t)(st.Delete(k, 0)); out.OK {
		t.Fatal("deleted a key that is not there")
	}
	again := must(t)(st.Try(lock, lockstore.Put{Key: k, Lease: id, Record: record("b")}))
	if out := must(t)(st.Delete(k, 0)); !out.OK || !again.OK {
		t.Fatalf("delete whatever the revision: %+v", out)
	}
}

func testContenders(t *testing.T, s *suite) {
	st := s.h.Store
	ids := []lockstore.LeaseID{s.h.Grant(t), s.h.Grant(t), s.h.Grant(t)}
	// Created in the reverse of key order: the first contender is the one
	// created first, not the first by name.
	for _, name := range []string{"c", "b", "a", "ab"} {
		for i := len(ids) - 1; i >= 0; i-- {
			lock := s.lock(name)
			must(t)(st.Queue(lock, lockstore.Put{Key: key(lock, ids[i]), Lease: ids[i], Record: record(fmt.Sprint(name, i))}))
		}
	}
	cs, more, err := st.Contenders(ctx(t), s.lock("a"), 0)
	if err != nil || more || len(cs) != 3 {
		t.Fatalf("contenders of a: %+v more %v, %v; want 3 and not ab's", cs, more, err)
	}
	if !slices.IsSortedFunc(cs, func(x, y lockstore.Contender) int { return cmpString(x.Key, y.Key) }) {
		t.Errorf("contenders not in key order: %+v", cs)
	}
	for _, c := range cs {
		if c.Lease == 0 || c.Create == 0 || c.Mod < c.Create || c.Holder.Owner == "" {
			t.Errorf("contender %+v lacks a field", c)
		}
	}
	if f, err := st.First(ctx(t), s.lock("a")); err != nil || f.Lease != ids[2] {
		t.Errorf("first of a = %+v, %v; want the one of lease %x, created first", f, err, ids[2])
	}
	all, more, err := st.Contenders(ctx(t), s.base, 5)
	if err != nil || !more || len(all) != 5 || all[0].Key >= all[4].Key {
		t.Fatalf("5 of 12 contenders: %d more %v, %v", len(all), more, err)
	}
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func testRevoke(t *testing.T, s *suite) {
	st := s.h.Store
	id, other := s.h.Grant(t), s.h.Grant(t)
	for _, name := range []string{"x", "y"} {
		must(t)(st.Try(s.lock(name), lockstore.Put{Key: key(s.lock(name), id), Lease: id, Record: record("a")}))
	}
	must(t)(st.Try(s.lock("z"), lockstore.Put{Key: key(s.lock("z"), other), Lease: other, Record: record("b")}))
	if gone, err := st.LeaseGone(ctx(t), id); err != nil || gone {
		t.Fatalf("a live lease is gone: %v", err)
	}
	s.h.Revoke(t, id)
	if gone, err := st.LeaseGone(ctx(t), id); err != nil || !gone {
		t.Fatalf("a revoked lease is not gone: %v", err)
	}
	cs, _, err := st.Contenders(ctx(t), s.base, 0)
	if err != nil || len(cs) != 1 || cs[0].Lease != other {
		t.Fatalf("after the revoke: %+v, %v; want only the other lease's key", cs, err)
	}
	if _, err := st.Try(s.lock("w"), lockstore.Put{Key: key(s.lock("w"), id), Lease: id, Record: record("a")}); !errors.Is(err, lockstore.ErrLeaseGone) {
		t.Fatalf("a write on a revoked lease: %v; want ErrLeaseGone", err)
	}
}

// next returns the next response of a watch.
func next(t *testing.T, ch <-chan lockstore.WatchResponse) lockstore.WatchResponse {
	t.Helper()
	select {
	case r, ok := <-ch:
		if !ok {
			t.Fatal("the watch ended")
		}
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no watch response in 10s")
	}
	return lockstore.WatchResponse{}
}

// deletes collects n deletes from ch, skipping responses without any.
func deletes(t *testing.T, ch <-chan lockstore.WatchResponse, n int) []lockstore.Deletion {
	t.Helper()
	var got []lockstore.Deletion
	for len(got) < n {
		r := next(t, ch)
		if r.Err != nil || r.Compacted {
			t.Fatalf("watch response %+v", r)
		}
		got = append(got, r.Deleted...)
	}
	return got
}

func testWatch(t *testing.T, s *suite) {
	st := s.h.Store
	wctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := st.Watch(wctx, s.lock("w"), 0)
	est := next(t, ch)
	if !est.Established || est.Rev <= 0 {
		t.Fatalf("first response %+v, want established", est)
	}
	id := s.h.Grant(t)
	mine, elsewhere := key(s.lock("w"), id), key(s.lock("v"), id)
	a := must(t)(st.Try(s.lock("w"), lockstore.Put{Key: mine, Lease: id, Record: record("a")}))
	must(t)(st.Try(s.lock("v"), lockstore.Put{Key: elsewhere, Lease: id, Record: record("a")}))
	if a.Rev <= est.Rev {
		t.Errorf("a write after the watch at %d, not after its revision %d", a.Rev, est.Rev)
	}
	must(t)(st.Update(lockstore.Put{Key: mine, Lease: id, Record: record("b")}, a.Rev, 0))
	must(t)(st.Delete(elsewhere, 0))
	del := must(t)(st.Delete(mine, a.Rev))
	got := deletes(t, ch, 1)
	if len(got) != 1 || got[0].Key != mine || got[0].Rev != del.Rev {
		t.Fatalf("deletes %+v, want only %s at %d (no puts, nothing of another prefix)", got, mine, del.Rev)
	}
	cancel()
	for range ch { // the watch ends with its context
	}
}

func testWatchResume(t *testing.T, s *suite) {
	st := s.h.Store
	lock := s.lock("r")
	id1, id2 := s.h.Grant(t), s.h.Grant(t)
	var dels []int64
	for _, id := range []lockstore.LeaseID{id1, id2} {
		k := key(lock, id)
		c := must(t)(st.Queue(lock, lockstore.Put{Key: k, Lease: id, Record: record("a")}))
		dels = append(dels, must(t)(st.Delete(k, c.Rev)).Rev)
	}
	wctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := st.Watch(wctx, lock, dels[0])
	if r := next(t, ch); !r.Established {
		t.Fatalf("first response %+v, want established", r)
	}
	got := deletes(t, ch, 2)
	if len(got) != 2 || got[0].Rev != dels[0] || got[1].Rev != dels[1] || got[0].Key != key(lock, id1) {
		t.Fatalf("deletes since %d: %+v, want both in order", dels[0], got)
	}
}

func testConcurrentTries(t *testing.T, s *suite) {
	st := s.h.Store
	const n = 16
	ids := make([]lockstore.LeaseID, n)
	for i := range ids {
		ids[i] = s.h.Grant(t)
	}
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		granted []int
		own     = make([]lockstore.Outcome, n)
	)
	for i := range n {
		wg.Go(func() {
			one, err1 := st.Try(s.lock("one"), lockstore.Put{Key: key(s.lock("one"), ids[i]), Lease: ids[i], Record: record(fmt.Sprint(i))})
			mine, err2 := st.Try(s.lock(fmt.Sprint("own", i)), lockstore.Put{Key: key(s.lock(fmt.Sprint("own", i)), ids[i]), Lease: ids[i], Record: record("x")})
			mu.Lock()
			defer mu.Unlock()
			if err1 != nil || err2 != nil {
				t.Error(err1, err2)
				return
			}
			if one.OK {
				granted = append(granted, i)
			}
			own[i] = mine
		})
	}
	wg.Wait()
	if len(granted) != 1 {
		t.Fatalf("%d tries granted one lock: %v", len(granted), granted)
	}
	// Writes that went together may share a revision; each key was
	// created at the revision its grant says.
	for i, out := range own {
		k := key(s.lock(fmt.Sprint("own", i)), ids[i])
		if ok, err := st.Holds(ctx(t), k, out.Rev); !out.OK || err != nil || !ok {
			t.Errorf("try of a free lock of its own: %+v; created there: %v (%v)", out, ok, err)
		}
	}
}
