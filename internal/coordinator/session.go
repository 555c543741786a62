package coordinator

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/baton-dev/baton/internal/lockstore"
)

// sessionWatch hands out the current session and makes sure that the end
// of every session handed out is watched: when one ends, every lock it
// carried is lost (ended).
type sessionWatch struct {
	sessions lockstore.Sessions
	timeout  time.Duration // Config.RequestTimeout: bounds a wait for a session
	stop     <-chan struct{}
	ended    func(lockstore.Session) // loses the locks of a session that ended
	began    func(lockstore.Session) // told of each session before any key of it is written

	mu       sync.Mutex
	watching map[lockstore.Session]bool // sessions whose end is watched
	watched  atomic.Value               // the watchedSession last made sure of, read without mu
}

// current returns the current session, waiting for one a bounded time
// (the sidecar is starting or etcd was away), and makes sure its end is
// watched.
func (w *sessionWatch) current(ctx context.Context) (lockstore.Session, error) {
	s, err := w.sessions.Current() // as nearly always: no timer to wait with
	if err != nil {
		wctx, cancel := context.WithTimeout(ctx, w.timeout)
		s, err = w.sessions.Wait(wctx)
		cancel()
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if last, _ := w.watched.Load().(watchedSession); last.s == s {
		return s, nil // as nearly always: the session of the last call
	}
	w.watch(s)
	return s, nil
}

// watchedSession is the session whose end was last made sure to be
// watched (sessionWatch.watched).
type watchedSession struct{ s lockstore.Session }

// watch makes sure the end of s is watched.
func (w *sessionWatch) watch(s lockstore.Session) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.watching[s] {
		w.watching[s] = true
		w.began(s)
		go w.await(s)
	}
	w.watched.Store(watchedSession{s})
}

// await waits for the end of s, then has its locks lost.
func (w *sessionWatch) await(s lockstore.Session) {
	select {
	case <-s.Done():
	case <-w.stop:
		return
	}
	w.mu.Lock()
	delete(w.watching, s)
	w.mu.Unlock()
	w.ended(s)
}

// sessionEnded marks every lock of s lost: s has ended.
func (c *Coordinator) sessionEnded(s lockstore.Session) {
	c.mu.Lock()
	defer c.unlock()
	for _, e := range c.locks {
		if h := e.held; h != nil && h.sess == s {
			h.loseLocked(LeaseLost)
			// The key went with the lease; the next local caller contends
			// under a new session with a new key, so the turn can pass.
			e.passTurnLocked()
		}
	}
}
