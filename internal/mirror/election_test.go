package mirror

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/baton-dev/baton/internal/coordinator"
)

// leaseShows waits until the Lease of election name in ns satisfies check.
func leaseShows(t *testing.T, c client.Client, ns, name, what string, check func(*coordinationv1.Lease) error) *coordinationv1.Lease {
	t.Helper()
	var l coordinationv1.Lease
	waitFor(t, 10*time.Second, what, func() error {
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: ObjectName(name)}, &l); err != nil {
			return err
		}
		return check(&l)
	})
	return &l
}

// leads checks that l shows the leader of g, announcing value, after so
// many transitions.
func leads(g coordinator.Grant, value string, transitions int32) func(*coordinationv1.Lease) error {
	return func(l *coordinationv1.Lease) error {
		s := l.Spec
		switch {
		case ptr.Deref(s.HolderIdentity, "") != value:
			return fmt.Errorf("holder %v, want %s", ptr.Deref(s.HolderIdentity, "<none>"), value)
		case l.Annotations[AnnotationFence] != strconv.FormatInt(g.Fence, 10) || l.Annotations[AnnotationValue] != value:
			return fmt.Errorf("annotations %v, want fence %d and value %s", l.Annotations, g.Fence, value)
		case ptr.Deref(s.LeaseTransitions, -1) != transitions:
			return fmt.Errorf("transitions %v, want %d", ptr.Deref(s.LeaseTransitions, -1), transitions)
		case s.AcquireTime == nil || !s.AcquireTime.Time.Equal(g.AcquiredAt.Truncate(time.Microsecond)):
			return fmt.Errorf("acquired %v, want %v", s.AcquireTime, g.AcquiredAt)
		case s.RenewTime == nil || ptr.Deref(s.LeaseDurationSeconds, 0) < 1:
			return fmt.Errorf("renewed %v for %v s", s.RenewTime, s.LeaseDurationSeconds)
		case l.Labels[LabelManagedBy] != ManagedBy || l.Labels[LabelElection] != "jobs.scheduler":
			return fmt.Errorf("labels %v", l.Labels)
		}
		return nil
	}
}

// TestElectionLease: an election is shown as a Lease of its name in its
// scope's namespace: its leader, when elected, its fence and value, each
// change of leader; the pod that leads and asked for it wears the
// leader's label, taken off as another leads; with nobody campaigning the
// Lease has no holder, then goes after the retention. A Lease of that name
// that is not Baton's is left alone.
func TestElectionLease(t *testing.T) {
	needAPIServer(t)
	c := kube(t)
	ns := namespace(t, c, "election-lease")
	ctx := context.Background()
	for _, p := range []string{"web-0", "web-1"} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: p, Annotations: map[string]string{AnnotationLeaderLabel: "true"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
		if err := c.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
	}
	theirs := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ObjectName("theirs")},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("client-go")}}
	if err := c.Create(ctx, theirs); err != nil {
		t.Fatal(err)
	}
	cli, _ := testEtcd.Client(t)
	startMirrorWith(t, restConfig, cli, 2*time.Second, nil, func(c *Config) { c.LeaderLabels = true })
	a, b := newSidecar(t, ns, "web-0"), newSidecar(t, ns, "web-1")
	// A pod of the same name in another cluster sharing the etcd: its
	// leadership labels no pod of this one.
	east := newSidecarIn(t, onTestEtcd(t), ns, "web-0", "east")
	ge, err := east.elect.Acquire(ctx, coordinator.AcquireRequest{Key: key(t, "jobs/east"), Owner: "web-0", Hold: true})
	if err != nil {
		t.Fatal(err)
	}
	leaseShows(t, c, ns, "jobs/east", "east's leader shown", func(l *coordinationv1.Lease) error {
		if ptr.Deref(l.Spec.HolderIdentity, "") != "web-0" || l.Annotations[AnnotationFence] != strconv.FormatInt(ge.Fence, 10) {
			return fmt.Errorf("holder %v, annotations %v", ptr.Deref(l.Spec.HolderIdentity, ""), l.Annotations)
		}
		return nil
	})
	label := LeaderLabelPrefix + ObjectName("jobs/scheduler")
	labelled := func(want string) func() error {
		return func() error {
			var pods corev1.PodList
			if err := c.List(ctx, &pods, client.InNamespace(ns), client.HasLabels{label}); err != nil {
				return err
			}
			var got []string
			for _, p := range pods.Items {
				got = append(got, p.Name)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) && (want != "" || len(got) != 0) {
				return fmt.Errorf("labelled %v, want %s", got, want)
			}
			return nil
		}
	}

	if _, err := b.elect.Acquire(ctx, coordinator.AcquireRequest{Key: key(t, "theirs"), Owner: "web-1", Hold: true}); err != nil {
		t.Fatal(err)
	}
	g1, err := a.elect.Acquire(ctx, coordinator.AcquireRequest{Key: key(t, "jobs/scheduler"), Owner: "web-0", Value: "10.0.0.1", Hold: true})
	if err != nil {
		t.Fatal(err)
	}
	h1 := a.elect.Keep(ctx, g1)
	leaseShows(t, c, ns, "jobs/scheduler", "the first leader shown", leads(g1, "10.0.0.1", 0))
	waitFor(t, 10*time.Second, "web-0 labelled", labelled("[web-0]"))

	second := make(chan coordinator.Grant, 1)
	go func() {
		g, err := b.elect.Acquire(ctx, coordinator.AcquireRequest{Key: key(t, "jobs/scheduler"), Owner: "web-1", Value: "10.0.0.2", Hold: true, Wait: coordinator.WaitForever})
		if err != nil {
			t.Error(err)
		}
		second <- g
	}()
	waitFor(t, 10*time.Second, "web-1 campaigning", func() error {
		st, err := a.elect.Status(ctx, key(t, "jobs/scheduler"))
		if err == nil && st.Waiters != 1 {
			err = fmt.Errorf("%d waiting", st.Waiters)
		}
		return err
	})
	h1.Release("resigned")
	g2 := <-second
	h2 := b.elect.Keep(ctx, g2)
	leaseShows(t, c, ns, "jobs/scheduler", "the second leader shown", leads(g2, "10.0.0.2", 1))
	waitFor(t, 10*time.Second, "the label moved to web-1", labelled("[web-1]"))

	h2.Release("resigned")
	leaseShows(t, c, ns, "jobs/scheduler", "no leader shown", func(l *coordinationv1.Lease) error {
		if l.Spec.HolderIdentity != nil || l.Annotations[AnnotationValue] != "" {
			return fmt.Errorf("holder %v, value %q", ptr.Deref(l.Spec.HolderIdentity, ""), l.Annotations[AnnotationValue])
		}
		return nil
	})
	waitFor(t, 10*time.Second, "no pod labelled", labelled(""))
	waitFor(t, 10*time.Second, "the Lease gone after the retention", func() error {
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: ObjectName("jobs/scheduler")}, &coordinationv1.Lease{})
		if !apierrors.IsNotFound(err) {
			return errors.Join(errors.New("still there"), err)
		}
		return nil
	})
	var pod corev1.Pod
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web-0"}, &pod); err != nil || pod.Labels[LeaderLabelPrefix+ObjectName("jobs/east")] != "" {
		t.Errorf("web-0 of this cluster wears the label of east's leadership: %v %v", pod.Labels, err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(theirs), theirs); err != nil || ptr.Deref(theirs.Spec.HolderIdentity, "") != "client-go" {
		t.Errorf("a Lease that is not Baton's: %+v %v; want it left alone", theirs.Spec, err)
	}
}
