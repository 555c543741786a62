package coordinator

import "sync"

// Position is a waiter's place in line as its caller hears it: the number
// of contenders ahead of it, the latest learned, and a signal each time it
// changes. The coordinator sets it without blocking and never runs the
// caller's code (no callback runs under the coordinator's lock); the
// caller reads it when Changed signals.
type Position struct {
	mu      sync.Mutex
	ahead   int
	changed chan struct{}
}

// NewPosition returns a Position that knows no place yet.
func NewPosition() *Position {
	return &Position{ahead: -1, changed: make(chan struct{}, 1)}
}

// Changed signals that Ahead changed since the signal was last taken; one
// signal stands for any number of changes.
func (p *Position) Changed() <-chan struct{} { return p.changed }

// Ahead is the number of contenders ahead of the waiter, the latest
// learned; -1 before the first.
func (p *Position) Ahead() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ahead
}

// set records n contenders ahead and signals the change.
func (p *Position) set(n int) {
	p.mu.Lock()
	same := p.ahead == n
	p.ahead = n
	p.mu.Unlock()
	if same {
		return
	}
	select {
	case p.changed <- struct{}{}:
	default: // a signal is pending: the reader reads the latest
	}
}
