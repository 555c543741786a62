package mirror

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	batonv1 "github.com/baton-dev/baton/api/v1alpha1"
	"github.com/baton-dev/baton/internal/coordinator"
	"github.com/baton-dev/baton/internal/keyspace"
)

// TestSemaphoreLock: a semaphore's Lock shows its limit, the units held
// and every holder with its fence and weight; kubectl -o wide prints the
// limit and units.
func TestSemaphoreLock(t *testing.T) {
	needAPIServer(t)
	kc := kube(t)
	ns := namespace(t, kc, "semaphore")
	startMirror(t, time.Minute)
	a, b := newSidecar(t, ns, "pod-a"), newSidecar(t, ns, "pod-b")
	ctx := context.Background()
	k := key(t, "tenant-a/pipelines")
	sem := keyspace.Claim{Limit: 3, Weight: 1}
	var fences []int64
	for _, g := range []struct {
		s      *sidecar
		owner  string
		weight int
	}{{a, "p1", 2}, {b, "p2", 1}} {
		cl := sem
		cl.Weight = g.weight
		gr, err := g.s.c.Acquire(ctx, coordinator.AcquireRequest{Key: k, Owner: g.owner, TTL: time.Minute, Claim: cl})
		if err != nil {
			t.Fatal(err)
		}
		fences = append(fences, gr.Fence)
	}
	obj := lockShows(t, kc, ns, k, 10*time.Second, "two holders, 3 of 3 units", func(l *batonv1.Lock) error {
		s := l.Status
		if s.Phase != batonv1.PhaseHeld || s.Limit != 3 || s.HeldUnits != 3 || len(s.Holders) != 2 || s.Fence != fences[0] {
			return fmt.Errorf("status %+v", s)
		}
		for i, h := range s.Holders {
			if h.Fence != fences[i] || h.Owner != []string{"p1", "p2"}[i] || h.Weight != []int32{2, 1}[i] {
				return fmt.Errorf("holder %d: %+v", i, h)
			}
		}
		return nil
	})
	out := kubectl(t, "get", "locks", "-n", ns, "-o", "wide")
	header := strings.Fields(strings.SplitN(out, "\n", 2)[0])
	if strings.Join(header, " ") != "NAME KEY PHASE HOLDER POD CLUSTER FENCE WAITERS LIMIT UNITS ELECTION AGE" || !strings.Contains(out, obj.Name) {
		t.Errorf("kubectl get locks -o wide:\n%s", out)
	}
	if _, err := a.c.Release(ctx, k, "p1"); err != nil {
		t.Fatal(err)
	}
	lockShows(t, kc, ns, k, 10*time.Second, "one holder, 1 unit", func(l *batonv1.Lock) error {
		s := l.Status
		if s.HeldUnits != 1 || len(s.Holders) != 1 || s.Holder.Owner != "p2" || s.Fence != fences[1] {
			return fmt.Errorf("status %+v", s)
		}
		return nil
	})
}
