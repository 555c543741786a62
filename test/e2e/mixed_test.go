//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	baton "github.com/baton-dev/baton/clients/go"
	"github.com/baton-dev/baton/clients/go/lockapi"
)

// TestS24MixedVersions: sidecars of the last release (hack/last-release,
// built by make into $BATON_LAST_RELEASE) and of this build share one
// scope, as they do in a cluster after helm upgrade until every pod has
// restarted. App clients on all of them loop on a lock (fenced
// increments), a semaphore of 2 and a read/write lock, while the sidecar
// of a holder is SIGKILLed and restarted, one of each version in turn: no
// two holders of the lock, never more than 2 of the semaphore, never a
// writer with anyone, no stale write accepted, no update lost. Then
// waiters queued on both are served in the order they queued.
func TestS24MixedVersions(t *testing.T) {
	last := os.Getenv("BATON_LAST_RELEASE")
	if last == "" {
		t.Skip("BATON_LAST_RELEASE names no sidecar of the last release: make test (or make test-e2e) builds it")
	}
	e := newEnv(t, envOptions{})
	olds := e.addSidecars(3, sidecarOptions{bin: last})
	news := e.addSidecars(3, sidecarOptions{})

	// Every lock has clients on every sidecar, of both versions: on each,
	// one on the lock, one on the semaphore, one reader and, on one
	// sidecar of three, a writer.
	var onLock, onSem, reading, writing []*app
	for i, sc := range e.sidecars {
		a := e.apps(sc, 4, 5*time.Millisecond)
		onLock, onSem, reading = append(onLock, a[0]), append(onSem, a[1]), append(reading, a[2])
		if i%3 == 2 {
			writing = append(writing, a[3])
		}
	}
	apps := slices.Concat(onLock, onSem, reading, writing)
	stop := make(chan struct{})
	t.Cleanup(func() {
		select {
		case <-stop:
		default:
			close(stop) // a failed scenario's clients stop too
		}
	})
	mutex := runApps(onLock, stop, "s24", 0, holdPlan{wait: 30 * time.Second, increments: 1, holdFor: 200 * time.Millisecond, pause: 50 * time.Millisecond})
	const limit = 2
	sem := runApps(onSem, stop, "s24sem", 0, holdPlan{wait: 30 * time.Second, holdFor: 200 * time.Millisecond, pause: 50 * time.Millisecond, limit: limit})
	readers := runApps(reading, stop, "s24rw", 0, holdPlan{wait: 30 * time.Second, holdFor: 100 * time.Millisecond, pause: 50 * time.Millisecond, mode: "read"})
	writers := runApps(writing, stop, "s24rw", 0, holdPlan{wait: 30 * time.Second, increments: 1, holdFor: 50 * time.Millisecond, pause: 100 * time.Millisecond})
	locks := []string{"s24", "s24sem", "s24rw"}
	killed := map[bool]int{} // by version: true for the last release
	end := time.Now().Add(scale(20*time.Second, 5*time.Minute))
	for i := 0; time.Now().Before(end); i++ {
		time.Sleep(scale(2*time.Second, 5*time.Second))
		old := i%2 == 0
		x := e.holderAmong(locks, map[bool][]*sidecar{true: olds, false: news}[old])
		x.kill()
		killed[old]++
		x.start(t)
	}
	close(stop)
	for _, wg := range []interface{ Wait() }{mutex, sem, readers, writers} {
		wg.Wait()
	}
	// The holder is on a sidecar of its own: a sidecar's callers wait for
	// its lock in its own line, not in etcd's.
	servedInOrder(t, e.addSidecars(1, sidecarOptions{})[0], olds, news)
	o := e.finish("S24 the last release's sidecars beside this build's", requirements{minOK: 30, noOverlap: true}, func(o *outcome) {
		o.note("3 sidecars of the last release (%s) and 3 of this build in one scope: %d clients on a lock, a semaphore of %d and a read/write lock, a holder's sidecar SIGKILLed and restarted every %v, %d of the last release's and %d of this build's; at most %d holders of the semaphore, %d readers at once; losses told: %v",
			lastReleaseName(), len(apps), limit, scale(2*time.Second, 5*time.Second), killed[true], killed[false], o.concurrency["s24sem"], o.concurrency["s24rw"], o.losses)
	})
	if o.concurrency["s24sem"] < limit {
		t.Errorf("at most %d holders of the semaphore of %d at once: it was never full", o.concurrency["s24sem"], limit)
	}
}

// servedInOrder queues six waiters for one lock, alternately on a sidecar
// of the last release and of this build, behind a holder on first, and
// checks that they are granted in the order they queued.
func servedInOrder(t *testing.T, first *sidecar, olds, news []*sidecar) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	holder, err := first.client.Lock(ctx, "s24fifo", lockapi.Request{Owner: "first"})
	if err != nil {
		t.Fatal(err)
	}
	granted := make(chan int, 6)
	for i := range 6 {
		sc := olds[i/2%len(olds)]
		if i%2 == 1 {
			sc = news[i/2%len(news)]
		}
		go func() {
			l, err := sc.client.Lock(ctx, "s24fifo", lockapi.Request{Owner: fmt.Sprintf("waiter-%d", i), Wait: "1m"})
			if err != nil {
				t.Errorf("waiter %d on %s: %v", i, sc.name, err)
				granted <- -1
				return
			}
			granted <- i
			_, _ = l.Release(ctx)
		}()
		if !waitersAre(t, first.client, "s24fifo", i+1) {
			_, _ = holder.Release(ctx)
			return // the waiters' context ends: they withdraw
		}
	}
	if _, err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var order []int
	for range 6 {
		select {
		case i := <-granted:
			order = append(order, i)
		case <-ctx.Done():
			t.Errorf("the waiters were not all granted within a minute: %v", order)
			return
		}
	}
	if !slices.Equal(order, []int{0, 1, 2, 3, 4, 5}) {
		t.Errorf("waiters queued in turn on the last release's sidecars and this build's were granted in the order %v", order)
	}
}

// waitersAre waits until lock's status, read through c, counts n
// waiters, and says whether it did within 10s.
func waitersAre(t *testing.T, c *baton.Client, lock string, n int) bool {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		st, err := c.Status(context.Background(), lock)
		if err == nil && st.Waiters == n {
			return true
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: %+v %v; want %d waiters: a waiter is not in the line", lock, st, err, n)
			return false
		}
	}
}

// holderAmong returns a sidecar of set holding one of locks, waiting up
// to 10s for one.
func (e *env) holderAmong(locks []string, set []*sidecar) *sidecar {
	e.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		ops := e.h.snapshot()
		for _, s := range set {
			if !s.alive() {
				continue
			}
			owners := e.ownersOf(s)
			for _, l := range locks {
				if owner := holding(ops, l); owner != "" && slices.Contains(owners, owner) {
					return s
				}
			}
		}
	}
	e.dump()
	e.t.Fatalf("no holder of %v on %d sidecars after 10s", locks, len(set))
	return nil
}

// lastReleaseName is the last release's commit, as hack/last-release
// names it.
func lastReleaseName() string {
	b, err := os.ReadFile("../../hack/last-release")
	if err != nil {
		return "?"
	}
	for _, l := range slices.Backward(strings.Split(string(b), "\n")) {
		if l != "" && l[0] != '#' {
			return l[:min(len(l), 12)]
		}
	}
	return "?"
}
