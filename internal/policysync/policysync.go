// Package policysync writes each namespace's LockPolicy objects into etcd,
// at the key of the namespace's scope (keyspace.Layout.Policy), where that
// namespace's sidecars read and enforce them (package policy). It runs in
// the controller, on the elected leader, and says in each LockPolicy's
// Applied condition whether its rules are in force.
package policysync

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	batonv1 "github.com/baton-dev/baton/api/v1alpha1"
	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/policy"
)

// +kubebuilder:rbac:groups=baton.dev,resources=lockpolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups=baton.dev,resources=lockpolicies/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch

// Syncer reconciles one namespace at a time: its LockPolicy objects
// against its scope's policy key in etcd.
type Syncer struct {
	etcd    *clientv3.Client
	client  client.Client
	log     logr.Logger
	scopes  []string // the namespaces synced; empty: all
	timeout time.Duration
	written func() // hears each policy written (OnWrite)
}

// Option configures a Syncer.
type Option func(*Syncer)

// OnWrite makes f hear each namespace's policy written into etcd (or
// deleted), for a metric.
func OnWrite(f func()) Option { return func(s *Syncer) { s.written = f } }

// Setup adds the Syncer to mgr, whose scheme must know LockPolicy. It
// syncs the namespaces of scopes (empty: every namespace), each etcd
// request bounded by timeout. Namespaces are watched too, so that a
// namespace whose policies went while the controller was down is set
// back to the default at start.
func Setup(mgr manager.Manager, etcd *clientv3.Client, scopes []string, timeout time.Duration, opts ...Option) (*Syncer, error) {
	s := &Syncer{etcd: etcd, client: mgr.GetClient(), log: mgr.GetLogger().WithName("policy"), scopes: scopes, timeout: timeout, written: func() {}}
	for _, o := range opts {
		o(s)
	}
	byNamespace := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		ns := o.GetNamespace()
		if _, isNS := o.(*corev1.Namespace); isNS {
			ns = o.GetName()
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: ns}}}
	})
	err := builder.ControllerManagedBy(mgr).
		Named("lock-policy").
		// The tests start several managers in one process.
		WithOptions(controller.Options{SkipNameValidation: ptr.To(true)}).
		Watches(&batonv1.LockPolicy{}, byNamespace).
		Watches(&corev1.Namespace{}, byNamespace, builder.OnlyMetadata).
		Complete(s)
	if err != nil {
		return nil, fmt.Errorf("set up the LockPolicy controller: %w", err)
	}
	return s, nil
}

// Reconcile writes the policies of the namespace req.Name into etcd, or
// deletes its policy key when it has none, and reports in each policy's
// status. A policy that does not validate keeps the namespace's policy in
// etcd as it was: writing the others without it could grant more (with no
// policy left, the default lets any key be locked).
func (s *Syncer) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	ns := req.Name
	if len(s.scopes) > 0 && !slices.Contains(s.scopes, ns) {
		return reconcile.Result{}, nil
	}
	layout, err := keyspace.NewLayout(ns)
	if err != nil {
		return reconcile.Result{}, nil // a namespace name is always a scope; nothing to do otherwise
	}
	var list batonv1.LockPolicyList
	if err := s.client.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return reconcile.Result{}, err
	}
	slices.SortFunc(list.Items, func(a, b batonv1.LockPolicy) int { return strings.Compare(a.Name, b.Name) })
	var doc policy.Document
	var live []*batonv1.LockPolicy
	bad := false
	for i := range list.Items {
		p := &list.Items[i]
		if p.DeletionTimestamp != nil {
			continue
		}
		live = append(live, p)
		pol := toPolicy(p)
		if err := (policy.Document{Policies: []policy.Policy{pol}}).Validate(); err != nil {
			bad = true
			s.setApplied(ctx, p, metav1.ConditionFalse, "Invalid", err.Error()+"; the namespace's policy in force stays as it was")
			continue
		}
		doc.Policies = append(doc.Policies, pol)
	}
	if bad {
		return reconcile.Result{}, nil
	}
	rev, changed, err := s.write(ctx, layout.Policy(), doc)
	if err != nil {
		for _, p := range live {
			s.setApplied(ctx, p, metav1.ConditionFalse, "EtcdUnavailable", "cannot write the policy into etcd: "+err.Error())
		}
		return reconcile.Result{}, err
	}
	if changed {
		// Who changed the objects is in the API server's audit log.
		s.log.Info("lock policy written", "namespace", ns, "key", layout.Policy(), "policies", doc.Names(), "revision", rev)
		s.written()
	}
	for _, p := range live {
		s.setApplied(ctx, p, metav1.ConditionTrue, "InForce",
			fmt.Sprintf("in force with the namespace's LockPolicies %s (etcd key %s, revision %d)", strings.Join(doc.Names(), ", "), layout.Policy(), rev))
	}
	return reconcile.Result{}, nil
}

// write makes key hold doc (absent when doc has no policies), writing
// only when it differs. rev is the revision of the value now in force.
func (s *Syncer) write(ctx context.Context, key string, doc policy.Document) (rev int64, changed bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	cur, err := s.etcd.Get(ctx, key)
	if err != nil {
		return 0, false, err
	}
	want := doc.Encode()
	switch {
	case len(doc.Policies) == 0 && len(cur.Kvs) == 0:
		return cur.Header.Revision, false, nil
	case len(doc.Policies) == 0:
		r, err := s.etcd.Delete(ctx, key)
		if err != nil {
			return 0, false, err
		}
		return r.Header.Revision, true, nil
	case len(cur.Kvs) > 0 && bytes.Equal(cur.Kvs[0].Value, want):
		return cur.Kvs[0].ModRevision, false, nil
	}
	r, err := s.etcd.Put(ctx, key, string(want))
	if err != nil {
		return 0, false, err
	}
	return r.Header.Revision, true, nil
}

// setApplied sets p's Applied condition, writing the status only when it
// changed.
func (s *Syncer) setApplied(ctx context.Context, p *batonv1.LockPolicy, status metav1.ConditionStatus, reason, msg string) {
	changed := meta.SetStatusCondition(&p.Status.Conditions, metav1.Condition{
		Type: batonv1.ConditionApplied, Status: status, Reason: reason, Message: msg, ObservedGeneration: p.Generation,
	})
	if !changed && p.Status.ObservedGeneration == p.Generation {
		return
	}
	p.Status.ObservedGeneration = p.Generation
	if err := s.client.Status().Update(ctx, p); err != nil {
		s.log.V(1).Info("status not written; the next event writes it", "lockPolicy", client.ObjectKeyFromObject(p), "err", err)
	}
}

// toPolicy is the policy of one LockPolicy object.
func toPolicy(p *batonv1.LockPolicy) policy.Policy {
	out := policy.Policy{Name: p.Name, Rules: make([]policy.Rule, len(p.Spec.Rules))}
	for i, r := range p.Spec.Rules {
		out.Rules[i] = policy.Rule{ServiceAccounts: r.ServiceAccounts, Keys: r.Keys, ForceRelease: r.ForceRelease}
	}
	return out
}
