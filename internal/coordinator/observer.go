package coordinator

import (
	"context"
	"errors"
	"log/slog"
	"time"
)

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
func WithObserver(o Observer) Option { return func(c *Coordinator) { c.obs.Observer = o } }

type nopObserver struct{}

func (nopObserver) Acquired(string, string, bool, time.Duration) {}
func (nopObserver) Waiting(string, int)                          {}
func (nopObserver) Granted(string)                               {}
func (nopObserver) Ended(string, string, time.Duration)          {}
func (nopObserver) Units(string, int, bool, int)                 {}

// observed is the Observer with the log, for what both are told.
type observed struct {
	Observer
	log *slog.Logger
}

// acquired reports the end of an acquire, which took took, to the
// observer and, for a refusal, to the log.
func (o observed) acquired(req AcquireRequest, took time.Duration, err error) {
	result := "granted"
	var he *HeldError
	switch {
	case err == nil:
	case errors.As(err, &he):
		result = "refused"
		if he.Waited {
			result = "wait_timeout"
		}
		// LogAttrs: a refusal is the hot path of a burst of duplicates,
		// and attributes cost nothing when the level is off.
		o.log.LogAttrs(context.Background(), slog.LevelInfo, "lock refused", slog.String("lock", req.Key.String()), slog.String("owner", req.Owner),
			slog.String("holder", he.Holder.Owner), slog.Int64("fence", he.Fence), slog.Bool("waited", he.Waited))
	default:
		result = "error"
	}
	o.Acquired(req.Key.String(), result, req.Wait > 0, took)
}
