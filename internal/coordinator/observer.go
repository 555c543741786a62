package coordinator

import "time"

// Observer hears what happens to locks, for metrics. Keys are lock keys as
// the user wrote them.
type Observer interface {
	// Acquired: an acquire ended with result granted, refused,
	// wait_timeout or error; waited says it was a blocking one.
	Acquired(key, result string, waited bool, wait time.Duration)
	// Waiting: delta callers started (+1) or stopped (-1) waiting.
	Waiting(key string, delta int)
	// Granted: a lock is now held.
	Granted(key string)
	// Ended: a held lock ended; reason is "" for its owner's release.
	Ended(key, reason string, heldFor time.Duration)
	// Units: the units of a semaphore of limit held (held) or waited for
	// (!held) by this sidecar's callers moved by delta.
	Units(key string, limit int, held bool, delta int)
}

// Option configures a Coordinator.
type Option func(*Coordinator)

// WithObserver makes o hear what happens to locks.
func WithObserver(o Observer) Option { return func(c *Coordinator) { c.obs = o } }

type nopObserver struct{}

func (nopObserver) Acquired(string, string, bool, time.Duration) {}
func (nopObserver) Waiting(string, int)                          {}
func (nopObserver) Granted(string)                               {}
func (nopObserver) Ended(string, string, time.Duration)          {}
func (nopObserver) Units(string, int, bool, int)                 {}
