package keyspace

import (
	"encoding/json"
	"fmt"
	"time"
)

// DelayMark is a lock-delay marker (Chubby's lock-delay, Consul's
// LockDelay): the holder granted with a lock delay writes it; a clean
// release deletes it; a holder lost otherwise (its lease expired, its ttl
// ran out, it was forced free) leaves it, and nobody is granted the lock
// until Delay has passed since LostAt, a safety margin for a paused
// holder still writing. LostAt is set by whoever first finds the holder
// gone.
type DelayMark struct {
	Fence  int64         `json:"fence"`
	Delay  time.Duration `json:"delay"`
	Owner  string        `json:"owner"`
	Pod    string        `json:"pod,omitempty"`
	LostAt time.Time     `json:"lost_at,omitzero"`
}

// Encode returns the JSON stored in etcd.
func (d DelayMark) Encode() string {
	b, _ := json.Marshal(d) // cannot fail: only strings, numbers and times
	return string(b)
}

// DecodeDelayMark reads a lock-delay marker.
func DecodeDelayMark(v []byte) (DelayMark, error) {
	var d DelayMark
	if err := json.Unmarshal(v, &d); err != nil {
		return DelayMark{}, fmt.Errorf("lock-delay marker: %w", err)
	}
	return d, nil
}
