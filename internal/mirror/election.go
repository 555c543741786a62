package mirror

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	batonv1 "github.com/baton-dev/baton/api/v1alpha1"
	"github.com/baton-dev/baton/internal/keyspace"
)

// Each election in etcd is shown as a coordination.k8s.io/v1 Lease in its
// scope's namespace, named as a Lock of the same name would be, as
// client-go's leader election keeps one: holderIdentity is the leader (its
// value, else its pod), acquireTime when it was elected, renewTime when the
// mirror last saw its record written, leaseDurationSeconds how long after
// that its deadline is, leaseTransitions how many times the leader changed
// while the mirror watched. etcd decides; the Lease only shows it, and a
// Lease of that name that Baton did not make is left alone.

// Labels and annotations of the election mirror's Leases and pods.
const (
	// LabelManagedBy marks the Leases the mirror made, the only ones it
	// writes or deletes.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// ManagedBy is LabelManagedBy's value.
	ManagedBy = "baton"
	// LabelElection holds the election's name in a label-safe form, on
	// its Lease and its Lock.
	LabelElection = batonv1.LabelElection
	// AnnotationElection holds the election's name as it is.
	AnnotationElection = batonv1.Group + "/election-name"
	// AnnotationFence holds the leader's fence: a new leader's is larger.
	AnnotationFence = batonv1.Group + "/fence"
	// AnnotationValue holds what the leader announces.
	AnnotationValue = batonv1.Group + "/value"
	// AnnotationLeaderLabel "true" on a pod asks the mirror to label it
	// while it leads an election: LeaderLabelPrefix + the Lease's name,
	// "true", so that a Service can select the leader alone.
	AnnotationLeaderLabel = batonv1.Group + "/leader-label"
	// LeaderLabelPrefix is the prefix of the label of a leading pod.
	LeaderLabelPrefix = "leader." + batonv1.Group + "/"
)

// electionMirror reconciles the Leases of elections.
type electionMirror struct{ m *Mirror }

// Reconcile makes the Lease req show the election as etcd has it.
func (r electionMirror) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	res, err := r.m.reconcileElection(ctx, req)
	if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
		r.m.log.V(1).Info("conflict; reading the Lease again", "lease", req.NamespacedName, "error", err.Error())
		return reconcile.Result{RequeueAfter: conflictRetry}, nil
	}
	return res, err
}

func (m *Mirror) reconcileElection(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	ref := objectRef{namespace: req.Namespace, name: req.Name, election: true}
	if !m.cfg.inScope(ref.namespace) {
		return reconcile.Result{}, nil
	}
	name, cs, _ := m.view.get(ref)
	// Read past the cache: the controller caches no Leases (a cluster's
	// nodes renew theirs every few seconds).
	var lease coordinationv1.Lease
	err := m.live.Get(ctx, req.NamespacedName, &lease)
	exists := err == nil
	switch {
	case err != nil && !apierrors.IsNotFound(err):
		return reconcile.Result{}, err
	case exists && lease.Labels[LabelManagedBy] != ManagedBy:
		m.log.Info("a Lease of the election's name is not Baton's: the election is not shown", "lease", req.NamespacedName)
		return reconcile.Result{}, nil
	case len(cs) == 0 && !exists:
		return reconcile.Result{}, m.labelLeader(ctx, ref, keyspace.Holder{})
	case len(cs) == 0:
		return m.noLeader(ctx, &lease)
	}
	if name == "" {
		name = lease.Annotations[AnnotationElection]
	}
	leader := cs[0]
	next := lease.DeepCopy()
	if !exists {
		next = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ref.namespace, Name: ref.name,
			Labels: map[string]string{LabelManagedBy: ManagedBy, LabelElection: LabelValue(name)}}}
		if m.cfg.Owner != nil {
			next.OwnerReferences = []metav1.OwnerReference{*m.cfg.Owner}
		}
	}
	showLeader(next, name, leader)
	if exists {
		err = m.client.Update(ctx, next)
	} else {
		err = m.client.Create(ctx, next)
	}
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("show election %q in Lease %s/%s: %w", name, ref.namespace, ref.name, err)
	}
	return reconcile.Result{}, m.labelLeader(ctx, ref, leader.holder)
}

// showLeader writes leader, elected in election name, into l.
func showLeader(l *coordinationv1.Lease, name string, leader contender) {
	h := leader.holder
	fence := strconv.FormatInt(leader.createRev, 10)
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	transitions := ptr.Deref(l.Spec.LeaseTransitions, 0)
	if was := l.Annotations[AnnotationFence]; was != fence {
		if was != "" {
			transitions++
		}
		// Elected now, as far as the mirror knows, unless its record says.
		l.Spec.AcquireTime = &metav1.MicroTime{Time: leader.seen}
	}
	if !h.AcquiredAt.IsZero() {
		l.Spec.AcquireTime = &metav1.MicroTime{Time: h.AcquiredAt}
	}
	l.Annotations[AnnotationElection], l.Annotations[AnnotationFence] = name, fence
	if h.Value != "" {
		l.Annotations[AnnotationValue] = h.Value
	} else {
		delete(l.Annotations, AnnotationValue)
	}
	l.Spec.HolderIdentity = ptr.To(h.LeaderName())
	l.Spec.RenewTime = &metav1.MicroTime{Time: leader.seen}
	l.Spec.LeaseTransitions = ptr.To(transitions)
	l.Spec.LeaseDurationSeconds = nil
	if !h.ExpiresAt.IsZero() {
		l.Spec.LeaseDurationSeconds = ptr.To(int32(max(1, math.Ceil(h.ExpiresAt.Sub(leader.seen).Seconds()))))
	}
}

// noLeader shows an election nobody campaigns in any more: no holder
// (the fence annotation keeps the last leader's, so that the next counts
// as a transition), no leader's label; the Lease goes once the mirror's
// free retention passed.
func (m *Mirror) noLeader(ctx context.Context, l *coordinationv1.Lease) (reconcile.Result, error) {
	ref := objectRef{namespace: l.Namespace, name: l.Name, election: true}
	if err := m.labelLeader(ctx, ref, keyspace.Holder{}); err != nil {
		return reconcile.Result{}, err
	}
	if l.Spec.HolderIdentity != nil {
		next := l.DeepCopy()
		next.Spec.HolderIdentity, next.Spec.LeaseDurationSeconds = nil, nil
		next.Spec.RenewTime = &metav1.MicroTime{Time: time.Now()}
		delete(next.Annotations, AnnotationValue)
		if err := m.client.Update(ctx, next); err != nil {
			return reconcile.Result{}, err
		}
		return reconcile.Result{RequeueAfter: m.cfg.FreeRetention}, nil
	}
	if l.Spec.RenewTime != nil {
		if left := time.Until(l.Spec.RenewTime.Add(m.cfg.FreeRetention)); left > 0 {
			return reconcile.Result{RequeueAfter: left}, nil
		}
	}
	if err := m.client.Delete(ctx, l, client.Preconditions{UID: &l.UID}); err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, err
	}
	return reconcile.Result{}, nil
}
