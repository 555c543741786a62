package mirror

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	batonv1 "github.com/baton-dev/baton/api/v1alpha1"
	"github.com/baton-dev/baton/internal/keyspace"
)

// The mirror's permissions, written into config/rbac by `make manifests`.
// +kubebuilder:rbac:groups=baton.dev,resources=locks,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=baton.dev,resources=locks/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch;delete

// Reconcile makes the Lock object req show what etcd has: Held with its
// holder, Free with its last holder, or gone after the retention. It also
// carries out a force release asked for by annotation. A write that met a
// newer version of the object (409 Conflict, routine when etcd's and the
// object's changes cross) is tried again from a fresh read, not reported
// as an error.
func (m *Mirror) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	res, err := m.reconcile(ctx, req)
	if apierrors.IsConflict(err) {
		m.log.V(1).Info("conflict; reading the Lock again", "lock", req.NamespacedName, "error", err.Error())
		return reconcile.Result{RequeueAfter: conflictRetry}, nil
	}
	return res, err
}

// conflictRetry is how soon a reconcile that met a conflict runs again.
const conflictRetry = 100 * time.Millisecond

func (m *Mirror) reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	if !m.cfg.inScope(req.Namespace) {
		return reconcile.Result{}, nil
	}
	var obj batonv1.Lock
	err := m.client.Get(ctx, req.NamespacedName, &obj)
	exists := err == nil
	if err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, err
	}
	ref := m.lockRef(req.Namespace, req.Name, exists, obj.Labels)
	key, cs, rev := m.view.get(ref)
	if exists {
		if reason, ok := obj.Annotations[batonv1.AnnotationForceRelease]; ok {
			return reconcile.Result{}, m.forceRelease(ctx, &obj, cs, reason)
		}
		if err := m.adopt(ctx, &obj); err != nil {
			return reconcile.Result{}, err
		}
	}
	if len(cs) == 0 {
		if !exists {
			return reconcile.Result{}, nil
		}
		return m.free(ctx, &obj, rev)
	}
	if !exists {
		named := batonv1.LabelKey
		if ref.election {
			named = batonv1.LabelElection
		}
		obj = batonv1.Lock{ObjectMeta: metav1.ObjectMeta{
			Namespace: req.Namespace, Name: req.Name,
			Labels: map[string]string{batonv1.LabelScope: ref.namespace, named: LabelValue(key)},
		}}
		if m.cfg.Owner != nil {
			obj.OwnerReferences = []metav1.OwnerReference{*m.cfg.Owner}
		}
		if err := m.client.Create(ctx, &obj); err != nil {
			return reconcile.Result{}, fmt.Errorf("create Lock %s/%s for %q: %w", req.Namespace, req.Name, key, err)
		}
	}
	next := obj.DeepCopy()
	s := &next.Status
	s.Key, s.Election, s.Scope, s.Phase, s.Revision = key, ref.election, ref.namespace, batonv1.PhaseHeld, rev
	s.Holder = holderOf(cs[0], ref.election)
	s.Fence = cs[0].createRev
	n := holders(cs)
	s.Waiters = int32(-n)
	s.Limit, s.HeldUnits, s.Holders = 0, 0, nil
	for i, c := range cs {
		s.Waiters += int32(c.holder.Callers())
		if i < n {
			s.HeldUnits += int32(c.holder.Units())
		}
		if s.Limit == 0 && !c.holder.Foreign {
			s.Limit = int32(c.holder.Limit)
		}
	}
	if n > 1 || s.Limit > 0 {
		for _, c := range cs[:n] {
			h := holderOf(c, ref.election)
			h.Fence = c.createRev
			s.Holders = append(s.Holders, *h)
		}
	}
	s.LastHolder, s.ReleasedAt = nil, nil
	meta.SetStatusCondition(&s.Conditions, metav1.Condition{
		Type: batonv1.ConditionHeld, Status: metav1.ConditionTrue, Reason: "Granted",
		Message: fmt.Sprintf("held by %s with fence %d", describe(s.Holder), s.Fence),
	})
	return reconcile.Result{}, m.updateStatus(ctx, &obj, next)
}

// lockRef is the line in etcd that the Lock object ns/name shows: a
// lock's, or an election's, as the object's labels say, or for an object
// not made yet, its name and the view.
func (m *Mirror) lockRef(ns, name string, exists bool, labels map[string]string) objectRef {
	lock := objectRef{namespace: ns, name: name}
	election := objectRef{namespace: ns, name: strings.TrimPrefix(name, electionPrefix), election: true}
	switch {
	case !strings.HasPrefix(name, electionPrefix):
		return lock
	case exists:
		if _, ok := labels[batonv1.LabelElection]; ok {
			return election
		}
		return lock
	case m.view.has(lock):
		return lock
	}
	return election
}

