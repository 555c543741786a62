package coordinator

import (
	"context"
	"errors"
	"time"

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
// ctx ends. While it may not, the sidecar is not ready and its log says
// why, naming the user and the keys.
func (c *Coordinator) checkAccess(ctx context.Context) {
	wait := accessRetry
	for ctx.Err() == nil {
		actx, cancel := c.etcdCtx(ctx)
		err := c.store.CheckAccess(actx, c.scopePrefixes()...)
		cancel()
		switch {
		case errors.Is(err, ErrPermissionDenied):
			if c.setDenied(err) {
				c.log.Error("etcd refuses this sidecar its scope: not ready until the etcd user's role may read and write its keys",
					"scope", c.layout.Scope(), "prefix", c.layout.Base(), "err", err)
			}
			sleep(ctx, wait)
			wait = min(2*wait, accessRetryMax)
			continue
		case err != nil:
			// etcd out of reach: Ready says so through the session.
			sleep(ctx, accessRetry)
			continue
		}
		if c.setDenied(nil) {
			c.log.Info("etcd grants this sidecar its scope", "scope", c.layout.Scope(), "prefix", c.layout.Base())
		}
		wait = accessRetry
		for ctx.Err() == nil && c.store.Denied() == nil {
			sleep(ctx, accessPoll)
		}
	}
}

// scopePrefixes are the prefixes the sidecar reads and writes: its
// scope's locks, run-once records and lock-delay markers.
func (c *Coordinator) scopePrefixes() []string {
	return []string{c.layout.Base(), c.layout.OncePrefix(), c.layout.DelayPrefix()}
}

// setDenied records the store's permission on the scope (nil: allowed)
// and reports whether it changed.
func (c *Coordinator) setDenied(err error) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	changed := (c.denied == nil) != (err == nil) || (err != nil && err.Error() != c.denied.Error())
	c.denied = err
	return changed
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
