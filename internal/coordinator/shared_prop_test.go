package coordinator

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/lockstore"
)

// TestSharedClaimsProperties runs many contenders on three sidecars
// against one semaphore and one read/write lock, releasing at random and
// crashing sidecars (their sessions end, as when a pod is killed), and
// checks each grant against etcd's line right after it: the grant's key is
// among the holders (so nobody passed a contender ahead of it: arrival
// order, no barging, no reader past a queued writer), and the grants
// whose keys are still there never hold more than the limit, nor a writer
// with anyone.
func TestSharedClaimsProperties(t *testing.T) {
	parallel(t)
	sidecars := []*sidecar{newSidecar(t, "pod-a"), newSidecar(t, "pod-b"), newSidecar(t, "pod-c")}
	sem, rw := key(t, "sem"), key(t, "rw")
	const limit = 4
	chk := &grantChecker{t: t, layout: sidecars[0].c.Layout(), store: sidecars[0].raw, granted: map[grantID]grantNo{}}
	run := 3 * time.Second
	if onEtcd {
		run = 6 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), run)
	defer cancel()
	// An observer of both locks: its revisions never go back, and it is
	// told every grant.
	octx, ocancel := context.WithCancel(context.Background())
	defer ocancel()
	obs, err := sidecars[2].c.Observe(octx, keyspace.Key{}, "")
	if err != nil {
		t.Fatal(err)
	}
	var omu sync.Mutex
	told := map[grantID]bool{}
	observed := make(chan struct{})
	go func() {
		defer close(observed)
		var last int64
		for ev := range obs {
			if ev.Rev < last {
				t.Errorf("the observer's revision went back: %+v after %d", ev, last)
			}
			last = ev.Rev
			if ev.Kind == EventGranted {
				omu.Lock()
				told[grantID{ev.Key.String(), ev.Fence}] = true
				omu.Unlock()
			}
		}
	}()

	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(i), 7))
			for n := 0; ctx.Err() == nil; n++ {
				s := sidecars[r.IntN(len(sidecars))]
				k, cl := sem, units(limit, 1+r.IntN(2))
				if i%2 == 1 {
					k, cl = rw, reader
					if r.IntN(3) == 0 {
						cl = keyspace.Claim{}
					}
				}
				owner := fmt.Sprintf("c%d-%d", i, n)
				wait := time.Duration(r.IntN(2)) * 2 * time.Second
				g, err := s.claim(k, owner, cl, wait)
				if err != nil {
					if !errors.Is(err, ErrHeld) && !errors.Is(err, ErrUnavailable) {
						t.Errorf("acquire %s %+v: %v", k, cl, err)
					}
					continue
				}
				chk.granted1(k, g)
				time.Sleep(time.Duration(r.IntN(20)) * time.Millisecond)
				if _, err := s.c.Release(context.Background(), k, owner); err != nil && !errors.Is(err, ErrLost) && !errors.Is(err, ErrUnavailable) {
					t.Errorf("release %s by %s: %v", k, owner, err)
				}
			}
		})
	}
	crashes := 0
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-time.After(run / 5):
			sidecars[crashes%len(sidecars)].expire(t)
			crashes++
		}
	}
	wg.Wait()
	waitFor(t, 10*time.Second, "the observer told of every grant", func() bool {
		omu.Lock()
		defer omu.Unlock()
		chk.mu.Lock()
		defer chk.mu.Unlock()
		for id := range chk.granted {
			if !told[id] {
				return false
			}
		}
		return true
	})
	ocancel()
	<-observed
	if chk.grants < 50 {
		t.Errorf("only %d grants in %v: the test proves little", chk.grants, run)
	}
	t.Logf("%d grants checked, %d crashes", chk.grants, crashes)
}

// grantChecker checks grants against the store's line.
type grantChecker struct {
	t      *testing.T
	layout keyspace.Layout
	store  lockstore.Store

	mu      sync.Mutex
	granted map[grantID]grantNo // every grant made
	grants  int
}

// grantNo is a grant's claim and its place in the order the checker
// heard of grants.
type grantNo struct {
	claim keyspace.Claim
	n     int
}

// grantID names a grant: a fence is unique per lock (one etcd transaction
// may create keys of several locks).
type grantID struct {
	lock  string
	fence int64
}

func (c *grantChecker) granted1(k keyspace.Key, g Grant) {
	c.mu.Lock()
	c.grants++
	c.granted[grantID{k.String(), g.Fence}] = grantNo{g.Claim, c.grants}
	// Only the grants made before the read can be checked against it.
	upTo := c.grants
	c.mu.Unlock()
	cs, _, err := c.store.Contenders(context.Background(), c.layout.LockPrefix(k), 0)
	if err != nil {
		c.t.Errorf("read the line: %v", err)
		return
	}
	sortLine(cs)
	n := holdersOf(cs)
	c.mu.Lock()
	defer c.mu.Unlock()
	units, writers, readers := 0, 0, 0
	for i, ct := range cs {
		gn, ours := c.granted[grantID{k.String(), ct.Create}]
		if ct.Create == g.Fence && i >= n {
			c.t.Errorf("%s: grant %d (%+v) is contender %d of a line whose first %d hold it", k, g.Fence, g.Claim, i, n)
		}
		if !ours || gn.n > upTo {
			continue
		}
		cl := gn.claim
		switch {
		case cl.Limit > 0:
			units += cl.Units()
		case cl.Mode == keyspace.Read:
			readers++
		default:
			writers++
		}
	}
	if units > 4 || writers > 1 || (writers == 1 && readers > 0) {
		c.t.Errorf("%s: granted and still in etcd together: %d units, %d writers, %d readers", k, units, writers, readers)
		for i, ct := range cs {
			gn, ours := c.granted[grantID{k.String(), ct.Create}]
			ours = ours && gn.n <= upTo
			c.t.Logf("  %d %s create %d %+v granted %v holder %v", i, ct.Key, ct.Create, ct.Holder.Claim, ours, i < n)
		}
	}
}
