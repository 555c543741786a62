package coordinator

import "github.com/jonboulle/clockwork"

// WithClock has the coordinator read the time and set every timer on
// clock (the real clock by default): the deadlines, the watch delay, the
// renewals of a Hold, the back-offs and the record writes follow it, so a
// test with a fake clock moves them all at once. The deadlines of contexts
// stay on real time: a wait's, which the caller gave in real time, and an
// etcd call's, which bound calls to an etcd that keeps real time.
func WithClock(clock clockwork.Clock) Option { return func(c *Coordinator) { c.clock = clock } }