// free shows a lock nobody holds any more as Free, then deletes it once
// the retention has passed.
func (m *Mirror) free(ctx context.Context, obj *batonv1.Lock, rev int64) (reconcile.Result, error) {
	if obj.Status.Phase != batonv1.PhaseFree || obj.Status.ReleasedAt == nil {
		next := obj.DeepCopy()
		s := &next.Status
		now := metav1.Now()
		s.Phase, s.ReleasedAt = batonv1.PhaseFree, &now
		if s.Holder != nil {
			s.LastHolder = s.Holder
		}
		s.Holder, s.Fence, s.Waiters, s.Revision = nil, 0, 0, rev
		s.Limit, s.HeldUnits, s.Holders = 0, 0, nil
		reason := "Released"
		if c := meta.FindStatusCondition(s.Conditions, batonv1.ConditionHeld); c != nil && c.Reason == "ForceReleased" {
			reason = c.Reason
		}
		meta.SetStatusCondition(&s.Conditions, metav1.Condition{
			Type: batonv1.ConditionHeld, Status: metav1.ConditionFalse, Reason: reason,
			Message: fmt.Sprintf("free; last held by %s", describe(s.LastHolder)),
		})
		if err := m.updateStatus(ctx, obj, next); err != nil {
			return reconcile.Result{}, err
		}
		return reconcile.Result{RequeueAfter: m.cfg.FreeRetention}, nil
	}
	// ReleasedAt is kept in whole seconds: count from the next one, so the
	// object never goes early.
	if left := time.Until(obj.Status.ReleasedAt.Add(time.Second + m.cfg.FreeRetention)); left > 0 {
		return reconcile.Result{RequeueAfter: left}, nil
	}
	if err := m.client.Delete(ctx, obj, client.Preconditions{UID: &obj.UID}); err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, err
	}
	return reconcile.Result{}, nil
}

// forceRelease deletes the holder's key in etcd if it is still the one the
// object shows (its create revision equals status.fence): never the next
// holder's. It records an Event either way and removes the annotation.
func (m *Mirror) forceRelease(ctx context.Context, obj *batonv1.Lock, cs []contender, reason string) error {
	shown := obj.Status.Fence
	target := holderWith(cs, shown)
	if !forceReleased(obj, shown, reason) && target == nil {
		// The holder is gone. A pass that etcd's delete of the key started
		// may have read the object from the cache before the release's
		// own writes reached it: the API server has them.
		asked, err := m.stillAsked(ctx, obj, reason)
		if err != nil || !asked {
			return err
		}
		shown = obj.Status.Fence
		target = holderWith(cs, shown)
	}
	switch {
	case forceReleased(obj, shown, reason):
		// This release was carried out: the status says so, and this pass
		// (started by that very status write) reads the object before the
		// annotation's removal reached it. Nothing to do or tell again.
	case obj.Status.Phase != batonv1.PhaseHeld || shown == 0:
		m.recorder.Eventf(obj, nil, corev1.EventTypeWarning, "ForceReleaseSkipped", "ForceRelease",
			"the lock is not held; nothing to release (reason given: %s)", reason)
	case target == nil:
		m.recorder.Eventf(obj, nil, corev1.EventTypeWarning, "ForceReleaseSkipped", "ForceRelease",
			"the holder with fence %d no longer holds the lock; the current holder is left alone (reason given: %s)", shown, reason)
	default:
		tctx, cancel := context.WithTimeout(ctx, m.cfg.RequestTimeout)
		resp, err := m.etcd.Txn(tctx).
			If(clientv3.Compare(clientv3.CreateRevision(target.etcdKey), "=", shown)).
			Then(clientv3.OpDelete(target.etcdKey)).
			Commit()
		cancel()
		if err != nil {
			return fmt.Errorf("force release %q: %w", obj.Status.Key, err) // retried, annotation kept
		}
		if !resp.Succeeded {
			m.recorder.Eventf(obj, nil, corev1.EventTypeWarning, "ForceReleaseSkipped", "ForceRelease",
				"the holder with fence %d released the lock meanwhile (reason given: %s)", shown, reason)
			break
		}
		m.recorder.Eventf(obj, nil, corev1.EventTypeNormal, "ForceReleased", "ForceRelease",
			"released %q held by %s with fence %d: %s", obj.Status.Key, describe(holderOf(*target, false)), shown, reason)
		m.log.Info("force released", "lock", obj.Status.Key, "scope", obj.Namespace, "fence", shown, "holder", describe(holderOf(*target, false)), "reason", reason)
		m.forced()
		// The release is done: its record in the status must not meet a
		// conflict, or the next pass would not know and would tell the
		// release skipped. A merge patch carries no resourceVersion, and
		// only the mirror writes the status.
		base := obj.DeepCopy()
		meta.SetStatusCondition(&obj.Status.Conditions, metav1.Condition{
			Type: batonv1.ConditionHeld, Status: metav1.ConditionFalse, Reason: "ForceReleased",
			Message: forcedMessage(reason, shown),
		})
		if err := m.client.Status().Patch(ctx, obj, client.MergeFrom(base)); err != nil {
			return fmt.Errorf("record the force release of Lock %s/%s: %w", obj.Namespace, obj.Name, err)
		}
	}
	patch := client.MergeFrom(obj.DeepCopy())
	delete(obj.Annotations, batonv1.AnnotationForceRelease)
	return m.client.Patch(ctx, obj, patch)
}

