package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Labels and annotations of Lock objects.
const (
	// LabelScope holds the Baton scope of the lock (also its namespace).
	LabelScope = Group + "/scope"
	// LabelKey holds the lock key in a label-safe form ('/' becomes '.',
	// cut to 63 characters) for `kubectl get locks -l`; status.key has
	// the exact key.
	LabelKey = Group + "/key"
	// LabelElection, on the Lock of an election, holds the election's
	// name in a label-safe form, as LabelKey does a lock's key: `kubectl
	// get locks -l baton.dev/election` lists the elections alone.
	LabelElection = Group + "/election"
	// AnnotationForceRelease, set to a reason, makes the mirror release the
	// lock in etcd if the holder shown in status still holds it (of an
	// election: its leader resigns by force, and the next candidate leads).
	AnnotationForceRelease = Group + "/force-release"
)

// LockPhase says whether a lock is held.
// +kubebuilder:validation:Enum=Held;Free
type LockPhase string

// Lock phases.
const (
	// PhaseHeld: a contender holds the lock.
	PhaseHeld LockPhase = "Held"
	// PhaseFree: nobody holds it; the object goes after the retention.
	PhaseFree LockPhase = "Free"
)

// Condition types of a Lock.
const (
	// ConditionHeld is True while the lock is held; its reason says how
	// it ended when False (Released, ForceReleased).
	ConditionHeld = "Held"
)

// Holder is who holds, or held, a lock: the record its sidecar wrote in
// etcd.
type Holder struct {
	// Owner is the execution id the holder's app gave.
	// +optional
	Owner string `json:"owner,omitempty"`
	// Pod, Namespace and Node of the holder's sidecar.
	// +optional
	Pod string `json:"pod,omitempty"`
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// +optional
	Node string `json:"node,omitempty"`
	// Cluster is the holder's Kubernetes cluster (its sidecar's
	// --cluster-name), when clusters share one etcd.
	// +optional
	Cluster string `json:"cluster,omitempty"`
	// AcquiredAt is when the lock was granted.
	// +optional
	AcquiredAt *metav1.Time `json:"acquiredAt,omitempty"`
	// ExpiresAt is the lock's deadline, unless extended.
	// +optional
	ExpiresAt *metav1.Time `json:"expiresAt,omitempty"`
	// Lease is the etcd lease (hex) that carries the holder's key.
	// +optional
	Lease string `json:"lease,omitempty"`
	// Foreign is true for a holder that is not a Baton sidecar, such as
	// `etcdctl lock`.
	// +optional
	Foreign bool `json:"foreign,omitempty"`
	// Mode is "read" for a reader of a read/write lock.
	// +optional
	Mode string `json:"mode,omitempty"`
	// Weight is the units of a semaphore the holder has.
	// +optional
	Weight int32 `json:"weight,omitempty"`
	// Fence is the holder's fencing token, in status.holders.
	// +optional
	Fence int64 `json:"fence,omitempty"`
	// Value is what an election's leader announces.
	// +optional
	Value string `json:"value,omitempty"`
}

// LockStatus is the lock as etcd has it.
type LockStatus struct {
	// Key is the lock's key, as apps name it; of an election, its name.
	Key string `json:"key"`
	// Election is true when the object shows an election: its holder is
	// the leader, its waiters the candidates standing by.
	// +optional
	Election bool `json:"election,omitempty"`
	// Scope is the Baton scope the lock belongs to.
	Scope string `json:"scope"`
	// Phase is Held or Free.
	Phase LockPhase `json:"phase"`
	// Holder is the current holder, while Held.
	// +optional
	Holder *Holder `json:"holder,omitempty"`
	// Fence is the holder's fencing token: the etcd create revision of its
	// key. Force release compares it.
	// +optional
	Fence int64 `json:"fence,omitempty"`
	// Waiters is how many callers wait for the lock, in every sidecar.
	// +optional
	Waiters int32 `json:"waiters,omitempty"`
	// Limit is a semaphore's units; HeldUnits how many are held.
	// +optional
	Limit int32 `json:"limit,omitempty"`
	// +optional
	HeldUnits int32 `json:"heldUnits,omitempty"`
	// Holders are every holder, the first first, when the lock may have
	// several (a semaphore, a read/write lock held by readers).
	// +optional
	Holders []Holder `json:"holders,omitempty"`
	// LastHolder is the previous holder, once Free.
	// +optional
	LastHolder *Holder `json:"lastHolder,omitempty"`
	// ReleasedAt is when the mirror saw the lock become free.
	// +optional
	ReleasedAt *metav1.Time `json:"releasedAt,omitempty"`
	// Revision is the etcd revision this status reflects.
	// +optional
	Revision int64 `json:"revision,omitempty"`
	// Conditions: Held.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Lock mirrors one Baton lock, or one election (status.election, its name
// starting with "election-"). It has no spec: etcd decides, and the
// object only shows. Its name is derived from the key (see the mirror);
// status.key is the exact key.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=lk,categories=baton
// +kubebuilder:printcolumn:name="Key",type=string,JSONPath=`.status.key`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Holder",type=string,JSONPath=`.status.holder.owner`
// +kubebuilder:printcolumn:name="Pod",type=string,JSONPath=`.status.holder.pod`
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.status.holder.cluster`,priority=1
// +kubebuilder:printcolumn:name="Fence",type=integer,JSONPath=`.status.fence`
// +kubebuilder:printcolumn:name="Waiters",type=integer,JSONPath=`.status.waiters`
// +kubebuilder:printcolumn:name="Limit",type=integer,JSONPath=`.status.limit`,priority=1
// +kubebuilder:printcolumn:name="Units",type=integer,JSONPath=`.status.heldUnits`,priority=1
// +kubebuilder:printcolumn:name="Election",type=boolean,JSONPath=`.status.election`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Lock struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Status is the lock as the mirror last saw it in etcd.
	// +optional
	Status LockStatus `json:"status,omitempty"`
}

// LockList is a list of Locks.
//
// +kubebuilder:object:root=true
type LockList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the Locks.
	Items []Lock `json:"items"`
}
