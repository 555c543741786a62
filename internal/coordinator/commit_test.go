package coordinator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

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

// together runs op(0..n-1) at once, all queued behind one transaction held
// in flight, fails the test on any error and returns the number of etcd
// transactions they made.
func together(t *testing.T, s *sidecar, n int, op func(i int) error) int64 {
	t.Helper()
	queued, send := hold(t, s.c.commits)
	before := s.calls.Txns()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = op(i) })
	}
	queued(n)
	send()
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return s.calls.Txns() - before
}

// TestGroupCommit: tries, a queueing and releases that arrive together
// share one etcd transaction, and each gets its own outcome: grants at
// the revision that created their keys, refusals naming the holder.
func TestGroupCommit(t *testing.T) {
	s, other := newSidecar(t, "pod-a"), newSidecar(t, "pod-b")
	const n, taken = 16, 4 // locks 0..taken-1 are held by other
	keys := make([]string, n)
	heldBy := map[string]Grant{}
	for i := range keys {
		keys[i] = fmt.Sprintf("flow/%d", i)
		if i < taken {
			heldBy[keys[i]] = other.mustAcquire(t, key(t, keys[i]), "theirs")
		}
	}
	waitKey := "flow/wait"
	theirs := other.mustAcquire(t, key(t, waitKey), "theirs")

	var sizes []int // guarded by the committer: one batch at a time
	s.c.commits.committed = func(n int) { sizes = append(sizes, n) }
	queued, send := hold(t, s.c.commits)
	before := s.calls.Txns()
	grants := make([]Grant, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range keys {
		wg.Go(func() { grants[i], errs[i] = s.acquire(t, key(t, keys[i]), "mine", 0) })
	}
	var waited Grant
	var waitErr error
	wg.Go(func() { waited, waitErr = s.acquire(t, key(t, waitKey), "mine", 5*time.Second) })
	queued(n + 1)
	send()
	waitFor(t, 5*time.Second, "the waiter queued in etcd", func() bool { return len(s.contenders(t, key(t, waitKey))) == 2 })
	if got := s.calls.Txns() - before; got != 1 {
		t.Errorf("%d tries and a queueing made %d etcd transactions, want 1", n, got)
	}
	if _, err := other.c.Release(context.Background(), key(t, waitKey), "theirs"); err != nil {
		t.Fatal(err)
	}
	wg.Wait()

	var fence int64
	for i, k := range keys {
		if g, ok := heldBy[k]; ok {
			var he *HeldError
			if !errors.As(errs[i], &he) || he.Holder.Pod != "pod-b" || he.Fence != g.Fence {
				t.Errorf("try of %s held by pod-b at fence %d: %v", k, g.Fence, errs[i])
			}
			continue
		}
		if errs[i] != nil {
			t.Fatalf("try of free %s: %v", k, errs[i])
		}
		resp, err := s.cli.Get(context.Background(), s.c.Layout().LockPrefix(key(t, k)), clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) != 1 || resp.Kvs[0].CreateRevision != grants[i].Fence {
			t.Errorf("%s granted at fence %d; etcd has %v", k, grants[i].Fence, resp.Kvs)
		}
		if fence == 0 {
			fence = grants[i].Fence
		} else if grants[i].Fence != fence {
			t.Errorf("%s granted at fence %d, another lock of the same transaction at %d", k, grants[i].Fence, fence)
		}
	}
	if waitErr != nil || waited.Fence <= theirs.Fence {
		t.Fatalf("waiter: %+v, %v; want a grant after fence %d", waited, waitErr, theirs.Fence)
	}

	// The releases of the granted locks, together.
	if got := together(t, s, n-taken, func(i int) error {
		_, err := s.c.Release(context.Background(), key(t, keys[taken+i]), "mine")
		return err
	}); got != 1 {
		t.Errorf("%d releases made %d etcd transactions, want 1", n-taken, got)
	}
	if want := []int{n + 1, n - taken}; !slices.Equal(sizes, want) {
		t.Errorf("batches of %v reported, want %v: the tries with the queueing, then the releases", sizes, want)
	}
	for i := taken; i < n; i++ {
		if left := s.contenders(t, key(t, keys[i])); len(left) != 0 {
			t.Errorf("%s released, yet etcd has %v", keys[i], left)
		}
	}
}

// TestGroupCommitTooManyOps: a batch larger than etcd's --max-txn-ops
// (128) allows is committed in halves, and batches stay that small.
func TestGroupCommitTooManyOps(t *testing.T) {
	s := newSidecar(t, "pod-a")
	const n = 130
	s.c.commits.mu.Lock()
	s.c.commits.max = 200
	s.c.commits.mu.Unlock()
	got := together(t, s, n, func(i int) error {
		_, err := s.acquire(t, key(t, fmt.Sprintf("many/%d", i)), "mine", 0)
		return err
	})
	if got != 3 {
		t.Errorf("%d tries made %d etcd transactions, want 3: the refused batch and its halves", n, got)
	}
	if s.c.commits.max != n/2 {
		t.Errorf("batches of up to %d after etcd refused %d, want %d", s.c.commits.max, n, n/2)
	}
}

// TestGroupCommitSameKey: two transactions on one key never share a
// batch (etcd refuses a transaction that writes a key twice).
func TestGroupCommitSameKey(t *testing.T) {
	s := newSidecar(t, "pod-a")
	k := s.c.Layout().Base() + "same"
	queued, send := hold(t, s.c.commits)
	before := s.calls.Txns()
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i, v := range []string{"1", "2"} {
		wg.Go(func() {
			_, errs[i] = s.c.commits.do(lockTxn{key: k, then: []clientv3.Op{clientv3.OpPut(k, v)}})
		})
		queued(i + 1)
	}
	wg.Go(func() {
		_, errs[2] = s.c.commits.do(lockTxn{key: k + "/other", then: []clientv3.Op{clientv3.OpPut(k+"/other", "3")}})
	})
	queued(3)
	send()
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if got := s.calls.Txns() - before; got != 2 {
		t.Errorf("two puts of one key and one of another made %d transactions, want 2", got)
	}
	resp, err := s.cli.Get(context.Background(), k)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "2" || resp.Kvs[0].Version != 2 {
		t.Errorf("%s: %v, want the second put after the first", k, resp.Kvs)
	}
	if _, err := s.cli.Delete(context.Background(), k, clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
}

// TestGroupCommitTooLarge: a batch of more bytes than etcd's
// --max-request-bytes (1.5 MiB) allows is committed in halves.
func TestGroupCommitTooLarge(t *testing.T) {
	s := newSidecar(t, "pod-a")
	// 7 × 256 KiB: 1.75 MiB, over etcd's limit and under the client's
	// own (2 MiB).
	const n = 7
	value := strings.Repeat("x", 256<<10)
	base := s.c.Layout().Base() + "large/"
	got := together(t, s, n, func(i int) error {
		k := fmt.Sprintf("%s%d", base, i)
		_, err := s.c.commits.do(lockTxn{key: k, then: []clientv3.Op{clientv3.OpPut(k, value)}})
		return err
	})
	if got != 3 {
		t.Errorf("%d puts of 256 KiB made %d transactions, want 3: the refused batch and its halves", n, got)
	}
	if s.c.commits.max != maxBatch {
		t.Errorf("batches of up to %d after a batch too large in bytes, want %d still", s.c.commits.max, maxBatch)
	}
	resp, err := s.cli.Delete(context.Background(), base, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Deleted != n {
		t.Errorf("%d of the %d keys were written", resp.Deleted, n)
	}
}
