package mirror

import (
	"context"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kevents "k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batonv1 "github.com/baton-dev/baton/api/v1alpha1"
)

// TestForceReleaseFromAStaleCache: a pass that etcd's delete of the
// released key starts may read the Lock from the cache before the force
// release's own writes (its status, the annotation's removal) reached it.
// It then sees the holder gone and the annotation still there: the API
// server tells it the release was carried out, and it says nothing. A
// release still asked of a holder that is gone is told skipped.
func TestForceReleaseFromAStaleCache(t *testing.T) {
	needAPIServer(t)
	ctx := context.Background()
	kc := kube(t)
	ns := namespace(t, kc, "stale-cache")
	const reason = "wedged since Tuesday"
	lock := func(name string) *batonv1.Lock {
		obj := &batonv1.Lock{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
			Annotations: map[string]string{batonv1.AnnotationForceRelease: reason}}}
		if err := kc.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
		obj.Status = batonv1.LockStatus{Key: name, Scope: ns, Phase: batonv1.PhaseHeld, Fence: 7,
			Holder: &batonv1.Holder{Owner: "wedged"}}
		meta.SetStatusCondition(&obj.Status.Conditions, metav1.Condition{Type: batonv1.ConditionHeld, Status: metav1.ConditionTrue, Reason: "Granted", Message: "held"})
		if err := kc.Status().Update(ctx, obj); err != nil {
			t.Fatal(err)
		}
		return obj
	}
	rec := kevents.NewFakeRecorder(10)
	m := &Mirror{cfg: Default(), client: kc, live: kc, recorder: rec, log: logr.Discard(), forced: func() {}}

	// Carried out: the API server has the status and the annotation gone;
	// the pass holds the object as it was before.
	done := lock("done")
	stale := done.DeepCopy()
	base := done.DeepCopy()
	meta.SetStatusCondition(&done.Status.Conditions, metav1.Condition{Type: batonv1.ConditionHeld, Status: metav1.ConditionFalse,
		Reason: "ForceReleased", Message: forcedMessage(reason, 7)})
	if err := kc.Status().Patch(ctx, done, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
	base = done.DeepCopy()
	delete(done.Annotations, batonv1.AnnotationForceRelease)
	if err := kc.Patch(ctx, done, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
	if err := m.forceRelease(ctx, stale, nil, reason); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-rec.Events:
		t.Errorf("a force release carried out, seen from a stale cache, was told: %s", ev)
	default:
	}

	// Still asked, and the holder gone: told skipped, annotation removed.
	asked := lock("asked")
	if err := m.forceRelease(ctx, asked.DeepCopy(), nil, reason); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-rec.Events:
		if !strings.Contains(ev, "ForceReleaseSkipped") || !strings.Contains(ev, "fence 7 no longer holds") {
			t.Errorf("the skipped release was told: %s", ev)
		}
	default:
		t.Error("a release asked of a holder that is gone was not told skipped")
	}
	var got batonv1.Lock
	if err := kc.Get(ctx, client.ObjectKeyFromObject(asked), &got); err != nil {
		t.Fatal(err)
	}
	if _, still := got.Annotations[batonv1.AnnotationForceRelease]; still {
		t.Error("the annotation of a skipped release was left")
	}
}
