package coordinator

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"github.com/baton-dev/baton/internal/keyspace"
)

// A lock's turn is this sidecar's one contender slot for it: whoever has
// the turn owns the sidecar's contender key of the lock, and the other
// local callers queue for the turn in FIFO order. etcd's concurrency.Mutex
// is re-entrant per session, so without the turn two local callers could
// "hold" one lock.

// lineLocked returns the line of owner's claim cl of k with one more
// reference (unrefLocked drops it): the key's entry, shared by the local
// owners of claims that hold only alone (cl.IsExclusive: its admission's
// Alone), or the owner's slot for a shared claim (admission, here.go).
func (c *Coordinator) lineLocked(k keyspace.Key, owner string, cl keyspace.Claim) *entry {
	name := k.String()
	if !cl.IsExclusive() {
		name = slotName(k, owner)
	}
	e := c.locks[name]
	if e == nil {
		e = &entry{co: c, key: k}
		if !cl.IsExclusive() {
			var tag [4]byte
			_, _ = rand.Read(tag[:]) // never fails on Linux
			e.slot = &slot{name: name, claim: cl, tag: binary.BigEndian.Uint32(tag[:])}
		}
		c.locks[name] = e
		c.load.Add(1)
	}
	e.refs++
	return e
}

func (e *entry) unrefLocked() {
	e.refs--
	e.dropIfIdleLocked()
}

// dropIfIdleLocked forgets an entry nobody uses.
func (e *entry) dropIfIdleLocked() {
	c := e.co
	if e.refs == 0 && !e.busy && e.held == nil && len(e.queue) == 0 && c.locks[nameOf(e)] == e {
		delete(c.locks, nameOf(e))
		c.load.Add(-1)
	}
}

func (e *entry) unref() {
	c := e.co
	c.mu.Lock()
	e.unrefLocked()
	c.unlock()
}

// takeTurn takes the turn if it is free. Guarded by Coordinator.mu.
func (e *entry) takeTurn() bool {
	if e.busy {
		return false
	}
	e.busy = true
	return true
}

// queued is a caller in line for a lock's turn: ch is closed when the
// turn is its. A waiter (a blocking acquire, not a try waiting out a
// release) says who it is, for Status.
type queued struct {
	ch    chan struct{}
	owner string // "" for a try
	since time.Time
	pid   int32 // AcquireRequest.Caller
}

// waiterOf is req's caller as it queues.
func waiterOf(req AcquireRequest) queued { return queued{owner: req.Owner, pid: req.Caller} }

// lineUpLocked takes the turn if it is free (nil), or queues who for it in
// FIFO order and returns what awaitTurn waits on. A waiter is counted in
// the lock's record while it queues.
func (e *entry) lineUpLocked(who queued) chan struct{} {
	if e.takeTurn() {
		return nil
	}
	if who.owner != "" {
		e.queueChangedLocked(1)
		who.since = e.co.now()
	}
	who.ch = make(chan struct{})
	e.queue = append(e.queue, who)
	return who.ch
}

// awaitTurn waits, without Coordinator.mu, for the turn that lineUpLocked queued for
// as ch (nil: the turn was had at once). When ctx ends or the coordinator
// shuts down first, it leaves the queue, passing the turn on if it was
// handed over meanwhile.
func (e *entry) awaitTurn(ctx context.Context, ch chan struct{}, waiter bool) error {
	c := e.co
	if ch == nil {
		return nil
	}
	var err error
	select {
	case <-ch:
	case <-ctx.Done():
		err = ctx.Err()
	case <-c.stop.Done():
		err = fmt.Errorf("%w: shutting down", ErrUnavailable)
	}
	if err == nil && !waiter {
		return nil
	}
	c.mu.Lock()
	defer c.unlock()
	if waiter {
		e.queueChangedLocked(-1)
	}
	if err == nil {
		return nil
	}
	for i, q := range e.queue {
		if q.ch == ch {
			e.queue = slices.Delete(e.queue, i, i+1)
			return err
		}
	}
	// The turn was handed to us while we gave up: pass it on.
	e.passTurnLocked()
	return err
}

// passTurnLocked gives the turn to the next queued caller, or frees it.
func (e *entry) passTurnLocked() {
	e.retiring = false
	e.rec = nil // the key is gone, or goes with its session
	e.placing.Store(nil)
	if len(e.queue) == 0 {
		e.busy = false
		e.dropIfIdleLocked()
		return
	}
	next := e.queue[0]
	e.queue[0] = queued{}
	e.queue = e.queue[1:]
	close(next.ch)
}

// leaveTurn passes the turn on.
func (e *entry) leaveTurn() {
	c := e.co
	c.mu.Lock()
	e.passTurnLocked()
	c.unlock()
}
