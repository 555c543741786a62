package server

import (
	"context"
	"sync"
)

// drain counts the granted hold streams still open and says when a
// sidecar that shuts down has asked them to end. A stream is counted
// before its caller hears the grant, and none is once draining began: a
// grant in flight then is let go before anyone hears of it.
type drain struct {
	mu      sync.Mutex
	open    int           // hold streams keeping a lock
	idle    chan struct{} // closed when open drops to 0 once draining; nil until asked
	started chan struct{} // closed by Drain
}

func newDrain() *drain { return &drain{started: make(chan struct{})} }

// admit counts a hold stream about to tell its caller of a grant, and
// returns the channel closed when the sidecar drains; false when it drains
// already: the grant must not be told.
func (d *drain) admit() (<-chan struct{}, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	select {
	case <-d.started:
		return nil, false
	default:
	}
	d.open++
	return d.started, true
}

// leave uncounts a stream that ended.
func (d *drain) leave() {
	d.mu.Lock()
	d.open--
	if d.open == 0 && d.idle != nil {
		close(d.idle)
		d.idle = nil
	}
	d.mu.Unlock()
}

// wait starts draining and returns once no stream is open or ctx ends,
// reporting whether every stream ended.
func (d *drain) wait(ctx context.Context) bool {
	d.mu.Lock()
	select {
	case <-d.started:
	default:
		close(d.started)
	}
	if d.open == 0 {
		d.mu.Unlock()
		return true
	}
	if d.idle == nil {
		d.idle = make(chan struct{})
	}
	idle := d.idle
	d.mu.Unlock()
	select {
	case <-idle:
		return true
	case <-ctx.Done():
		return false
	}
}

// Drain tells every open hold stream that its lock ends (lost, reason
// shutdown) and waits until their callers have hung up, or until ctx ends:
// what a hold's caller started (baton run's command) is stopped before the
// sidecar lets the locks go. A sidecar drains before it shuts down, after
// its coordinator stopped granting (coordinator.Drain).
func (s *Server) Drain(ctx context.Context) {
	if !s.drain.wait(ctx) {
		s.log.Warn("shutting down with hold streams still open: their callers did not hang up within the shutdown grace")
	}
}
