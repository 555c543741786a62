package coordinator

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/baton-dev/baton/internal/keyspace"
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

// LeaderlessObserver is what an Observer also implements to hear how long
// an election had no leader before a candidate of this sidecar was elected:
// from when the last candidate ahead of it went (its key deleted in etcd,
// or the turn passed on in this sidecar: the previous leadership's end,
// unless a standby ahead gave up after it) to its grant, a lock delay
// included. A candidate elected at once tells nothing: when the previous
// leadership ended is not known.
type LeaderlessObserver interface {
	Leaderless(name string, d time.Duration)
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
	he, refused := errors.AsType[*HeldError](err) // not As: its target would escape, an allocation per refusal
	switch {
	case err == nil:
	case refused:
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

// leaderless tells the observer, if it listens, how long key had no
// holder before a waiter of this sidecar got it.
func (o observed) leaderless(key keyspace.Key, d time.Duration) {
	if l, ok := o.Observer.(LeaderlessObserver); ok {
		l.Leaderless(key.String(), d)
	}
}

// lockEvent is a grant or an end told to the observer once the engine's
// mutex is let go (Coordinator.unlock): no callback runs under it.
type lockEvent struct {
	key     string
	claim   keyspace.Claim
	ended   bool          // an end; else a grant
	reason  string        // the end's: "" for the owner's release
	heldFor time.Duration // the end's
}

// lockEvents are the events queued for the observer. Guarded by
// Coordinator.mu.
type lockEvents []lockEvent

// add queues ev.
func (q *lockEvents) add(ev lockEvent) { *q = append(*q, ev) }

// unlock lets go of Coordinator.mu, then tells the observer what was
// queued for it meanwhile.
func (c *Coordinator) unlock() {
	if len(c.events) == 0 {
		c.mu.Unlock()
		return
	}
	var buf [4]lockEvent
	evs := append(buf[:0], c.events...)
	clear(c.events)
	c.events = c.events[:0]
	if cap(c.events) > 64 {
		c.events = nil // after a Shutdown that ended many locks
	}
	c.mu.Unlock()
	for _, ev := range evs {
		c.obs.tell(ev)
	}
}

// tell reports ev to the observer.
func (o observed) tell(ev lockEvent) {
	units := ev.claim.Units()
	if ev.ended {
		o.Ended(ev.key, ev.reason, ev.heldFor)
		units = -units
	} else {
		o.Granted(ev.key)
	}
	if ev.claim.Limit > 0 {
		o.Units(ev.key, ev.claim.Limit, true, units)
	}
}
