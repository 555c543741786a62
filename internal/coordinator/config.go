package coordinator

import (
	"time"

	"github.com/baton-dev/baton/internal/config"
	"github.com/baton-dev/baton/internal/keyspace"
)

// Identity says who this sidecar is; it goes into every holder record.
type Identity struct {
	Pod, Namespace, Node string
	// Cluster names the sidecar's Kubernetes cluster when several share
	// one etcd; empty when they do not.
	Cluster string
}

// Config configures a Coordinator. Zero durations are invalid: start from
// Default.
type Config struct {
	// Scope isolates tenants in etcd; by default the pod's namespace.
	Scope string
	// Space is the kind of lines served: keyspace.Locks (the default, the
	// zero Space) or keyspace.Elections, whose candidates announce a value
	// (AcquireRequest.Value, Proclaim) and take it whole, never as readers,
	// units or run-once.
	Space keyspace.Space
	// Identity of the sidecar, written into holder records.
	Identity Identity
	// DefaultTTL is a lock's time to live when the caller gives none. Default 5m.
	DefaultTTL time.Duration
	// MaxHold caps every ttl a caller asks for (acquire and extend). Default 24h.
	MaxHold time.Duration
	// MaxWait caps a plain blocking acquire's wait; a hold stream, whose
	// heartbeats keep its connection alive, may wait longer. Default 10m.
	MaxWait time.Duration
	// MaxWaiters caps the callers queued at once in this sidecar. Default 1024.
	MaxWaiters int
	// RequestTimeout bounds each etcd call; when it passes the caller gets
	// ErrUnavailable. Default 3s.
	RequestTimeout time.Duration
	// EndedRetention is how long the sidecar remembers a lock that ended
	// without its owner's release, to answer that owner ErrLost. Default 1h.
	EndedRetention time.Duration
	// WatchLinger is how long a lock's watch stays open once nothing held
	// or awaited here needs it (see WatchDelay). Default 2s: a lock taken
	// again soon finds its watch open, while every second open costs a
	// decoded event per delete in that lock.
	WatchLinger time.Duration
	// MaxLockWatches is how many locks the sidecar watches each with a
	// watch of its own; past it, it watches its whole scope with one
	// watch, and every lock again once at most half as many need
	// watching and the locks held meanwhile have ended. Each lock's watch costs the sidecar about three
	// goroutines and etcd a watcher; the scope's watch costs the sidecar
	// every delete in the scope. Default 256.
	MaxLockWatches int
	// WatchDelay is how long a lock is held before its watch opens for it.
	// Default 250ms: a lock released sooner costs the sidecar no watch
	// event, and a delete of its key by someone else (a force release)
	// meanwhile is delivered when the delay is up (the watch starts just
	// after the grant). The locks of a burst are watched in batches, each
	// up to a quarter of the delay sooner than its own delay would say.
	// Hold streams, Grant.Done and waiters open the watch at once; 0 opens
	// it at every grant.
	WatchDelay time.Duration
	// OnceRetention is how long a run-once lock's record of its last
	// finished run is kept: within it, a run that succeeded is not run
	// again. Default 168h (a week).
	OnceRetention time.Duration
	// LockDelay is the lock delay of a lock held whole whose caller asks
	// for none (AcquireRequest.LockDelay). Default 0: none.
	LockDelay time.Duration
	// MaxLockDelay caps the lock delay a caller may ask for. Default 1m.
	MaxLockDelay time.Duration
}

// maxOnceRetention bounds OnceRetention: ten years, well within etcd's
// longest lease.
const maxOnceRetention = 10 * 365 * 24 * time.Hour

// Default returns the documented defaults.
func Default() Config {
	return Config{
		Scope:          "default",
		DefaultTTL:     5 * time.Minute,
		MaxHold:        24 * time.Hour,
		MaxWait:        10 * time.Minute,
		MaxWaiters:     1024,
		RequestTimeout: 3 * time.Second,
		EndedRetention: time.Hour,
		WatchLinger:    2 * time.Second,
		MaxLockWatches: 256,
		WatchDelay:     250 * time.Millisecond,
		OnceRetention:  7 * 24 * time.Hour,
		MaxLockDelay:   time.Minute,
	}
}

// Validate checks every field and their relations.
func (c Config) Validate() error {
	if err := keyspace.ValidateScope(c.Scope); err != nil {
		return config.Invalid("coordinator.Scope", "scope: %w", err)
	}
	if c.Space != keyspace.Locks && c.Space != keyspace.Elections {
		return config.Invalid("coordinator.Space", "space %d: must be keyspace.Locks or keyspace.Elections", c.Space)
	}
	if !dnsLabel(c.Identity.Cluster) && c.Identity.Cluster != "" {
		return config.Invalid("coordinator.Identity.Cluster",
			"cluster name %q: must be a DNS label (at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit), or empty", c.Identity.Cluster)
	}
	switch {
	case c.DefaultTTL <= 0:
		return config.Invalid("coordinator.DefaultTTL", "default TTL %v: must be positive", c.DefaultTTL)
	case c.MaxHold < c.DefaultTTL:
		return config.Invalid("coordinator.MaxHold", "max hold %v: must be at least the default TTL %v", c.MaxHold, c.DefaultTTL)
	case c.MaxWait < 0:
		return config.Invalid("coordinator.MaxWait", "max wait %v: must not be negative", c.MaxWait)
	case c.MaxWaiters < 1:
		return config.Invalid("coordinator.MaxWaiters", "max waiters %d: must be at least 1", c.MaxWaiters)
	case c.RequestTimeout <= 0:
		return config.Invalid("coordinator.RequestTimeout", "request timeout %v: must be positive", c.RequestTimeout)
	case c.EndedRetention <= 0:
		return config.Invalid("coordinator.EndedRetention", "ended retention %v: must be positive", c.EndedRetention)
	case c.MaxLockWatches < 1:
		return config.Invalid("coordinator.MaxLockWatches", "max lock watches %d: must be at least 1", c.MaxLockWatches)
	case c.WatchLinger < 10*time.Millisecond:
		return config.Invalid("coordinator.WatchLinger", "watch linger %v: must be at least 10ms", c.WatchLinger)
	case c.WatchDelay < 0:
		return config.Invalid("coordinator.WatchDelay", "watch delay %v: must not be negative; 0 watches every lock from its grant", c.WatchDelay)
	case c.WatchDelay > time.Minute:
		return config.Invalid("coordinator.WatchDelay", "watch delay %v: must be at most 1m, or a lost lock goes unreported that long", c.WatchDelay)
	case c.OnceRetention < time.Minute:
		return config.Invalid("coordinator.OnceRetention", "once retention %v: must be at least 1m", c.OnceRetention)
	case c.MaxLockDelay < 0 || c.MaxLockDelay > time.Hour:
		return config.Invalid("coordinator.MaxLockDelay", "max lock delay %v: must be 0 to 1h", c.MaxLockDelay)
	case c.LockDelay < 0 || c.LockDelay > c.MaxLockDelay:
		return config.Invalid("coordinator.LockDelay", "lock delay %v: must be 0 to the max lock delay %v", c.LockDelay, c.MaxLockDelay)
	case c.OnceRetention > maxOnceRetention:
		return config.Invalid("coordinator.OnceRetention", "once retention %v: must be at most %v", c.OnceRetention, maxOnceRetention)
	}
	return nil
}

// dnsLabel reports whether s is a DNS label (RFC 1123), as Kubernetes
// names a namespace.
func dnsLabel(s string) bool {
	if s == "" || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for _, r := range s {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '-' {
			return false
		}
	}
	return true
}
