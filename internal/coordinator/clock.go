package coordinator

import "github.com/jonboulle/clockwork"

// WithClock has the coordinator read the time and set every timer on
// clock (the real clock by default): the deadlines, the watch delay, the
// renewals of a Hold, the back-offs and the record writes follow it, so a
// test with a fake clock moves them all at once.
func WithClock(clock clockwork.Clock) Option { return func(c *Coordinator) { c.clock = clock } }
