package mirror

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	batonv1 "github.com/baton-dev/baton/api/v1alpha1"
	"github.com/baton-dev/baton/internal/coordinator"
)

func heldBy(owner, pod string, fence int64, waiters int32) func(*batonv1.Lock) error {
	return func(l *batonv1.Lock) error {
		s := l.Status
		if s.Phase != batonv1.PhaseHeld || s.Holder == nil || s.Holder.Owner != owner || s.Holder.Pod != pod || s.Fence != fence || s.Waiters != waiters {
			return fmt.Errorf("status %+v holder %+v; want held by %s on %s, fence %d, %d waiters", s, s.Holder, owner, pod, fence, waiters)
		}
		return nil
	}
}

// TestLockLifecycle: a lock acquired through a sidecar appears Held with
// its holder and fence within a second, counts its waiters, passes to the
// next holder, shows Free with its last holder once released, and is
// deleted after the retention. kubectl prints the columns.
func TestLockLifecycle(t *testing.T) {
	needAPIServer(t)
	kc := kube(t)
	ns := namespace(t, kc, "lifecycle")
	startMirror(t, 2*time.Second)
	a, b := newSidecar(t, ns, "pod-a"), newSidecar(t, ns, "pod-b")
	ctx := context.Background()
	k := key(t, "deploy/prod")

	start := time.Now()
	ga, err := a.c.Acquire(ctx, coordinator.AcquireRequest{Key: k, Owner: "job-1", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	obj := lockShows(t, kc, ns, k, 10*time.Second, "Held by job-1", heldBy("job-1", "pod-a", ga.Fence, 0))
	t.Logf("Lock Held %v after the grant", time.Since(start).Round(time.Millisecond))
	if obj.Status.Key != "deploy/prod" || obj.Status.Scope != ns || obj.Labels[batonv1.LabelKey] != "deploy.prod" ||
		obj.Status.Holder.Node != "node-1" || obj.Status.Holder.AcquiredAt == nil || obj.Status.Holder.ExpiresAt == nil {
		t.Errorf("Lock %s: labels %v, status %+v, holder %+v", obj.Name, obj.Labels, obj.Status, obj.Status.Holder)
	}

	wait := func(owner string) <-chan coordinator.Grant {
		granted := make(chan coordinator.Grant, 1)
		go func() {
			g, err := b.c.Acquire(ctx, coordinator.AcquireRequest{Key: k, Owner: owner, Wait: 30 * time.Second, TTL: time.Minute})
			if err != nil {
				t.Error(err)
			}
			granted <- g
		}()
		return granted
	}
	granted := wait("job-2")
	lockShows(t, kc, ns, k, 10*time.Second, "one waiter", heldBy("job-1", "pod-a", ga.Fence, 1))
	granted3 := wait("job-3") // queued inside pod-b, behind job-2's contender key
	lockShows(t, kc, ns, k, 10*time.Second, "two waiters", heldBy("job-1", "pod-a", ga.Fence, 2))

	out := kubectl(t, "get", "locks", "-A")
	header := strings.Fields(strings.SplitN(out, "\n", 2)[0])
	if strings.Join(header, " ") != "NAMESPACE NAME KEY PHASE HOLDER POD FENCE WAITERS AGE" {
		t.Errorf("kubectl get locks -A header: %q", header)
	}
	if !strings.Contains(out, obj.Name) || !strings.Contains(out, "deploy/prod") || !strings.Contains(out, fmt.Sprint(ga.Fence)) {
		t.Errorf("kubectl get locks -A:\n%s", out)
	}
	t.Logf("kubectl get locks -A:\n%s", out)

	released := time.Now()
	if _, err := a.c.Release(ctx, k, "job-1"); err != nil {
		t.Fatal(err)
	}
	gb := <-granted
	lockShows(t, kc, ns, k, 10*time.Second, "Held by job-2", heldBy("job-2", "pod-b", gb.Fence, 1))
	t.Logf("Lock shows the next holder %v after the release (polled every 20ms)", time.Since(released).Round(time.Millisecond))
	if _, err := b.c.Release(ctx, k, "job-2"); err != nil {
		t.Fatal(err)
	}
	g3 := <-granted3
	lockShows(t, kc, ns, k, 10*time.Second, "Held by job-3", heldBy("job-3", "pod-b", g3.Fence, 0))
	if _, err := b.c.Release(ctx, k, "job-3"); err != nil {
		t.Fatal(err)
	}
	freed := time.Now()
	lockShows(t, kc, ns, k, 10*time.Second, "Free", func(l *batonv1.Lock) error {
		s := l.Status
		if s.Phase != batonv1.PhaseFree || s.Holder != nil || s.LastHolder == nil || s.LastHolder.Owner != "job-3" || s.ReleasedAt == nil || s.Fence != 0 {
			return fmt.Errorf("status %+v", s)
		}
		return nil
	})
	waitFor(t, 15*time.Second, "deleted after the retention", func() error {
		var l batonv1.Lock
		err := kc.Get(ctx, client.ObjectKey{Namespace: ns, Name: obj.Name}, &l)
		if err == nil {
			return fmt.Errorf("still there: %s", l.Status.Phase)
		}
		return client.IgnoreNotFound(err)
	})
	if d := time.Since(freed); d < 2*time.Second {
		t.Errorf("deleted %v after the release, before the 2s retention", d)
	}
}

// TestCrashedHolderShowsFree: a lock acquired through a sidecar's socket
// shows Held; SIGKILL of that sidecar leaves its lease unrenewed, etcd
// expires it, and the Lock shows Free.
func TestCrashedHolderShowsFree(t *testing.T) {
	needAPIServer(t)
	kc := kube(t)
	ns := namespace(t, kc, "crash")
	startMirror(t, time.Minute)
	p := startSidecarProc(t, ns, "pod-a")
	k := key(t, "tenant-42/nightly")
	code, body := p.call(t, "POST", "/v1/locks/tenant-42/nightly", `{"owner":"run-7"}`)
	if code != 200 {
		t.Fatalf("acquire: %d %s", code, body)
	}
	lockShows(t, kc, ns, k, 10*time.Second, "Held", heldBy("run-7", "pod-a", fenceOf(t, body), 0))
	p.kill()
	killed := time.Now()
	lockShows(t, kc, ns, k, 15*time.Second, "Free after the lease TTL", func(l *batonv1.Lock) error {
		if l.Status.Phase != batonv1.PhaseFree || l.Status.LastHolder == nil || l.Status.LastHolder.Owner != "run-7" {
			return fmt.Errorf("status %+v", l.Status)
		}
		return nil
	})
	t.Logf("Free %v after SIGKILL of the holder's sidecar (lease TTL 2s)", time.Since(killed).Round(time.Millisecond))
}

// TestForceReleaseByAnnotation: the annotation deletes the holder's key in
// etcd (compared with the fence shown), records an Event and removes
// itself; the old holder's release answers 410 force_released, and the
// next holder is left alone.
func TestForceReleaseByAnnotation(t *testing.T) {
	needAPIServer(t)
	kc := kube(t)
	ns := namespace(t, kc, "force")
	stop := startMirror(t, time.Minute)
	p := startSidecarProc(t, ns, "pod-a")
	ctx := context.Background()
	k := key(t, "stuck/job")
	code, body := p.call(t, "POST", "/v1/locks/stuck/job", `{"owner":"wedged","ttl":"1h"}`)
	if code != 200 {
		t.Fatalf("acquire: %d %s", code, body)
	}
	obj := lockShows(t, kc, ns, k, 10*time.Second, "Held", heldBy("wedged", "pod-a", fenceOf(t, body), 0))

	counted := forceReleases.Load()
	kubectl(t, "annotate", "-n", ns, "lock", obj.Name, batonv1.AnnotationForceRelease+"=wedged since Tuesday")
	lockShows(t, kc, ns, k, 10*time.Second, "Free, annotation removed", func(l *batonv1.Lock) error {
		if _, still := l.Annotations[batonv1.AnnotationForceRelease]; still || l.Status.Phase != batonv1.PhaseFree {
			return fmt.Errorf("annotations %v, status %+v", l.Annotations, l.Status)
		}
		if c := meta.FindStatusCondition(l.Status.Conditions, batonv1.ConditionHeld); c == nil || c.Reason != "ForceReleased" {
			return fmt.Errorf("condition %+v; want Held=False, ForceReleased", c)
		}
		return nil
	})
	if code, body := p.call(t, "DELETE", "/v1/locks/stuck/job?owner=wedged", ""); code != 410 || !strings.Contains(body, "force_released") {
		t.Errorf("the old holder's release: %d %s; want 410 force_released", code, body)
	}
	waitEvent(t, kc, ns, obj.Name, "ForceReleased", "wedged since Tuesday", "wedged (pod pod-a)")
	if forceReleases.Load() <= counted {
		t.Error("the force release was not counted (OnForceRelease)")
	}
	// The annotation is handled once: the pass that its own status write
	// starts, before the annotation's removal reached the cache, tells
	// nothing more.
	time.Sleep(2 * time.Second)
	if evs := events(t, kc, ns, obj.Name, "ForceReleaseSkipped"); len(evs) != 0 {
		t.Errorf("a force release that was carried out was also told skipped: %v", evs)
	}

	// The next holder is not hit by an annotation on an object that still
	// shows an older fence (as it would if the mirror lagged): the mirror
	// compares the fence shown. The mirror is stopped meanwhile, so that it
	// cannot correct the status before it sees the annotation.
	code, body = p.call(t, "POST", "/v1/locks/stuck/job", `{"owner":"next"}`)
	if code != 200 {
		t.Fatalf("acquire by next: %d %s", code, body)
	}
	next := fenceOf(t, body)
	obj = lockShows(t, kc, ns, k, 10*time.Second, "Held by next", heldBy("next", "pod-a", next, 0))
	stop()
	stale := obj.DeepCopy()
	stale.Status.Fence = next - 1
	if err := kc.Status().Update(ctx, stale); err != nil {
		t.Fatal(err)
	}
	kubectl(t, "annotate", "-n", ns, "lock", obj.Name, batonv1.AnnotationForceRelease+"=stale view")
	startMirror(t, time.Minute)
	waitEvent(t, kc, ns, obj.Name, "ForceReleaseSkipped", "stale view", fmt.Sprintf("fence %d", next-1))
	if code, body := p.call(t, "GET", "/v1/locks/stuck/job", ""); !strings.Contains(body, `"owner":"next"`) {
		t.Errorf("the next holder after a stale force release: %d %s", code, body)
	}
	lockShows(t, kc, ns, k, 10*time.Second, "Held by next again", heldBy("next", "pod-a", next, 0))
}

// waitEvent waits for an Event about the Lock name with reason whose note
// says every one of says.
func waitEvent(t *testing.T, kc client.Client, ns, name, reason string, says ...string) {
	t.Helper()
	waitFor(t, 10*time.Second, "a "+reason+" Event", func() error {
		var evs eventsv1.EventList
		if err := kc.List(context.Background(), &evs, client.InNamespace(ns)); err != nil {
			return err
		}
	next:
		for _, e := range evs.Items {
			if e.Reason != reason || e.Regarding.Name != name {
				continue
			}
			for _, s := range says {
				if !strings.Contains(e.Note, s) {
					continue next
				}
			}
			return nil
		}
		return fmt.Errorf("%d events, none %s saying %q", len(evs.Items), reason, says)
	})
}

// events returns the notes of the Events about the Lock name with reason.
func events(t *testing.T, kc client.Client, ns, name, reason string) []string {
	t.Helper()
	var evs eventsv1.EventList
	if err := kc.List(context.Background(), &evs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var notes []string
	for _, e := range evs.Items {
		if e.Reason == reason && e.Regarding.Name == name {
			notes = append(notes, e.Note)
		}
	}
	return notes
}

// fenceOf reads the fence of an acquire's answer.
func fenceOf(t *testing.T, body string) int64 {
	t.Helper()
	var g struct {
		Fence int64 `json:"fence"`
	}
	if err := json.Unmarshal([]byte(body), &g); err != nil || g.Fence == 0 {
		t.Fatalf("no fence in %s: %v", body, err)
	}
	return g.Fence
}

// TestRestartedMirrorConverges: locks that change while no mirror runs
// are shown right once one starts again: a released lock turns Free and a
// new one appears.
func TestRestartedMirrorConverges(t *testing.T) {
	needAPIServer(t)
	kc := kube(t)
	ns := namespace(t, kc, "restart")
	stop := startMirror(t, time.Minute)
	a := newSidecar(t, ns, "pod-a")
	ctx := context.Background()
	k1, k2 := key(t, "one"), key(t, "two")
	g1, err := a.c.Acquire(ctx, coordinator.AcquireRequest{Key: k1, Owner: "o1"})
	if err != nil {
		t.Fatal(err)
	}
	lockShows(t, kc, ns, k1, 10*time.Second, "one Held", heldBy("o1", "pod-a", g1.Fence, 0))
	stop()

	if _, err := a.c.Release(ctx, k1, "o1"); err != nil {
		t.Fatal(err)
	}
	g2, err := a.c.Acquire(ctx, coordinator.AcquireRequest{Key: k2, Owner: "o2"})
	if err != nil {
		t.Fatal(err)
	}
	startMirror(t, time.Minute)
	lockShows(t, kc, ns, k1, 20*time.Second, "one Free", func(l *batonv1.Lock) error {
		if l.Status.Phase != batonv1.PhaseFree {
			return fmt.Errorf("status %+v", l.Status)
		}
		return nil
	})
	lockShows(t, kc, ns, k2, 20*time.Second, "two Held", heldBy("o2", "pod-a", g2.Fence, 0))
}

// kubectl runs the kubectl built alongside the apiserver as an admin.
func kubectl(t *testing.T, args ...string) string {
	t.Helper()
	return kubectlIn(t, testEnv, restConfig, args...)
}

// kubectlIn runs kubectl against the apiserver env started, at rc.
func kubectlIn(t *testing.T, env *envtest.Environment, rc *rest.Config, args ...string) string {
	t.Helper()
	user, err := env.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, rc)
	if err != nil {
		t.Fatal(err)
	}
	k, err := user.Kubectl()
	if err != nil {
		t.Fatal(err)
	}
	stdout, stderr, err := k.Run(args...)
	out, _ := io.ReadAll(stdout)
	if err != nil {
		var e bytes.Buffer
		io.Copy(&e, stderr)
		t.Fatalf("kubectl %v: %v: %s", args, err, e.String())
	}
	return string(out)
}

// TestSecondReplicaTakesOver: with two replicas only the elected one
// mirrors; when it stops, the other takes over.
func TestSecondReplicaTakesOver(t *testing.T) {
	needAPIServer(t)
	kc := kube(t)
	ns := namespace(t, kc, "replicas")
	stopFirst := startMirror(t, time.Minute)
	a := newSidecar(t, ns, "pod-a")
	ctx := context.Background()
	g1, err := a.c.Acquire(ctx, coordinator.AcquireRequest{Key: key(t, "first"), Owner: "o1"})
	if err != nil {
		t.Fatal(err)
	}
	lockShows(t, kc, ns, key(t, "first"), 10*time.Second, "first Held", heldBy("o1", "pod-a", g1.Fence, 0))
	startMirror(t, time.Minute) // waits for the election
	stopFirst()                 // steps down, releasing the Lease
	stopped := time.Now()
	g2, err := a.c.Acquire(ctx, coordinator.AcquireRequest{Key: key(t, "second"), Owner: "o2"})
	if err != nil {
		t.Fatal(err)
	}
	lockShows(t, kc, ns, key(t, "second"), 20*time.Second, "second Held, by the second replica", heldBy("o2", "pod-a", g2.Fence, 0))
	t.Logf("the second replica mirrored %v after the first stopped", time.Since(stopped).Round(time.Millisecond))
}

// TestConflictsAreRetriedQuietly: a status write that meets a newer
// version of the Lock (another writer got there first: the real
// apiserver answers 409 Conflict) is tried again from a fresh read, and
// the controller logs no error for it.
func TestConflictsAreRetriedQuietly(t *testing.T) {
	needAPIServer(t)
	kc := kube(t)
	ns := namespace(t, kc, "conflict")
	var conflicts atomic.Int32
	var logs syncBuffer
	cli, _ := testEtcd.Client(t)
	startMirrorWith(t, restConfig, cli, time.Minute, func(o *ctrl.Options) {
		o.Logger = zap.New(zap.WriteTo(&logs))
		o.NewClient = func(cfg *rest.Config, opts client.Options) (client.Client, error) {
			c, err := client.NewWithWatch(cfg, opts)
			if err != nil {
				return nil, err
			}
			return interceptor.NewClient(c, interceptor.Funcs{
				SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
					if obj.GetNamespace() == ns && conflicts.Load() < 3 {
						// Another writer changes the object first, as the
						// cache has not seen yet.
						conflicts.Add(1)
						var cur batonv1.Lock
						if err := kc.Get(ctx, client.ObjectKeyFromObject(obj), &cur); err != nil {
							return err
						}
						cur.Labels["baton.test/touched"] = fmt.Sprint(conflicts.Load())
						if err := kc.Update(ctx, &cur); err != nil {
							return err
						}
					}
					return c.SubResource(sub).Update(ctx, obj, opts...)
				},
			}), nil
		}
	})
	p := startSidecarProc(t, ns, "pod-a")
	code, body := p.call(t, "POST", "/v1/locks/busy/job", `{"owner":"run-1"}`)
	if code != 200 {
		t.Fatalf("acquire: %d %s", code, body)
	}
	lockShows(t, kc, ns, key(t, "busy/job"), 10*time.Second, "Held despite the conflicts", heldBy("run-1", "pod-a", fenceOf(t, body), 0))
	if conflicts.Load() == 0 {
		t.Fatal("no status write met a conflict: the test tested nothing")
	}
	if strings.Contains(logs.String(), "Reconciler error") || strings.Contains(logs.String(), "the object has been modified") {
		t.Errorf("the controller logged the routine conflicts as errors:\n%s", logs.String())
	}
}