// stillAsked reads obj from the API server, past the cache, into obj, and
// reports whether it still asks for the force release for reason (a new
// reason is a new request, which its own pass answers).
func (m *Mirror) stillAsked(ctx context.Context, obj *batonv1.Lock, reason string) (bool, error) {
	var fresh batonv1.Lock
	if err := m.live.Get(ctx, client.ObjectKeyFromObject(obj), &fresh); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("read Lock %s/%s: %w", obj.Namespace, obj.Name, err)
	}
	*obj = fresh
	return fresh.Annotations[batonv1.AnnotationForceRelease] == reason, nil
}

// holderWith is the holder among cs whose key's create revision is fence.
func holderWith(cs []contender, fence int64) *contender {
	for i := range cs[:holders(cs)] {
		if cs[i].createRev == fence {
			return &cs[i]
		}
	}
	return nil
}

// forceReleased reports whether obj's status records the force release,
// for reason, of its holder with fence shown: the Held condition is False,
// ForceReleased, with that reason, while the status still shows that
// holder. (Another reason is a new request, answered as such.)
func forceReleased(obj *batonv1.Lock, shown int64, reason string) bool {
	c := meta.FindStatusCondition(obj.Status.Conditions, batonv1.ConditionHeld)
	return shown != 0 && c != nil && c.Status == metav1.ConditionFalse && c.Reason == "ForceReleased" &&
		c.Message == forcedMessage(reason, shown)
}

// forcedMessage is the Held condition's message after the force release,
// for reason, of the holder with fence.
func forcedMessage(reason string, fence int64) string {
	return fmt.Sprintf("force released by annotation (fence %d): %s", fence, reason)
}

// updateStatus writes next's status when it differs from obj's.
func (m *Mirror) updateStatus(ctx context.Context, obj, next *batonv1.Lock) error {
	if equality.Semantic.DeepEqual(obj.Status, next.Status) {
		return nil
	}
	if err := m.client.Status().Update(ctx, next); err != nil {
		return fmt.Errorf("update the status of Lock %s/%s: %w", obj.Namespace, obj.Name, err)
	}
	*obj = *next
	return nil
}

// holderOf turns a contender into the Holder shown in status; a leader of
// an election (election) with the value it announced. (A foreign lock
// holder's value in etcd, whatever it is, is not shown.)
func holderOf(c contender, election bool) *batonv1.Holder {
	h := &batonv1.Holder{Lease: strconv.FormatInt(c.lease, 16), Foreign: c.holder.Foreign}
	if election {
		h.Value = c.holder.Value
	}
	if c.holder.Foreign {
		return h
	}
	h.Owner, h.Pod, h.Namespace, h.Node, h.Cluster = c.holder.Owner, c.holder.Pod, c.holder.Namespace, c.holder.Node, c.holder.Cluster
	h.AcquiredAt, h.ExpiresAt = timeOf(c.holder.AcquiredAt), timeOf(c.holder.ExpiresAt)
	h.Mode, h.Weight = string(c.holder.Mode), int32(c.holder.Units())
	return h
}

// holders returns how many contenders at the front of cs, ordered by
// create revision, hold the lock.
func holders(cs []contender) int {
	claims := make([]keyspace.Claim, len(cs))
	for i, c := range cs {
		claims[i] = keyspace.ClaimOf(c.holder)
	}
	return keyspace.Holders(claims)
}

func timeOf(t time.Time) *metav1.Time {
	if t.IsZero() {
		return nil
	}
	mt := metav1.NewTime(t)
	return &mt
}

// describe names a holder for messages.
func describe(h *batonv1.Holder) string {
	switch {
	case h == nil:
		return "nobody"
	case h.Foreign:
		return "a client other than Baton (lease " + h.Lease + ")"
	case h.Pod != "":
		return fmt.Sprintf("%s (pod %s)", h.Owner, h.Pod)
	default:
		return h.Owner
	}
}
