package keyspace

import (
	"encoding/json"
	"fmt"
	"time"
)

// Run is the record of a run-once lock's last finished run, stored at
// Layout.Once: whoever takes the lock to run it reads it first, and does
// not run what already succeeded.
type Run struct {
	// Status is RunSucceeded or RunFailed.
	Status string `json:"status"`
	// Owner is the execution that ran it; Pod, Namespace, Node and
	// Cluster its sidecar's.
	Owner     string `json:"owner"`
	Pod       string `json:"pod,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Node      string `json:"node,omitempty"`
	Cluster   string `json:"cluster,omitempty"`
	// Fence is the run's grant of the lock.
	Fence      int64     `json:"fence"`
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
	// Result is what the run reported, at most MaxResult bytes.
	Result string `json:"result,omitempty"`
	// ExpiresAt ends the record's retention: past it, the record is as
	// good as gone (etcd deletes it with its lease then).
	ExpiresAt time.Time `json:"expires_at"`
}

// Statuses of a Run.
const (
	RunSucceeded = "succeeded"
	RunFailed    = "failed"
)

// MaxResult bounds a run's recorded result.
const MaxResult = 4096

// Encode returns the JSON stored in etcd.
func (r Run) Encode() string {
	b, _ := json.Marshal(r) // cannot fail: only strings, numbers and times
	return string(b)
}

// DecodeRun reads a run-once record.
func DecodeRun(v []byte) (Run, error) {
	var r Run
	if err := json.Unmarshal(v, &r); err != nil {
		return Run{}, fmt.Errorf("run-once record: %w", err)
	}
	if r.Status != RunSucceeded && r.Status != RunFailed {
		return Run{}, fmt.Errorf("run-once record: status %q", r.Status)
	}
	return r, nil
}
