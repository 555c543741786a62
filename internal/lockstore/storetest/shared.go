package storetest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/lockstore"
)

// unitKey is a shared claim's contender key: several per lease.
func unitKey(lock string, id lockstore.LeaseID, tag int) string {
	return fmt.Sprintf("%s%x-%08x", lock, int64(id), tag)
}

func unitRecord(owner string, limit int) keyspace.Holder {
	r := record(owner)
	r.Claim = keyspace.Claim{Limit: limit, Weight: 1}
	return r
}

func keysOf(cs []lockstore.Contender) []string {
	var ks []string
	for _, c := range cs {
		ks = append(ks, c.Key)
	}
	return ks
}

// testTryIn checks the shared claims' try: granted while nobody joined the
// line since the caller's read, refused (writing nothing, telling the
// line) otherwise.
func testTryIn(t *testing.T, s *suite) {
	st, lock := s.h.Store, s.lock("s")
	id := s.h.Grant(t)
	k1, k2, k3 := unitKey(lock, id, 1), unitKey(lock, id, 2), unitKey(lock, id, 3)
	first := must(t)(st.TryIn(lock, lockstore.Put{Key: k1, Lease: id, Record: unitRecord("one", 4)}, 0))
	if !first.OK {
		t.Fatalf("try in a free lock: %+v", first)
	}
	out := must(t)(st.TryIn(lock, lockstore.Put{Key: k2, Lease: id, Record: unitRecord("two", 4)}, 0))
	if out.OK || !slices.Equal(keysOf(out.Line), []string{k1}) || out.Line[0].Holder.Limit != 4 || out.Line[0].Create != first.Rev {
		t.Fatalf("try in a lock with a contender, seen nothing: %+v, want refused with the line [%s]", out, k1)
	}
	if cs, _, _ := st.Contenders(ctx(t), lock, 0); len(cs) != 1 {
		t.Fatalf("a refused try left keys: %+v", cs)
	}
	second := must(t)(st.TryIn(lock, lockstore.Put{Key: k2, Lease: id, Record: unitRecord("two", 4)}, out.Rev))
	if !second.OK || second.Rev <= first.Rev {
		t.Fatalf("try in a line seen as it is: %+v", second)
	}
	out = must(t)(st.TryIn(lock, lockstore.Put{Key: k3, Lease: id, Record: unitRecord("three", 4)}, first.Rev))
	if out.OK || !slices.Equal(keysOf(out.Line), []string{k1, k2}) {
		t.Fatalf("try past a contender not seen: %+v, want refused with the line [%s %s]", out, k1, k2)
	}
	must(t)(st.Delete(k1, first.Rev))
	third := must(t)(st.TryIn(lock, lockstore.Put{Key: k3, Lease: id, Record: unitRecord("three", 4)}, second.Rev))
	if !third.OK {
		t.Fatalf("a contender that left made the line change: %+v", third)
	}
}

// testJoin checks that joining a line tells the contenders ahead with
// their claims, and Line reads them again.
func testJoin(t *testing.T, s *suite) {
	st, lock := s.h.Store, s.lock("j")
	id := s.h.Grant(t)
	var keys []string
	var revs []int64
	for i := range 3 {
		k := unitKey(lock, id, i)
		out := must(t)(st.Join(lock, lockstore.Put{Key: k, Lease: id, Record: unitRecord(fmt.Sprint("w", i), 2)}))
		if !out.OK || !slices.Equal(keysOf(out.Line), keys) {
			t.Fatalf("join %d: %+v, want the line %v", i, out, keys)
		}
		for j, c := range out.Line {
			if c.Holder.Owner != fmt.Sprint("w", j) || c.Holder.Limit != 2 || c.Create != revs[j] {
				t.Fatalf("join %d: contender %d is %+v", i, j, c)
			}
		}
		keys, revs = append(keys, k), append(revs, out.Rev)
	}
	if again := must(t)(st.Join(lock, lockstore.Put{Key: keys[1], Lease: id, Record: unitRecord("again", 2)})); again.OK {
		t.Fatalf("joined with a key that exists: %+v", again)
	}
	line, rev, mine, err := st.Line(ctx(t), lock, keys[2], revs[2])
	if err != nil || !mine || rev < revs[2] || !slices.Equal(keysOf(line), keys[:2]) {
		t.Fatalf("line of the third = %v at %d mine %v, %v", keysOf(line), rev, mine, err)
	}
	must(t)(st.Delete(keys[0], revs[0]))
	if line, _, mine, err = st.Line(ctx(t), lock, keys[2], revs[2]); err != nil || !mine || !slices.Equal(keysOf(line), keys[1:2]) {
		t.Fatalf("line after the first left = %v mine %v, %v", keysOf(line), mine, err)
	}
	if _, _, mine, err := st.Line(ctx(t), lock, keys[0], revs[0]); err != nil || mine {
		t.Fatalf("a deleted key is still mine (%v)", err)
	}
}

