package coordinator

import (
	"context"
	"fmt"

	"github.com/baton-dev/baton/internal/lockstore"
)

// session returns the current session, waiting for one a bounded time
// (the sidecar is starting or etcd was away), and makes sure its end is
// watched.
func (c *Coordinator) session(ctx context.Context) (lockstore.Session, error) {
	s, err := c.sessions.Current() // as nearly always: no timer to wait with
	if err != nil {
		wctx, cancel := c.etcdCtx(ctx)
		s, err = c.sessions.Wait(wctx)
		cancel()
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if w, _ := c.watched.Load().(watchedSession); w.s == s {
		return s, nil // as nearly always: the session of the last call
	}
	c.mu.Lock()
	c.watchLocked(s)
	c.mu.Unlock()
	return s, nil
}

// watchedSession is the session whose end was last made sure to be
// watched (Coordinator.watched).
type watchedSession struct{ s lockstore.Session }

// watchLocked makes sure the end of s is watched.
func (c *Coordinator) watchLocked(s lockstore.Session) {
	if !c.watching[s] {
		c.watching[s] = true
		go c.watchSession(s)
	}
	c.watched.Store(watchedSession{s})
}

// watchSession marks every lock of s lost when s ends.
func (c *Coordinator) watchSession(s lockstore.Session) {
	select {
	case <-s.Done():
	case <-c.stop.Done():
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.watching, s)
	for _, e := range c.locks {
		if h := e.held; h != nil && h.sess == s {
			h.loseLocked(LeaseLost)
			// The key went with the lease; the next local caller contends
			// under a new session with a new key, so the turn can pass.
			e.passTurnLocked()
		}
	}
}
