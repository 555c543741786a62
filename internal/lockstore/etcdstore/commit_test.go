package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/lockstore"
	"github.com/baton-dev/baton/internal/testing/etcdtest"
)

// TestGroupCommit: tries, a queueing and deletes that arrive together
// share one etcd transaction, and each gets its own outcome: grants at the
// revision that created their keys, refusals naming the holder.
func TestGroupCommit(t *testing.T) {
	f := newFixture(t)
	var sizes []int // guarded by the committer: one batch at a time
	f.s.commits.committed = func(n int) { sizes = append(sizes, n) }
	mine, theirs := f.grant(t), f.grant(t)
	const n, taken = 16, 4 // locks 0..taken-1 are held by theirs
	locks := make([]string, n)
	held := map[int]lockstore.Outcome{}
	for i := range locks {
		locks[i] = fmt.Sprintf("%sflow/%d/", f.base, i)
		if i < taken {
			held[i] = f.try(t, locks[i], theirs, "theirs")
		}
	}
	waitLock := f.base + "flow/wait/"
	f.try(t, waitLock, theirs, "theirs")
	sizes = nil

	queued, send := hold(t, f.s.commits)
	before := f.calls.Txns()
	outs := make([]lockstore.Outcome, n+1)
	errs := make([]error, n+1)
	var wg sync.WaitGroup
	for i := range locks {
		wg.Go(func() {
			outs[i], errs[i] = f.s.Try(locks[i], lockstore.Put{Key: locks[i] + "mine", Lease: mine, Record: keyspace.Holder{Owner: "mine"}})
		})
	}
	wg.Go(func() {
		outs[n], errs[n] = f.s.Queue(waitLock, lockstore.Put{Key: waitLock + "mine", Lease: mine, Record: keyspace.Holder{Owner: "mine"}})
	})
	queued(n + 1)
	send()
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if got := f.calls.Txns() - before; got != 1 {
		t.Errorf("%d tries and a queueing made %d etcd transactions, want 1", n, got)
	}
	rev := outs[taken].Rev
	for i, out := range outs[:n] {
		if h, ok := held[i]; ok {
			if out.OK || out.First == nil || out.First.Holder.Owner != "theirs" || out.First.Create != h.Rev {
				t.Errorf("try of %s held at %d: %+v", locks[i], h.Rev, out)
			}
			continue
		}
		if !out.OK || out.Rev != rev {
			t.Errorf("try of free %s: %+v, want granted at the batch's revision %d", locks[i], out, rev)
		}
		if ok, err := f.s.Holds(context.Background(), locks[i]+"mine", rev); err != nil || !ok {
			t.Errorf("%s granted at %d; etcd has no such key (%v)", locks[i], rev, err)
		}
	}
	if q := outs[n]; !q.OK || !slices.Equal(q.Ahead, []string{waitLock + "theirs"}) {
		t.Errorf("queueing: %+v, want one contender ahead", q)
	}

	// The deletes of the granted keys, together.
	if got := f.together(t, n-taken, func(i int) error {
		out, err := f.s.Delete(locks[taken+i]+"mine", rev)
		if err == nil && !out.OK {
			err = fmt.Errorf("delete of %s refused", locks[taken+i])
		}
		return err
	}); got != 1 {
		t.Errorf("%d deletes made %d etcd transactions, want 1", n-taken, got)
	}
	if want := []int{n + 1, n - taken}; !slices.Equal(sizes, want) {
		t.Errorf("batches of %v reported, want %v: the tries with the queueing, then the deletes", sizes, want)
	}
}

// try has lease id try lock; the lock must be free.
func (f *fixture) try(t *testing.T, lock string, id lockstore.LeaseID, owner string) lockstore.Outcome {
	t.Helper()
	out, err := f.s.Try(lock, lockstore.Put{Key: lock + owner, Lease: id, Record: keyspace.Holder{Owner: owner}})
	if err != nil || !out.OK {
		t.Fatalf("try %s: %+v, %v", lock, out, err)
	}
	return out
}

