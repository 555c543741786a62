// Package v1alpha1 holds the Lock resource (group baton.dev): a read-only
// projection of one Baton lock, kept by the mirror controller from etcd,
// which stays the single source of truth.
//
// +kubebuilder:object:generate=true
// +groupName=baton.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Group is the API group of the Lock resource.
const Group = "baton.dev"

// GroupVersion is the group and version of the types in this package.
func GroupVersion() schema.GroupVersion {
	return schema.GroupVersion{Group: Group, Version: "v1alpha1"}
}

// AddToScheme registers Lock and LockList with s.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion(), &Lock{}, &LockList{}, &LockPolicy{}, &LockPolicyList{})
	metav1.AddToGroupVersion(s, GroupVersion())
	return nil
}
