package coordinator

import (
	"context"
	"errors"
	"log/slog"
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

// How often scopeAccess.check asks again while etcd refuses the scope: from
// accessRetry, doubling up to accessRetryMax, so that a namespace of
// misconfigured pods does not press on etcd. accessPoll is how often it
// looks, while allowed, for an operation refused since.
const (
	accessRetry    = time.Second
	accessRetryMax = 30 * time.Second
	accessPoll     = time.Second
)

// scopeAccess knows whether etcd lets this sidecar read and write its
// scope, and why not when it does not.
type scopeAccess struct {
	store   lockstore.Access
	layout  keyspace.Layout
	timeout time.Duration // Config.RequestTimeout: bounds each check
	clock   clockwork.Clock
	log     *slog.Logger
	held    func() int // the locks held here, for the log

	mu  sync.Mutex
	err error // why etcd refuses the scope; nil while it allows it
}

// check asks the store whether this sidecar may read and write its
// scope, at start and again whenever an operation has been refused, until
// ctx ends. While it may not (etcd refuses its user the keys, or an alarm
// refuses every write), the sidecar is not ready and its log says why.
func (a *scopeAccess) check(ctx context.Context) {
	wait := accessRetry
	for ctx.Err() == nil {
		actx, cancel := context.WithTimeout(ctx, a.timeout)
		err := a.store.CheckAccess(actx, scopePrefixes(a.layout)...)
		cancel()
		switch {
		case errors.Is(err, ErrPermissionDenied):
			if a.set(err) {
				a.log.Error("etcd refuses this sidecar its scope: not ready until the etcd user's role may read and write its keys",
					"scope", a.layout.Scope(), "prefix", a.layout.Base(), "err", err)
			}
			sleep(ctx, a.clock, wait)
			wait = min(2*wait, accessRetryMax)
			continue
		case errors.Is(err, ErrNoSpace), errors.Is(err, ErrCorrupt):
			// Asked every second: the alarm goes as soon as room is made.
			if a.set(err) {
				a.log.Error("etcd refuses every write for its alarm: not ready, no lock granted; the locks held go on",
					"err", err, "held", a.held())
			}
			sleep(ctx, a.clock, accessRetry)
			continue
		case err != nil:
			// etcd out of reach: Ready says so through the session.
			sleep(ctx, a.clock, accessRetry)
			continue
		}
		if was := a.clear(); was != nil {
			switch {
			case errors.Is(was, ErrPermissionDenied):
				a.log.Info("etcd grants this sidecar its scope", "scope", a.layout.Scope(), "prefix", a.layout.Base())
			default:
				a.log.Info("etcd takes writes again: its alarm is gone", "was", was)
			}
		}
		wait = accessRetry
		for ctx.Err() == nil && a.store.Refused() == nil {
			sleep(ctx, a.clock, accessPoll)
		}
	}
}

// scopePrefixes are the prefixes a sidecar of l reads and writes: its
// scope's locks, run-once records and lock-delay markers.
func scopePrefixes(l keyspace.Layout) []string {
	return []string{l.Base(), l.OncePrefix(), l.DelayPrefix()}
}

// set records why etcd refuses the scope and reports whether the reason
// changed.
func (a *scopeAccess) set(err error) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	changed := a.err == nil || err.Error() != a.err.Error()
	a.err = err
	return changed
}

// clear records that etcd takes the scope's reads and writes and returns
// why it did not before, if it did not.
func (a *scopeAccess) clear() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	was := a.err
	a.err = nil
	return was
}

// get returns why etcd refuses the scope, or nil.
func (a *scopeAccess) get() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
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
