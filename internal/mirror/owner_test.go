package mirror

import (
	"context"
	"fmt"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	batonv1 "github.com/baton-dev/baton/api/v1alpha1"
	"github.com/baton-dev/baton/internal/coordinator"
)

// TestLocksAreOwned: with an owner configured (the chart's controller
// ClusterRole), every Lock object names it, so that the garbage collector
// deletes them with it at helm uninstall: those the mirror creates, and
// those an earlier mirror made without it, which it adopts. An owner made
// again under a new UID replaces the old reference. (envtest runs no
// garbage collector; test/node sees the objects go at helm uninstall.)
func TestLocksAreOwned(t *testing.T) {
	needAPIServer(t)
	kc := kube(t)
	ns := namespace(t, kc, "owned")
	ctx := context.Background()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "owner-of-locks"}}
	if err := kc.Create(ctx, role); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kc.Delete(context.Background(), role) })
	ref := func(uid types.UID) metav1.OwnerReference {
		return metav1.OwnerReference{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole", Name: role.Name, UID: uid}
	}
	ownedBy := func(uid types.UID) func(*batonv1.Lock) error {
		return func(l *batonv1.Lock) error {
			if len(l.OwnerReferences) != 1 || l.OwnerReferences[0] != ref(uid) {
				return fmt.Errorf("owners %+v, want only %+v", l.OwnerReferences, ref(uid))
			}
			return nil
		}
	}

	a := newSidecar(t, ns, "pod-a")
	k1, k2 := key(t, "made-before"), key(t, "made-after")
	g1, err := a.c.Acquire(ctx, coordinator.AcquireRequest{Key: k1, Owner: "o1"})
	if err != nil {
		t.Fatal(err)
	}
	// A mirror without an owner makes an object without one.
	stop := startMirror(t, time.Minute)
	obj := lockShows(t, kc, ns, k1, 10*time.Second, "Held", heldBy("o1", "pod-a", g1.Fence, 0))
	if len(obj.OwnerReferences) != 0 {
		t.Fatalf("owners %+v with no owner configured", obj.OwnerReferences)
	}
	stop()
	// The same object, owned by the ClusterRole's earlier self.
	obj.OwnerReferences = []metav1.OwnerReference{ref("0f0f0f0f-0000-4000-8000-000000000000")}
	if err := kc.Update(ctx, obj); err != nil {
		t.Fatal(err)
	}

	owner := ref(role.UID)
	startMirrorWith(t, restConfig, a.cli, time.Minute, nil, func(c *Config) { c.Owner = &owner })
	lockShows(t, kc, ns, k1, 10*time.Second, "adopted", ownedBy(role.UID))
	g2, err := a.c.Acquire(ctx, coordinator.AcquireRequest{Key: k2, Owner: "o2"})
	if err != nil {
		t.Fatal(err)
	}
	lockShows(t, kc, ns, k2, 10*time.Second, "created owned", func(l *batonv1.Lock) error {
		if err := heldBy("o2", "pod-a", g2.Fence, 0)(l); err != nil {
			return err
		}
		return ownedBy(role.UID)(l)
	})
}

// TestOwnerIsValidated: an owner without its UID is refused, naming the
// field.
func TestOwnerIsValidated(t *testing.T) {
	c := Default()
	c.Owner = &metav1.OwnerReference{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole", Name: "x"}
	if err := c.Validate(); err == nil {
		t.Fatal("an owner without a UID was accepted")
	}
}
