package mirror

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	batonv1 "github.com/baton-dev/baton/api/v1alpha1"
)

// owned reports whether obj names owner among its owners, by UID.
func owned(obj *batonv1.Lock, owner *metav1.OwnerReference) bool {
	for _, r := range obj.OwnerReferences {
		if r.UID == owner.UID {
			return true
		}
	}
	return false
}

// withOwner returns refs with owner in place of any earlier reference to
// an object of its kind and name (the same owner made again, under a new
// UID).
func withOwner(refs []metav1.OwnerReference, owner metav1.OwnerReference) []metav1.OwnerReference {
	out := []metav1.OwnerReference{owner}
	for _, r := range refs {
		if r.APIVersion != owner.APIVersion || r.Kind != owner.Kind || r.Name != owner.Name {
			out = append(out, r)
		}
	}
	return out
}

// adopt makes the configured owner an owner of obj, an object made before
// the mirror had one (an earlier version, or a mirror run without it).
func (m *Mirror) adopt(ctx context.Context, obj *batonv1.Lock) error {
	owner := m.cfg.Owner
	if owner == nil || owned(obj, owner) {
		return nil
	}
	base := obj.DeepCopy()
	obj.OwnerReferences = withOwner(obj.OwnerReferences, *owner)
	if err := m.client.Patch(ctx, obj, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("make %s %s the owner of Lock %s/%s: %w", owner.Kind, owner.Name, obj.Namespace, obj.Name, err)
	}
	return nil
}
