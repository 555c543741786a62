package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ConditionApplied is the LockPolicy condition that says whether the
// policy is in force: written into etcd, where the namespace's sidecars
// read it.
const ConditionApplied = "Applied"

// LockPolicySpec says which ServiceAccounts of the namespace may lock
// which keys, and which may force release. A call is allowed when any
// rule of any LockPolicy of the namespace allows it; with no LockPolicy,
// any key may be locked and force release over the socket is refused.
type LockPolicySpec struct {
	// Rules grant ServiceAccounts keys.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	Rules []LockPolicyRule `json:"rules"`
}

// LockPolicyRule lets the ServiceAccounts it names lock the keys it names
// and, with ForceRelease, free anyone's lock of those keys.
type LockPolicyRule struct {
	// ServiceAccounts are names of ServiceAccounts of this namespace, or
	// "*" for every one.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=253
	// +kubebuilder:validation:items:Pattern=`^(\*|[a-z0-9]([-a-z0-9.]*[a-z0-9])?)$`
	ServiceAccounts []string `json:"serviceAccounts"`
	// Keys are prefixes of lock keys ("tenant-" covers "tenant-a/x"), or
	// "*" for every key.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=1032
	// +kubebuilder:validation:items:Pattern=`^(\*|[A-Za-z0-9._/-]+)$`
	Keys []string `json:"keys"`
	// ForceRelease lets these ServiceAccounts force release locks of
	// Keys over the socket (DELETE ...?force=true).
	// +optional
	ForceRelease bool `json:"forceRelease,omitempty"`
}

// LockPolicyStatus says whether the policy is in force.
type LockPolicyStatus struct {
	// ObservedGeneration is the generation the conditions describe.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Applied is True once the namespace's policies, this one
	// included, are in etcd (its message gives the etcd revision), False
	// with the reason when they cannot be written.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// LockPolicy governs the locks of its namespace: the controller writes
// the namespace's policies into etcd and its sidecars enforce them,
// answering 403 forbidden to a call no rule allows.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=lkp,categories=baton
// +kubebuilder:printcolumn:name="Applied",type=string,JSONPath=`.status.conditions[?(@.type=="Applied")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type LockPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec holds the rules.
	Spec LockPolicySpec `json:"spec"`
	// Status says whether they are in force.
	// +optional
	Status LockPolicyStatus `json:"status,omitempty"`
}

// LockPolicyList is a list of LockPolicies.
//
// +kubebuilder:object:root=true
type LockPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the LockPolicies.
	Items []LockPolicy `json:"items"`
}
