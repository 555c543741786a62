package mirror

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batonv1 "github.com/baton-dev/baton/api/v1alpha1"
	"github.com/baton-dev/baton/internal/coordinator"
)

// electionShows waits until the Lock of election name in ns satisfies
// check.
func electionShows(t *testing.T, c client.Client, ns, name, what string, check func(*batonv1.Lock) error) *batonv1.Lock {
	t.Helper()
	var obj batonv1.Lock
	waitFor(t, 10*time.Second, what, func() error {
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: ElectionObjectName(name)}, &obj); err != nil {
			return err
		}
		return check(&obj)
	})
	return &obj
}

// TestElectionLock: `kubectl get locks` shows elections too. An election
// has a Lock object of its own beside a lock of the same name, marked
// (status.election, the label baton.dev/election and not baton.dev/key),
// its holder the leader with its value and fence, its waiters the
// candidates standing by. Its force release by annotation ends the
// leadership alone (the leader learns it, the next candidate leads, the
// lock of the same name stays held), and once nobody campaigns it shows
// Free, then goes after the retention. A lock whose object's name starts
// as an election's stays a lock.
func TestElectionLock(t *testing.T) {
	needAPIServer(t)
	c := kube(t)
	ns := namespace(t, c, "election-lock")
	ctx := context.Background()
	startMirror(t, 2*time.Second)
	a, b := newSidecar(t, ns, "web-0"), newSidecar(t, ns, "web-1")
	k := key(t, "jobs/scheduler")

	lock, err := a.c.Acquire(ctx, coordinator.AcquireRequest{Key: k, Owner: "nightly", Hold: true})
	if err != nil {
		t.Fatal(err)
	}
	defer a.c.Keep(ctx, lock).Release("done")
	g1, err := a.elect.Acquire(ctx, coordinator.AcquireRequest{Key: k, Owner: "web-0", Value: "10.0.0.1", Hold: true})
	if err != nil {
		t.Fatal(err)
	}
	h1 := a.elect.Keep(ctx, g1)
	second := make(chan coordinator.Grant, 1)
	go func() {
		g, err := b.elect.Acquire(ctx, coordinator.AcquireRequest{Key: k, Owner: "web-1", Value: "10.0.0.2", Hold: true, Wait: coordinator.WaitForever})
		if err != nil {
			t.Error(err)
		}
		second <- g
	}()
	led := func(owner, value string, fence int64, waiters int32) func(*batonv1.Lock) error {
		return func(l *batonv1.Lock) error {
			s := l.Status
			switch {
			case !s.Election || s.Key != "jobs/scheduler" || s.Phase != batonv1.PhaseHeld || s.Fence != fence || s.Waiters != waiters:
				return fmt.Errorf("status %+v, want election jobs/scheduler held with fence %d, %d waiting", s, fence, waiters)
			case s.Holder == nil || s.Holder.Owner != owner || s.Holder.Value != value:
				return fmt.Errorf("holder %+v, want %s announcing %s", s.Holder, owner, value)
			case l.Labels[batonv1.LabelElection] != "jobs.scheduler" || l.Labels[batonv1.LabelKey] != "":
				return fmt.Errorf("labels %v", l.Labels)
			}
			return nil
		}
	}
	obj := electionShows(t, c, ns, "jobs/scheduler", "the leader shown, a candidate standing by", led("web-0", "10.0.0.1", g1.Fence, 1))
	lockShows(t, c, ns, k, 10*time.Second, "the lock of the same name shown apart", func(l *batonv1.Lock) error {
		if l.Status.Election || l.Status.Holder == nil || l.Status.Holder.Owner != "nightly" || l.Labels[batonv1.LabelElection] != "" {
			return fmt.Errorf("status %+v, labels %v", l.Status, l.Labels)
		}
		return nil
	})
	if obj.Name == ObjectName("jobs/scheduler") || !strings.HasPrefix(obj.Name, "election-") {
		t.Errorf("the election's Lock is named %s", obj.Name)
	}
	// A lock whose object's name starts as an election's does is a lock.
	look := key(t, "election/jobs/scheduler")
	alike, err := a.c.Acquire(ctx, coordinator.AcquireRequest{Key: look, Owner: "nightly", Hold: true})
	if err != nil {
		t.Fatal(err)
	}
	defer a.c.Keep(ctx, alike).Release("done")
	lockShows(t, c, ns, look, 10*time.Second, "a lock named like an election shown as a lock", func(l *batonv1.Lock) error {
		if !strings.HasPrefix(l.Name, "election-") || l.Status.Election || l.Status.Key != look.String() || l.Labels[batonv1.LabelKey] != "election.jobs.scheduler" {
			return fmt.Errorf("%s: status %+v, labels %v", l.Name, l.Status, l.Labels)
		}
		return nil
	})

	kubectl(t, "annotate", "-n", ns, "lock", obj.Name, batonv1.AnnotationForceRelease+"=stuck leader")
	select {
	case <-h1.Done():
		if lost, ok := errors.AsType[*coordinator.LostError](h1.Err()); !ok || lost.Reason != coordinator.ForceReleased {
			t.Errorf("the leader learned %v, want its leadership force released", h1.Err())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the leader still leads 10s after its force release by annotation")
	}
	var g2 coordinator.Grant
	select {
	case g2 = <-second:
	case <-time.After(10 * time.Second):
		t.Fatal("the candidate standing by does not lead 10s after the leader was forced out")
	}
	h2 := b.elect.Keep(ctx, g2)
	electionShows(t, c, ns, "jobs/scheduler", "the next leader shown", led("web-1", "10.0.0.2", g2.Fence, 0))
	if st, err := a.c.Status(ctx, k); err != nil || !st.Held || st.Fence != lock.Fence {
		t.Errorf("the lock of the same name after the election's force release: %+v %v; want it held still", st, err)
	}

	h2.Release("resigned")
	electionShows(t, c, ns, "jobs/scheduler", "Free once nobody campaigns", func(l *batonv1.Lock) error {
		if l.Status.Phase != batonv1.PhaseFree || l.Status.LastHolder == nil || l.Status.LastHolder.Owner != "web-1" {
			return fmt.Errorf("status %+v", l.Status)
		}
		return nil
	})
	waitFor(t, 10*time.Second, "the election's Lock gone after the retention", func() error {
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: ElectionObjectName("jobs/scheduler")}, &batonv1.Lock{})
		if !apierrors.IsNotFound(err) {
			return errors.Join(errors.New("still there"), err)
		}
		return nil
	})
}
