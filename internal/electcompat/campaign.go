// Package electcompat lets apps written for the election sidecars of
// today move to Baton without a change of code: the sidecar campaigns for
// its pod, as those sidecars do (Campaign), and answers who leads as they
// do (Leader): the retired Kubernetes election sidecar's GET / with
// {"name"} on localhost:4040, and nais/elector's GET / and GET /sse with
// {"name","last_update"} on 127.0.0.1:6060. The leader's name is the value
// its candidate announced, which a campaigning sidecar makes its pod's
// name: the app compares it with its hostname.
package electcompat

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/baton-dev/baton/internal/coordinator"
	"github.com/baton-dev/baton/internal/keyspace"
)

// Config is what Campaign and Leader need.
type Config struct {
	// Election is the election the pod campaigns in and whose leader is
	// told.
	Election keyspace.Key
	// Candidate is the pod's name: the owner it campaigns as and the value
	// it announces.
	Candidate string
	// Retry is how long a campaign that failed (etcd out of reach, the
	// leadership lost) first waits before it campaigns again, doubling
	// while it keeps failing, up to 30s. Default 1s.
	Retry time.Duration
}

// Self is what Campaign knows of the pod's own leadership: whether it
// certainly leads now. A Leader asks it before it names the pod, since
// etcd's word may be late: a sidecar cut off from etcd hears no other
// leader elected, but knows when its own leadership may have ended.
type Self struct {
	mu    sync.Mutex
	grant validity // the leadership held; nil when none
}

// validity is how long a leadership is certainly its holder's: a
// coordinator.Grant's.
type validity interface {
	ValidFor(now time.Time) time.Duration
}

// leads reports whether the pod's leadership is certainly its own now:
// held, and within its validity (coordinator.Grant.ValidFor).
func (s *Self) leads(now time.Time) bool {
	s.mu.Lock()
	g := s.grant
	s.mu.Unlock()
	return g != nil && g.ValidFor(now) > 0
}

// set notes the leadership held; nil when none.
func (s *Self) set(g validity) {
	s.mu.Lock()
	s.grant = g
	s.mu.Unlock()
}

// Campaign keeps the pod a candidate of cfg.Election for as long as ctx
// lasts: it campaigns as long as it takes, leads while its sidecar keeps
// the leadership, and campaigns again after a loss. When ctx ends it
// resigns, so that the next candidate leads at once: the sidecar's drain
// ends it, before the sidecar lets its locks go.
func Campaign(ctx context.Context, co *coordinator.Coordinator, cfg Config, self *Self, log *slog.Logger) {
	first := cfg.Retry
	if first <= 0 {
		first = time.Second
	}
	retry := first
	for ctx.Err() == nil {
		g, err := co.Acquire(ctx, coordinator.AcquireRequest{Key: cfg.Election, Owner: cfg.Candidate, Value: cfg.Candidate,
			Hold: true, Wait: coordinator.WaitForever})
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("campaign failed; campaigning again", "election", cfg.Election.String(), "err", err, "in", retry)
			}
			sleep(ctx, retry)
			retry = min(2*retry, maxRetry)
			continue
		}
		retry = first
		log.Info("elected", "election", cfg.Election.String(), "candidate", cfg.Candidate, "fence", g.Fence)
		self.set(g)
		hold := co.Keep(context.WithoutCancel(ctx), g)
		select {
		case <-ctx.Done():
			self.set(nil)
			hold.Release("the sidecar is stopping: resigned")
			log.Info("resigned", "election", cfg.Election.String(), "candidate", cfg.Candidate, "fence", g.Fence)
			return
		case <-hold.Done():
			self.set(nil)
		}
		var lost *coordinator.LostError
		if errors.As(hold.Err(), &lost) {
			log.Warn("leadership lost; campaigning again", "election", cfg.Election.String(), "fence", g.Fence, "reason", string(lost.Reason))
		}
		sleep(ctx, retry)
	}
}

// maxRetry bounds the wait between failed campaigns.
const maxRetry = 30 * time.Second

// sleep waits for d or ctx's end.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