// changes reads WatchAll responses until n changes came.
func changes(t *testing.T, ch <-chan lockstore.WatchResponse, n int) []lockstore.Change {
	t.Helper()
	var got []lockstore.Change
	for len(got) < n {
		r := next(t, ch)
		if r.Err != nil || r.Compacted {
			t.Fatalf("watch ended: %+v", r)
		}
		got = append(got, r.Changes...)
	}
	return got
}

// testWatchAll checks that an observer's snapshot and watch from its
// revision see every write and delete of the prefix, in order, with the
// values written.
func testWatchAll(t *testing.T, s *suite) {
	st, lock := s.h.Store, s.lock("o")
	id := s.h.Grant(t)
	k1, k2 := unitKey(lock, id, 1), unitKey(lock, id, 2)
	first := must(t)(st.Join(lock, lockstore.Put{Key: k1, Lease: id, Record: unitRecord("one", 2)}))
	cs, rev, err := st.Snapshot(ctx(t), s.base)
	if err != nil || len(cs) != 1 || cs[0].Key != k1 || cs[0].Holder.Owner != "one" || rev < first.Rev {
		t.Fatalf("snapshot = %+v at %d, %v", cs, rev, err)
	}
	second := must(t)(st.Join(lock, lockstore.Put{Key: k2, Lease: id, Record: unitRecord("two", 2)}))
	upd := must(t)(st.Update(lockstore.Put{Key: k2, Lease: id, Record: unitRecord("two-again", 2)}, second.Rev, 0))
	del := must(t)(st.Delete(k1, first.Rev))
	wctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := st.WatchAll(wctx, s.base, rev+1) // from the snapshot: nothing missed
	if est := next(t, ch); !est.Established {
		t.Fatalf("first response %+v, want established", est)
	}
	got := changes(t, ch, 3)
	if len(got) != 3 ||
		got[0].Deleted || got[0].Key != k2 || got[0].Rev != second.Rev || got[0].Create != second.Rev || got[0].Holder.Owner != "two" ||
		got[1].Deleted || got[1].Rev != upd.Rev || got[1].Holder.Owner != "two-again" || got[1].Create != second.Rev ||
		!got[2].Deleted || got[2].Key != k1 || got[2].Rev != del.Rev {
		t.Fatalf("changes %+v", got)
	}
	cancel()
	for range ch {
	}
}

// testFinish checks a run-once holder's last write: its outcome written
// and its key deleted in one step, only while it holds the key.
func testFinish(t *testing.T, s *suite) {
	st, lock := s.h.Store, s.lock("f")
	id := s.h.Grant(t)
	k, rec := key(lock, id), s.base+"once/f"
	held := must(t)(st.Try(lock, lockstore.Put{Key: k, Lease: id, Record: record("runner")}))
	if out := must(t)(st.Finish(k, held.Rev+1, rec, "stale", 0, "")); out.OK {
		t.Fatalf("finished with a fence that does not hold: %+v", out)
	}
	if _, found, err := st.Read(ctx(t), rec); err != nil || found {
		t.Fatalf("a refused finish wrote its record (%v)", err)
	}
	lease, err := st.GrantLease(ctx(t), time.Hour)
	if err != nil || lease == 0 {
		t.Fatalf("grant lease: %d, %v", lease, err)
	}
	if out := must(t)(st.Finish(k, held.Rev, rec, "done", lease, "")); !out.OK || out.Rev <= held.Rev {
		t.Fatalf("finish: %+v", out)
	}
	if v, found, err := st.Read(ctx(t), rec); err != nil || !found || string(v) != "done" {
		t.Fatalf("record %q found %v, %v", v, found, err)
	}
	if f, err := st.First(ctx(t), lock); err != nil || f != nil {
		t.Fatalf("the holder's key is still there: %+v, %v", f, err)
	}
}