// TestGroupCommitTooManyOps: a batch larger than etcd's --max-txn-ops
// (128) allows is committed in halves, and batches stay that small.
func TestGroupCommitTooManyOps(t *testing.T) {
	f := newFixture(t)
	id := f.grant(t)
	const n = 130
	f.s.commits.mu.Lock()
	f.s.commits.max = 200
	f.s.commits.mu.Unlock()
	got := f.together(t, n, func(i int) error {
		lock := fmt.Sprintf("%smany/%d/", f.base, i)
		_, err := f.s.Try(lock, lockstore.Put{Key: lock + "k", Lease: id})
		return err
	})
	if got != 3 {
		t.Errorf("%d tries made %d etcd transactions, want 3: the refused batch and its halves", n, got)
	}
	if f.s.commits.max != n/2 {
		t.Errorf("batches of up to %d after etcd refused %d, want %d", f.s.commits.max, n, n/2)
	}
}

// TestGroupCommitSameKey: two transactions on one key never share a
// batch (etcd refuses a transaction that writes a key twice).
func TestGroupCommitSameKey(t *testing.T) {
	f := newFixture(t)
	k := f.base + "same"
	queued, send := hold(t, f.s.commits)
	before := f.calls.Txns()
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i, v := range []string{"1", "2"} {
		wg.Go(func() {
			_, errs[i] = f.s.commits.do(lockTxn{key: k, then: []clientv3.Op{clientv3.OpPut(k, v)}})
		})
		queued(i + 1)
	}
	wg.Go(func() {
		_, errs[2] = f.s.commits.do(lockTxn{key: k + "/other", then: []clientv3.Op{clientv3.OpPut(k+"/other", "3")}})
	})
	queued(3)
	send()
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if got := f.calls.Txns() - before; got != 2 {
		t.Errorf("two puts of one key and one of another made %d transactions, want 2", got)
	}
	resp, err := f.cli.Get(context.Background(), k)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "2" || resp.Kvs[0].Version != 2 {
		t.Errorf("%s: %v, want the second put after the first", k, resp.Kvs)
	}
}

// TestGroupCommitTooLarge: a batch of more bytes than etcd's
// --max-request-bytes (1.5 MiB) allows is committed in halves.
func TestGroupCommitTooLarge(t *testing.T) {
	f := newFixture(t)
	// 7 × 256 KiB: 1.75 MiB, over etcd's limit and under the client's
	// own (2 MiB).
	const n = 7
	value := strings.Repeat("x", 256<<10)
	base := f.base + "large/"
	got := f.together(t, n, func(i int) error {
		k := fmt.Sprintf("%s%d", base, i)
		_, err := f.s.commits.do(lockTxn{key: k, then: []clientv3.Op{clientv3.OpPut(k, value)}})
		return err
	})
	if got != 3 {
		t.Errorf("%d puts of 256 KiB made %d transactions, want 3: the refused batch and its halves", n, got)
	}
	if f.s.commits.max != maxBatch {
		t.Errorf("batches of up to %d after a batch too large in bytes, want %d still", f.s.commits.max, maxBatch)
	}
	resp, err := f.cli.Delete(context.Background(), base, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Deleted != n {
		t.Errorf("%d of the %d keys were written", resp.Deleted, n)
	}
}

// TestGroupCommitSameLock checks that two contenders joining one lock's
// line are never carried by one transaction, which would give them one
// create revision: one place in line and one fence for two grants.
func TestGroupCommitSameLock(t *testing.T) {
	f := newFixture(t)
	lock := f.base + "sem/"
	id := f.grant(t)
	queued, send := hold(t, f.s.commits)
	outs := make([]lockstore.Outcome, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() {
			outs[i], errs[i] = f.s.Join(lock, lockstore.Put{Key: fmt.Sprintf("%s%x-%08x", lock, int64(id), i), Lease: id,
				Record: keyspace.Holder{Owner: fmt.Sprint("o", i), Claim: keyspace.Claim{Limit: 4, Weight: 1}}})
		})
		queued(i + 1)
	}
	send()
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	revs := map[int64]bool{}
	for i, out := range outs {
		if !out.OK || revs[out.Rev] {
			t.Fatalf("join %d: %+v; create revisions so far %v", i, out, revs)
		}
		revs[out.Rev] = true
	}
}

