package coordinator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/baton-dev/baton/internal/keyspace"
)

// TestManyLinesAtOnce runs callers on two sidecars against several locks
// of every kind at once (four mutexes, a read/write lock, a semaphore of
// three): tries and waits, holds kept by Keep, extends, statuses, an owner
// asking again for its lock as the other kind, and releases. What one
// lock's line does must never leak into another's, and the engine must
// keep every promise on each: never more holders than the lock allows (an
// exclusive grant's key first in etcd's line), every caller granted or
// refused (a shared lock's try may be told to retry), and once everyone
// has let go, no key in etcd, no held lock and no line left in either
// sidecar.
func TestManyLinesAtOnce(t *testing.T) {
	parallel(t)
	sidecars := []*sidecar{newSidecar(t, "pod-a"), newSidecar(t, "pod-b")}
	keys := []keyspace.Key{key(t, "m0"), key(t, "m1"), key(t, "m2"), key(t, "m3"), key(t, "rw"), key(t, "sem")}
	const semLimit = 3
	run := 2 * time.Second
	if onEtcd {
		run = 4 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), run)
	defer cancel()
	occ := &occupancy{held: map[string]*inside{}}
	var wg sync.WaitGroup
	for i := range 12 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(i), 11))
			for n := 0; ctx.Err() == nil; n++ {
				s := sidecars[r.IntN(len(sidecars))]
				k := keys[r.IntN(len(keys))]
				var cl keyspace.Claim
				switch k.String() {
				case "rw":
					if r.IntN(3) > 0 {
						cl = reader
					}
				case "sem":
					cl = units(semLimit, 1+r.IntN(2))
				}
				if err := lineStep(t, s, r, occ, k, cl, fmt.Sprintf("o%d-%d", i, n)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	for _, s := range sidecars {
		waitFor(t, 5*time.Second, "every line of "+s.c.cfg.Identity.Pod+" let go", func() bool {
			held, _ := s.c.HeldLocks()
			return len(held) == 0 && s.c.load.Load() == 0
		})
	}
	left, _, err := sidecars[0].raw.Contenders(context.Background(), sidecars[0].c.Layout().Base(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Errorf("keys left in etcd once everyone let go: %v", left)
	}
	if occ.grants < 50 {
		t.Errorf("only %d grants: the test exercised little", occ.grants)
	}
}

// lineStep is one caller's turn of TestManyLinesAtOnce: it acquires k with
// claim cl as owner on s (a try or a wait, a hold or not) and, granted,
// checks the grant, maybe extends it, asks for it as the other kind or
// reads its status, and lets it go.
func lineStep(t *testing.T, s *sidecar, r *rand.Rand, occ *occupancy, k keyspace.Key, cl keyspace.Claim, owner string) error {
	ctx := context.Background()
	wait := time.Duration(r.IntN(2)) * 200 * time.Millisecond
	hold := r.IntN(4) == 0
	g, err := s.c.Acquire(ctx, AcquireRequest{Key: k, Owner: owner, Claim: cl, Wait: wait, Hold: hold, TTL: time.Minute})
	if err != nil {
		// Refused; or, a try of a shared lock, told to retry when others
		// kept joining its line faster than it could read it (maxTryIn).
		if errors.Is(err, ErrHeld) || (errors.Is(err, ErrUnavailable) && !cl.IsExclusive() && wait == 0) {
			return nil
		}
		return fmt.Errorf("acquire %s as %+v by %s (wait %v): %w", k, cl, owner, wait, err)
	}
	if err := occ.enter(k, cl, g.Fence); err != nil {
		return err
	}
	if cl.IsExclusive() {
		first, err := s.raw.First(ctx, s.c.Layout().LockPrefix(k))
		if err != nil {
			return err
		}
		if first == nil || first.Create != g.Fence {
			return fmt.Errorf("%s granted to %s with fence %d, and etcd's first in line is %+v", k, owner, g.Fence, first)
		}
	}
	var kept *Hold
	if hold {
		kept = s.c.Keep(ctx, g)
	}
	switch r.IntN(4) {
	case 0:
		if !hold {
			eg, err := s.c.Extend(ctx, k, owner, time.Minute)
			if err != nil || eg.Fence != g.Fence {
				return fmt.Errorf("extend %s by %s: fence %d, %w", k, owner, eg.Fence, err)
			}
		}
	case 1:
		other := reader
		if !cl.IsExclusive() {
			other = keyspace.Claim{}
		}
		var mm *MismatchError
		if _, err := s.c.Acquire(ctx, AcquireRequest{Key: k, Owner: owner, Claim: other}); !errors.As(err, &mm) || (cl.Limit == 0 && !mm.Own) {
			return fmt.Errorf("%s, holding %s as %+v, asked for it as %+v: want a mismatch, got %w", owner, k, cl, other, cmp.Or(err, errors.New("a grant")))
		}
	case 2:
		if st, err := s.c.Status(ctx, k); err != nil || !st.Held {
			return fmt.Errorf("status of %s held by %s: %+v, %w", k, owner, st, err)
		}
	}
	occ.leave(k, cl)
	if kept != nil {
		kept.Release("done")
		return kept.Err()
	}
	if _, err := s.c.Release(ctx, k, owner); err != nil {
		return fmt.Errorf("release %s by %s: %w", k, owner, err)
	}
	return nil
}

// occupancy is who holds each lock of TestManyLinesAtOnce, by the test's
// own count: from its grant until just before its release.
type occupancy struct {
	mu     sync.Mutex
	held   map[string]*inside
	grants int
}

type inside struct{ writers, readers, units int }

// enter counts a grant of k with claim cl, and says whether the lock now
// has more holders than it allows.
func (o *occupancy) enter(k keyspace.Key, cl keyspace.Claim, fence int64) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.grants++
	in := o.held[k.String()]
	if in == nil {
		in = &inside{}
		o.held[k.String()] = in
	}
	switch {
	case cl.Limit > 0:
		in.units += cl.Units()
	case cl.Mode == keyspace.Read:
		in.readers++
	default:
		in.writers++
	}
	if in.writers > 1 || (in.writers == 1 && in.readers > 0) || in.units > cl.Limit {
		return fmt.Errorf("%s granted as %+v (fence %d) beside others: %d exclusive, %d readers, %d units", k, cl, fence, in.writers, in.readers, in.units)
	}
	return nil
}

// leave uncounts a holder of k with claim cl.
func (o *occupancy) leave(k keyspace.Key, cl keyspace.Claim) {
	o.mu.Lock()
	defer o.mu.Unlock()
	in := o.held[k.String()]
	switch {
	case cl.Limit > 0:
		in.units -= cl.Units()
	case cl.Mode == keyspace.Read:
		in.readers--
	default:
		in.writers--
	}
}
