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
	clock clockwork.Clock
	fire  func() // Coordinator.fireDeadlines
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
	q[i].slot, q[j].slot = int32(i), int32(j)
}
func (q *deadlineQueue) Push(x any) {
	h := x.(*held)
	h.slot = int32(len(*q))
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
	return h.slot >= 0 && int(h.slot) < len(q) && q[h.slot] == h
}

// arm makes h's deadline fire in d (again, if it was set).
func (d *deadlines) arm(h *held, in time.Duration) {
	h.due = d.clock.Now().Add(in)
	q := &d.queue
	if q.holds(h) {
		heap.Fix(q, int(h.slot))
	} else {
		heap.Push(q, h)
	}
	d.schedule()
}

// disarm cancels h's deadline.
func (d *deadlines) disarm(h *held) {
	q := &d.queue
	if q.holds(h) {
		heap.Remove(q, int(h.slot))
	}
	h.slot = -1
}

// clear cancels every deadline at once, as the sidecar shuts down.
func (d *deadlines) clear() {
	for _, h := range d.queue {
		h.slot = -1
	}
	d.queue = nil
	if d.timer != nil {
		d.timer.Stop()
	}
	d.at = time.Time{}
}

// schedule sets the timer for the earliest deadline when it would fire
// later than that.
func (d *deadlines) schedule() {
	if d.queue.Len() == 0 {
		return // a timer that finds nothing due does nothing
	}
	due := d.queue[0].due
	if !d.at.IsZero() && !d.at.After(due) {
		return
	}
	d.at = due
	wait := d.clock.Until(due)
	if d.timer == nil {
		d.timer = d.clock.AfterFunc(wait, d.fire)
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
	d.schedule()
	c.unlock()
	for _, h := range due {
		go h.expire()
	}
}
