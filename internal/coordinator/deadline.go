package coordinator

import (
	"container/heap"
	"time"

	"github.com/jonboulle/clockwork"
)

// deadlines ends held locks at their deadline with one timer for all of
// them: a runtime timer per lock costs about 180 bytes, 18 MB for a sidecar
// holding 100k locks. Guarded by Coordinator.mu.
type deadlines struct {
	queue deadlineQueue
	timer clockwork.Timer // fires at the earliest deadline, or later
	at    time.Time       // when timer fires; zero when stopped
}

// deadlineQueue is a min-heap of held locks by due time.
type deadlineQueue []*held

func (q deadlineQueue) Len() int           { return len(q) }
func (q deadlineQueue) Less(i, j int) bool { return q[i].due.Before(q[j].due) }
func (q deadlineQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].slot, q[j].slot = i, j
}
func (q *deadlineQueue) Push(x any) {
	h := x.(*held)
	h.slot = len(*q)
	*q = append(*q, h)
}
func (q *deadlineQueue) Pop() any {
	old := *q
	h := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	h.slot = -1
	return h
}

// holds reports whether h is in the queue (its slot may be stale or the
// zero value of a new held).
func (q deadlineQueue) holds(h *held) bool {
	return h.slot >= 0 && h.slot < len(q) && q[h.slot] == h
}

// armLocked makes h's deadline fire in d (again, if it was set).
func (c *Coordinator) armLocked(e *entry, h *held, d time.Duration) {
	h.entry, h.due = e, c.clock.Now().Add(d)
	q := &c.deadlines.queue
	if q.holds(h) {
		heap.Fix(q, h.slot)
	} else {
		heap.Push(q, h)
	}
	c.scheduleLocked()
}

// disarmLocked cancels h's deadline.
func (c *Coordinator) disarmLocked(h *held) {
	q := &c.deadlines.queue
	if q.holds(h) {
		heap.Remove(q, h.slot)
	}
	h.slot = -1
}

// scheduleLocked sets the timer for the earliest deadline when it would
// fire later than that.
func (c *Coordinator) scheduleLocked() {
	d := &c.deadlines
	if d.queue.Len() == 0 {
		return // a timer that finds nothing due does nothing
	}
	due := d.queue[0].due
	if !d.at.IsZero() && !d.at.After(due) {
		return
	}
	d.at = due
	wait := c.clock.Until(due)
	if d.timer == nil {
		d.timer = c.clock.AfterFunc(wait, c.fireDeadlines)
		return
	}
	d.timer.Reset(wait)
}

// fireDeadlines expires every lock whose deadline has passed and sets the
// timer for the next.
func (c *Coordinator) fireDeadlines() {
	c.mu.Lock()
	d := &c.deadlines
	d.at = time.Time{}
	now := c.clock.Now()
	var due []*held
	for d.queue.Len() > 0 && !d.queue[0].due.After(now) {
		due = append(due, heap.Pop(&d.queue).(*held))
	}
	c.scheduleLocked()
	c.mu.Unlock()
	for _, h := range due {
		go c.expire(h.entry, h)
	}
}
