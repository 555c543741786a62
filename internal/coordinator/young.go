package coordinator

import (
	"time"

	"github.com/jonboulle/clockwork"
)

// young holds the locks granted less than Config.WatchDelay ago that
// nothing has asked to watch yet, in grant order, with one timer for all of
// them. Most locks in a burst of short work are released within a few
// milliseconds: they never open their lock's watch, which would send the
// sidecar an event for each of their releases. A lock still held when its
// delay is up is watched from then on (held.watchHeldLocked), and the watch,
// once established, reads again every held key older than itself, so a
// loss during the delay is reported then. The timer takes the locks in
// batches: when it fires, the locks whose delay ends within youngSlack of
// then are watched too, so that it fires about once per youngSlack however
// many locks are granted meanwhile, rather than once per grant (each firing
// is a goroutine and a wake-up). Guarded by Coordinator.mu.
type young struct {
	clock  clockwork.Clock
	mature func() // Coordinator.matureYoung
	queue  []youngLock
	head   int             // queue[:head] were handled
	timer  clockwork.Timer // fires at the first due; nil before the first grant
	armed  bool
}

// youngLock is a held lock and when its delay is up.
type youngLock struct {
	h   *held
	due time.Time
}

// watchLaterLocked has h watched once it has been held for the watch delay,
// or at once when the delay is 0.
func (h *held) watchLaterLocked() {
	c := h.entry.co
	if c.cfg.WatchDelay == 0 {
		h.watchHeldLocked()
		return
	}
	y := &c.young
	if y.head > 0 && y.head >= len(y.queue)/2 {
		// Drop the handled half; the queue holds one delay's grants.
		n := copy(y.queue, y.queue[y.head:])
		clear(y.queue[n:])
		y.queue, y.head = y.queue[:n], 0
	}
	y.queue = append(y.queue, youngLock{h: h, due: c.clock.Now().Add(c.cfg.WatchDelay)})
	if !y.armed {
		y.arm(c.cfg.WatchDelay)
	}
}

// arm makes the timer fire in d.
func (y *young) arm(d time.Duration) {
	y.armed = true
	if y.timer == nil {
		y.timer = y.clock.AfterFunc(d, y.mature)
		return
	}
	y.timer.Reset(d)
}

// youngSlack is how much sooner than its delay a young lock may be
// watched, for the timer to take the locks in batches.
func youngSlack(delay time.Duration) time.Duration { return delay / 4 }

// matureYoung watches the locks still held whose delay is up, or ends
// within youngSlack.
func (c *Coordinator) matureYoung() {
	c.mu.Lock()
	defer c.unlock()
	y := &c.young
	y.armed = false
	now := c.clock.Now()
	batch := now.Add(youngSlack(c.cfg.WatchDelay))
	for ; y.head < len(y.queue); y.head++ {
		l := y.queue[y.head]
		if l.due.After(batch) {
			y.arm(l.due.Sub(now))
			return
		}
		y.queue[y.head] = youngLock{}
		if !l.h.ended {
			l.h.watchHeldLocked()
		}
	}
	y.queue, y.head = y.queue[:0], 0
}

// watchHeldLocked has its lock's watch open while h is held, so that a
// delete of its key by anyone else is reported at once as a loss. The
// watch, if it opens for h, starts just after h's grant: a delete during
// its watch delay is delivered too.
func (h *held) watchHeldLocked() {
	c := h.entry.co
	if h.watched || h.ended {
		return
	}
	h.watched = true
	h.inScope = c.hub.watchHeld(h.entry.key, h.fence+1)
}
