package coordinator

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/lockstore"
)

// ErrPermissionDenied is etcd refusing this sidecar's user the keys of its
// scope: etcd's authentication is on and the user's role lacks them. It
// comes wrapped in ErrUnavailable, naming the user and the keys: the
// sidecar cannot serve until the role grants them.
var ErrPermissionDenied = lockstore.ErrPermissionDenied

// How often checkAccess asks again while etcd refuses the scope: from
// accessRetry, doubling up to accessRetryMax, so that a namespace of
// misconfigured pods does not press on etcd. accessPoll is how often it
// looks, while allowed, for an operation refused since.
const (
	accessRetry    = time.Second
	accessRetryMax = 30 * time.Second
	accessPoll     = time.Second
)

// checkAccess asks the store whether this sidecar may read and write its
// scope, at start and again whenever an operation has been refused, until
// ctx ends. While it may not (etcd refuses its user the keys, or an alarm
// refuses every write), the sidecar is not ready and its log says why.
func (c *Coordinator) checkAccess(ctx context.Context) {
	wait := accessRetry
	for ctx.Err() == nil {
		actx, cancel := c.etcdCtx(ctx)
		err := c.store.access.CheckAccess(actx, scopePrefixes(c.layout)...)
		cancel()
		switch {
		case errors.Is(err, ErrPermissionDenied):
			if c.refused.set(err) {
				c.log.Error("etcd refuses this sidecar its scope: not ready until the etcd user's role may read and write its keys",
					"scope", c.layout.Scope(), "prefix", c.layout.Base(), "err", err)
			}
			sleep(ctx, c.clock, wait)
			wait = min(2*wait, accessRetryMax)
			continue
		case errors.Is(err, ErrNoSpace), errors.Is(err, ErrCorrupt):
			// Asked every second: the alarm goes as soon as room is made.
			if c.refused.set(err) {
				c.mu.Lock()
				held := c.journal.held
				c.mu.Unlock()
				c.log.Error("etcd refuses every write for its alarm: not ready, no lock granted; the locks held go on",
					"err", err, "held", held)
			}
			sleep(ctx, c.clock, accessRetry)
			continue
		case err != nil:
			// etcd out of reach: Ready says so through the session.
			sleep(ctx, c.clock, accessRetry)
			continue
		}
		if was := c.refused.clear(); was != nil {
			switch {
			case errors.Is(was, ErrPermissionDenied):
				c.log.Info("etcd grants this sidecar its scope", "scope", c.layout.Scope(), "prefix", c.layout.Base())
			default:
				c.log.Info("etcd takes writes again: its alarm is gone", "was", was)
			}
		}
		wait = accessRetry
		for ctx.Err() == nil && c.store.access.Refused() == nil {
			sleep(ctx, c.clock, accessPoll)
		}
	}
}

// scopePrefixes are the prefixes a sidecar of l reads and writes: its
// scope's locks, run-once records and lock-delay markers.
func scopePrefixes(l keyspace.Layout) []string {
	return []string{l.Base(), l.OncePrefix(), l.DelayPrefix()}
}

// refusal is why etcd refuses the scope (checkAccess), nil while it
// allows it.
type refusal struct {
	mu  sync.Mutex
	err error
}

// set records why etcd refuses the scope and reports whether the reason
// changed.
func (r *refusal) set(err error) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	changed := r.err == nil || err.Error() != r.err.Error()
	r.err = err
	return changed
}

// clear records that etcd takes the scope's reads and writes and returns
// why it did not before, if it did not.
func (r *refusal) clear() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	was := r.err
	r.err = nil
	return was
}

// get returns why etcd refuses the scope, or nil.
func (r *refusal) get() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, clock clockwork.Clock, d time.Duration) {
	t := clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.Chan():
	}
}
