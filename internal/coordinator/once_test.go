package coordinator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/keyspace"
)

func (s *sidecar) once(k keyspace.Key, owner string, o Once, wait time.Duration) (Grant, error) {
	return s.c.Acquire(context.Background(), AcquireRequest{Key: k, Owner: owner, Wait: wait, Once: &o})
}

func TestRunOnce(t *testing.T) {
	parallel(t)
	a, b := newSidecar(t, "pod-a"), newSidecar(t, "pod-b")
	k := key(t, uniq("migrations/v42"))
	g, err := a.once(k, "deploy-1", Once{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Arriving while it runs: refused naming the running execution, or
	// waiting for its outcome.
	var he *HeldError
	if _, err := b.once(k, "deploy-2", Once{}, 0); !errors.As(err, &he) || he.Holder.Owner != "deploy-1" {
		t.Fatalf("a second caller while it runs: %v, want a refusal naming deploy-1", err)
	}
	waited := make(chan error, 1)
	go func() {
		_, err := b.once(k, "deploy-3", Once{}, 10*time.Second)
		waited <- err
	}()
	waitFor(t, 5*time.Second, "deploy-3 in line", func() bool { return len(a.contenders(t, k)) == 2 })
	run, err := a.c.Finish(context.Background(), k, "deploy-1", true, "applied 3 migrations")
	if err != nil || run.Status != keyspace.RunSucceeded || run.Fence != g.Fence || run.Owner != "deploy-1" || run.Pod != "pod-a" {
		t.Fatalf("finish: %+v, %v", run, err)
	}
	var de *DoneError
	if err := <-waited; !errors.As(err, &de) || de.Run.Result != "applied 3 migrations" || !errors.Is(err, ErrDone) {
		t.Fatalf("the waiter: %v, want already done with the result", err)
	}
	if keys := a.contenders(t, k); len(keys) != 0 {
		t.Errorf("keys left: %v", keys)
	}

	t.Run("later callers read, write nothing and do not run", func(t *testing.T) {
		writes, reads := b.calls.Writes(), b.calls.Reads()
		_, err := b.once(k, "deploy-4", Once{}, 0)
		if !errors.As(err, &de) || de.Run.Owner != "deploy-1" || !strings.Contains(err.Error(), "already done") {
			t.Fatalf("err = %v", err)
		}
		if w, r := b.calls.Writes()-writes, b.calls.Reads()-reads; w != 0 || r != 1 {
			t.Errorf("cost %d writes, %d reads; want 0 and 1", w, r)
		}
	})
	t.Run("if_done rerun runs again", func(t *testing.T) {
		if _, err := b.once(k, "deploy-5", Once{IfDone: OnceRerun}, 0); err != nil {
			t.Fatal(err)
		}
		if _, err := b.c.Finish(context.Background(), k, "deploy-5", false, "exit 1"); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("a failed run is retried, or not with if_failed skip", func(t *testing.T) {
		if _, err := a.once(k, "deploy-6", Once{IfFailed: OnceSkip}, 0); !errors.As(err, &de) || de.Run.Status != keyspace.RunFailed || de.Run.Result != "exit 1" {
			t.Fatalf("if_failed skip after a failure: %v", err)
		}
		if _, err := a.once(k, "deploy-7", Once{}, 0); err != nil {
			t.Fatalf("a retry after a failure: %v", err)
		}
		// Its sidecar dies mid-run: no record, the next caller runs.
		a.expire(t)
		if _, err := b.once(k, "deploy-8", Once{}, 10*time.Second); err != nil {
			t.Fatalf("after a crashed run: %v", err)
		}
	})
}

func TestRunOnceInput(t *testing.T) {
	parallel(t)
	a := newSidecar(t, "pod-a")
	k := key(t, uniq("once-input"))
	if _, err := a.once(k, "runner", Once{}, 0); err != nil {
		t.Fatal(err)
	}
	for name, req := range map[string]AcquireRequest{
		"a limit":           {Key: k, Owner: "x", Once: &Once{}, Claim: units(3, 1)},
		"a reader":          {Key: k, Owner: "x", Once: &Once{}, Claim: reader},
		"if_done bogus":     {Key: k, Owner: "x", Once: &Once{IfDone: "always"}},
		"if_failed bogus":   {Key: k, Owner: "x", Once: &Once{IfFailed: "never"}},
		"waiting on itself": {Key: k, Owner: "runner", Once: &Once{}, Wait: time.Second},
		"a bad ttl":         {Key: k, Owner: "x", Once: &Once{}, TTL: time.Millisecond},
	} {
		writes, reads := a.calls.Writes(), a.calls.Reads()
		var inv *InvalidError
		if _, err := a.c.Acquire(context.Background(), req); !errors.As(err, &inv) {
			t.Errorf("%s: %v, want an InvalidError", name, err)
		}
		if a.calls.Writes() != writes || a.calls.Reads() != reads {
			t.Errorf("%s: asked etcd", name)
		}
	}
	if _, err := a.c.Finish(context.Background(), k, "runner", true, strings.Repeat("x", keyspace.MaxResult+1)); !errors.Is(err, ErrInvalid) {
		t.Errorf("a result too long: %v", err)
	}
	if _, err := a.c.Finish(context.Background(), k, "someone-else", true, ""); !errors.Is(err, ErrNotOwner) {
		t.Errorf("finish by another owner: %v", err)
	}
}

// TestRunOnceRace: ten callers on three sidecars race to run one key; the
// first runner's sidecar dies mid-run. The work succeeds exactly once,
// and every other caller is told it is done.
func TestRunOnceRace(t *testing.T) {
	parallel(t)
	scs := []*sidecar{newSidecar(t, "pod-a"), newSidecar(t, "pod-b"), newSidecar(t, "pod-c")}
	k := key(t, uniq("race"))
	var runs, successes, done atomic.Int32
	var killed atomic.Bool
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Go(func() {
			s := scs[i%len(scs)]
			owner := fmt.Sprint("caller-", i)
			_, err := s.once(k, owner, Once{}, 20*time.Second)
			switch {
			case errors.Is(err, ErrDone):
				done.Add(1)
				return
			case err != nil:
				t.Errorf("%s: %v", owner, err)
				return
			}
			runs.Add(1)
			if killed.CompareAndSwap(false, true) {
				s.expire(t) // the first runner dies mid-run
				return
			}
			time.Sleep(20 * time.Millisecond)
			if _, err := s.c.Finish(context.Background(), k, owner, true, owner); err != nil {
				t.Errorf("%s: finish: %v", owner, err)
				return
			}
			successes.Add(1)
		})
	}
	wg.Wait()
	if successes.Load() != 1 || runs.Load() != 2 || done.Load() != 8 {
		t.Errorf("%d runs, %d successes, %d told done; want 2 runs (the first killed), 1 success, 8 done", runs.Load(), successes.Load(), done.Load())
	}
}
