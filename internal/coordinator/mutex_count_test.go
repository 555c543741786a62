//go:build lockcount

package coordinator

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// mutexGoal is how often an acquire or a release may take the engine's
// core mutexes (docs/design.md). A try granted takes them to decide and to
// be granted. A refusal takes them to decide, and once more to leave the
// turn, end its flight and drop its reference to the line; its read needs
// none (the lock's other tries here wait for its outcome). A blocking
// acquire handed over takes them to decide and to be granted: its
// registration with the lock's watch, and its end, take that watch's own
// mutex (lockWatch.mu); its contender key, once written, is noted with no
// mutex (entry.placing); the watch's opening, wake-ups and establishment,
// and the delete it delivers, take none.
const mutexGoal = 2

// TestMutexTakenPerOperation counts how often the engine's core mutexes
// (Coordinator.mu, the watch hub's and the etcd reader's) are taken per
// operation, the least of several runs (a timer of the engine's may take
// them meanwhile), and holds each count to mutexGoal. make test runs it
// (go test -tags lockcount), apart from the packages' tests run together,
// so that its build adds no load to their timed cases.
func TestMutexTakenPerOperation(t *testing.T) {
	a, b := newSidecar(t, "pod-a"), newSidecar(t, "pod-b")
	taken := func(s *sidecar) int64 {
		return s.c.mu.taken.Load() + s.c.hub.mu.taken.Load() + s.c.reads.mu.taken.Load()
	}
	least := func(runs int, op func(i int) int64) int64 {
		best := int64(-1)
		for i := range runs {
			if n := op(i); best < 0 || n < best {
				best = n
			}
		}
		return best
	}
	ctx := context.Background()
	got := map[string]int64{}
	got["try, granted"] = least(5, func(i int) int64 {
		k := key(t, fmt.Sprintf("free-%d", i))
		before := taken(a)
		if _, err := a.c.Acquire(ctx, AcquireRequest{Key: k, Owner: "o", TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
		n := taken(a) - before
		a.mustRelease(t, k, "o")
		return n
	})
	got["release"] = least(5, func(i int) int64 {
		k := key(t, fmt.Sprintf("held-%d", i))
		a.mustAcquire(t, k, "o")
		before := taken(a)
		a.mustRelease(t, k, "o")
		return taken(a) - before
	})
	elsewhere := key(t, "elsewhere")
	b.mustAcquire(t, elsewhere, "holder")
	got["try, refused"] = least(5, func(int) int64 {
		before := taken(a)
		if _, err := a.c.Acquire(ctx, AcquireRequest{Key: elsewhere, Owner: "o"}); !errors.Is(err, ErrHeld) {
			t.Fatalf("a try of a lock held elsewhere: %v", err)
		}
		return taken(a) - before
	})
	var takers []string // the least run's
	got["blocking acquire, handed over"] = least(3, func(i int) int64 {
		k := key(t, fmt.Sprintf("handed-%d", i))
		b.mustAcquire(t, k, "holder")
		trace(a, true)
		before := taken(a)
		granted := make(chan error, 1)
		go func() {
			_, err := a.c.Acquire(ctx, AcquireRequest{Key: k, Owner: "waiter", Wait: 10 * time.Second})
			granted <- err
		}()
		waitFor(t, 5*time.Second, "queued", func() bool { return len(a.contenders(t, k)) == 2 })
		b.mustRelease(t, k, "holder")
		if err := <-granted; err != nil {
			t.Fatal(err)
		}
		n := taken(a) - before
		if took := trace(a, false); takers == nil || len(took) < len(takers) {
			takers = took
		}
		a.mustRelease(t, k, "waiter")
		return n
	})
	for op, n := range got {
		t.Logf("%s: the core mutexes taken %d times (goal %d)", op, n, mutexGoal)
		if n > mutexGoal {
			t.Errorf("%s takes the core mutexes %d times; at most %d", op, n, mutexGoal)
		}
	}
	// Who took them in a blocking acquire, for whoever brings it down.
	for _, who := range takers {
		t.Logf("blocking acquire: taken by %s", who)
	}
}

// trace starts or stops noting who takes s's core mutexes, and returns
// who took them since it started.
func trace(s *sidecar, on bool) []string {
	var took []string
	for _, m := range []*engineMutex{&s.c.mu, &s.c.hub.mu, &s.c.reads.mu} {
		took = append(took, m.trace(on)...)
	}
	return took
}
