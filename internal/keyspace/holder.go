package keyspace

import (
	"encoding/json"
	"time"
	"unicode/utf8"
)

// Holder is the record stored as the value of a contender key. Other
// sidecars read it to tell a refused caller who holds the lock, and the
// mirror copies it into the Lock resource. A contender written by another
// client (etcdctl lock, etcdctl elect) has a value of its own, decoded as a
// Holder with only Foreign and Value set.
type Holder struct {
	// Owner is the caller's execution id.
	Owner string `json:"owner"`
	// Pod, Namespace and Node identify the sidecar that wrote the key;
	// Cluster names its Kubernetes cluster, when clusters share one etcd.
	Pod       string `json:"pod,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Node      string `json:"node,omitempty"`
	Cluster   string `json:"cluster,omitempty"`
	// AcquiredAt is when the lock was granted (for a waiter: when it queued).
	AcquiredAt time.Time `json:"acquired_at"`
	// ExpiresAt is the lock's deadline: the holding sidecar deletes the key
	// then if it was not released before.
	ExpiresAt time.Time `json:"expires_at"`
	// Queued is how many more callers of the same sidecar wait for the lock
	// behind this contender: a sidecar has one contender key per lock,
	// however many of its callers want it.
	Queued int `json:"queued,omitempty"`
	// Claim is what the contender asks of the lock: exclusive (no field
	// written, as for a mutex), a reader, or units of a semaphore.
	Claim
	// Hold marks a contender of a hold stream (or baton run): a restarted
	// sidecar does not keep its lock, since its connection died.
	Hold bool `json:"hold,omitempty"`
	// Value is what a candidate of an election announces as leader (an
	// address, a name), at most MaxValue bytes; for a contender written by
	// another client, the whole value of its key (what `etcdctl elect`
	// campaigns with).
	Value string `json:"value,omitempty"`

	// Foreign is true for a contender whose value is not a Baton record,
	// such as one written by `etcdctl lock`.
	Foreign bool `json:"-"`
}

// Encode returns the JSON stored in etcd.
func (h Holder) Encode() string {
	b, _ := json.Marshal(h) // cannot fail: only strings and times
	return string(b)
}

// DecodeHolder reads a contender value. It never fails: a value that is not
// a Baton record gives a Holder with Foreign set.
func DecodeHolder(v []byte) Holder {
	var h Holder
	if len(v) == 0 || json.Unmarshal(v, &h) != nil || h.Owner == "" {
		return Holder{Foreign: true, Value: cut(v, MaxValue)}
	}
	return h
}

// cut returns v as a string of at most n bytes, cut at a character's
// start when it is UTF-8.
func cut(v []byte, n int) string {
	if len(v) <= n {
		return string(v)
	}
	for n > 0 && !utf8.RuneStart(v[n]) {
		n--
	}
	return string(v[:n])
}

// MaxValue bounds the value a candidate of an election announces.
const MaxValue = 4096

// LeaderName is how an election's leader is named to those who ask who
// leads: the value it announced, else its pod, else its owner.
func (h Holder) LeaderName() string {
	switch {
	case h.Value != "":
		return h.Value
	case h.Pod != "":
		return h.Pod
	}
	return h.Owner
}

// Callers is how many callers the contender stands for: its own and those
// its sidecar queues behind it. The callers waiting for a lock are the sum
// over its contenders less one, the holder.
func (h Holder) Callers() int { return 1 + max(h.Queued, 0) }