// TestGroupCommitReadsSeeTheBatch: a contender that queues or joins in the
// same etcd transaction as the release of the contender ahead of it sees
// its lock's line without that contender, though it arrived first. The
// delete has the read's revision, and a watch from the next one never
// delivers it: a waiter told it was still ahead would wait for it forever.
// A try in that transaction is judged on the line before it, and its
// refusal names the holder it was refused for.
func TestGroupCommitReadsSeeTheBatch(t *testing.T) {
	f := newFixture(t)
	theirs, mine := f.grant(t), f.grant(t)
	queueLock, joinLock, tryLock := f.base+"queue/", f.base+"join/", f.base+"try/"
	held := map[string]lockstore.Outcome{}
	for _, l := range []string{queueLock, joinLock, tryLock} {
		held[l] = f.try(t, l, theirs, "theirs")
	}
	queued, send := hold(t, f.s.commits)
	var outs [3]lockstore.Outcome
	var errs [6]error
	var wg sync.WaitGroup
	put := func(l string) lockstore.Put {
		return lockstore.Put{Key: l + "mine", Lease: mine, Record: keyspace.Holder{Owner: "mine"}}
	}
	wg.Go(func() { outs[0], errs[0] = f.s.Queue(queueLock, put(queueLock)) })
	queued(1)
	wg.Go(func() { outs[1], errs[1] = f.s.Join(joinLock, put(joinLock)) })
	queued(2)
	wg.Go(func() { outs[2], errs[2] = f.s.Try(tryLock, put(tryLock)) })
	queued(3)
	for i, l := range []string{queueLock, joinLock, tryLock} {
		wg.Go(func() {
			out, err := f.s.Delete(l+"theirs", held[l].Rev)
			if err == nil && !out.OK {
				err = fmt.Errorf("delete of %stheirs refused", l)
			}
			errs[3+i] = err
		})
		queued(4 + i)
	}
	before := f.calls.Txns()
	send()
	wg.Wait()
	if err := errors.Join(errs[:]...); err != nil {
		t.Fatal(err)
	}
	if got := f.calls.Txns() - before; got != 1 {
		t.Fatalf("3 contenders and 3 releases made %d etcd transactions, want 1", got)
	}
	if q := outs[0]; !q.OK || len(q.Ahead) != 0 {
		t.Errorf("queueing behind a contender released in the same transaction: %+v, want first in line", q)
	}
	if j := outs[1]; !j.OK || len(j.Line) != 0 {
		t.Errorf("joining behind a contender released in the same transaction: %+v, want an empty line ahead", j)
	}
	// etcd evaluates a transaction's compares before its operations: the
	// try saw the lock held, and its refusal names the holder it saw.
	if tr := outs[2]; tr.OK || tr.First == nil || tr.First.Holder.Owner != "theirs" || tr.First.Create != held[tryLock].Rev {
		t.Errorf("a try of a lock released in the same transaction: %+v, want refused naming theirs, created at %d", tr, held[tryLock].Rev)
	}
}

// TestGroupCommitOutOfSpace: while etcd's NOSPACE alarm is raised, a batch
// with writes is refused whole, and the releases in it are committed again
// without them: a holder can always let go, and make room.
func TestGroupCommitOutOfSpace(t *testing.T) {
	f := newFixture(t)
	held, other := f.grant(t), f.grant(t)
	lock := f.base + "held/"
	granted := f.try(t, lock, held, "holder")
	etcdtest.SetNoSpace(t, f.cli, true)
	t.Cleanup(func() { etcdtest.SetNoSpace(t, f.cli, false) })

	queued, send := hold(t, f.s.commits)
	var tryErr, delErr error
	var del lockstore.Outcome
	var wg sync.WaitGroup
	wg.Go(func() {
		_, tryErr = f.s.Try(f.base+"free/", lockstore.Put{Key: f.base + "free/b", Lease: other, Record: keyspace.Holder{Owner: "b"}})
	})
	wg.Go(func() { del, delErr = f.s.Delete(lock+"holder", granted.Rev) })
	queued(2)
	send()
	wg.Wait()
	if !errors.Is(tryErr, lockstore.ErrNoSpace) {
		t.Errorf("the try batched with a release: %v, want ErrNoSpace", tryErr)
	}
	if delErr != nil || !del.OK {
		t.Errorf("the release batched with a try: %+v %v, want it applied", del, delErr)
	}
	if cs, _, err := f.s.Contenders(context.Background(), f.base, 0); err != nil || len(cs) != 0 {
		t.Errorf("keys left: %+v %v", cs, err)
	}
}
