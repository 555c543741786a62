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
	// leadership lost) waits before it campaigns again. Default 1s.
	Retry time.Duration
}

// Campaign keeps the pod a candidate of cfg.Election for as long as ctx
// lasts: it campaigns as long as it takes, leads while its sidecar keeps
// the leadership, and campaigns again after a loss. When ctx ends it
// resigns, so that the next candidate leads at once: the sidecar's drain
// ends it, before the sidecar lets its locks go.
func Campaign(ctx context.Context, co *coordinator.Coordinator, cfg Config, log *slog.Logger) {
	retry := cfg.Retry
	if retry <= 0 {
		retry = time.Second
	}
	for ctx.Err() == nil {
		g, err := co.Acquire(ctx, coordinator.AcquireRequest{Key: cfg.Election, Owner: cfg.Candidate, Value: cfg.Candidate,
			Hold: true, Wait: coordinator.WaitForever})
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("campaign failed; campaigning again", "election", cfg.Election.String(), "err", err, "in", retry)
			}
			sleep(ctx, retry)
			continue
		}
		log.Info("elected", "election", cfg.Election.String(), "candidate", cfg.Candidate, "fence", g.Fence)
		hold := co.Keep(context.WithoutCancel(ctx), g)
		select {
		case <-ctx.Done():
			hold.Release("the sidecar is stopping: resigned")
			log.Info("resigned", "election", cfg.Election.String(), "candidate", cfg.Candidate, "fence", g.Fence)
			return
		case <-hold.Done():
		}
		var lost *coordinator.LostError
		if errors.As(hold.Err(), &lost) {
			log.Warn("leadership lost; campaigning again", "election", cfg.Election.String(), "fence", g.Fence, "reason", string(lost.Reason))
		}
		sleep(ctx, retry)
	}
}

// sleep waits for d or ctx's end.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
