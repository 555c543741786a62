package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/baton-dev/baton/internal/electcompat"
	"github.com/baton-dev/baton/internal/keyspace"
)

// The sidecar's own candidacy (--campaign) and the election sidecars' API
// (--leader-addr): apps written for those sidecars ask who leads and
// compare it with their hostname, with no change of code.

// validateCampaign checks --campaign and --leader-addr.
func (o *serveOptions) validateCampaign() error {
	if o.campaign == "" {
		if o.leaderAddr != "" {
			return errors.New("--leader-addr: tells the leader of the election the sidecar campaigns in; give --campaign NAME too")
		}
		return nil
	}
	if _, err := keyspace.ParseKey(o.campaign); err != nil {
		return fmt.Errorf("--campaign: %w", err)
	}
	if o.engine.Coordinator.Identity.Pod == "" {
		return errors.New("--campaign: the pod has no name to campaign as: set POD_NAME")
	}
	if o.leaderAddr != "" {
		if _, _, err := net.SplitHostPort(o.leaderAddr); err != nil {
			return fmt.Errorf("--leader-addr %q: want host:port, e.g. localhost:4040", o.leaderAddr)
		}
	}
	return nil
}

// candidacy is the sidecar's campaign and its leader's answers, while it
// runs.
type candidacy struct {
	cfg    electcompat.Config
	self   electcompat.Self
	leader *electcompat.Leader
	l      net.Listener // --leader-addr's; nil when not served

	stop    context.CancelFunc // ends the campaign: it resigns
	stopped chan struct{}      // closed once it has
}

// listenLeader takes --leader-addr's port, with the sidecar's others.
func (sc *sidecar) listenLeader() error {
	if sc.o.campaign == "" {
		return nil
	}
	k, _ := keyspace.ParseKey(sc.o.campaign) // validated
	sc.cand = &candidacy{cfg: electcompat.Config{Election: k, Candidate: sc.o.engine.Coordinator.Identity.Pod}, stopped: make(chan struct{})}
	if sc.o.leaderAddr == "" {
		return nil
	}
	l, err := net.Listen("tcp", sc.o.leaderAddr)
	if err != nil {
		return fmt.Errorf("--leader-addr: %w", err)
	}
	sc.cand.l = l
	sc.closers = append(sc.closers, func() { l.Close() })
	return nil
}

// runCandidacy campaigns, follows the election and serves its leader
// until serveCtx ends; the campaign itself ends (and resigns) at
// resign. It campaigns once the engine has taken over the keys of the
// process before it, whose candidate's key it deletes.
func (sc *sidecar) runCandidacy(serveCtx context.Context, wg *sync.WaitGroup) {
	c := sc.cand
	if c == nil {
		return
	}
	co := sc.engine.Elections()
	log := sc.log.With("election", c.cfg.Election.String())
	ctx, stop := context.WithCancel(context.Background())
	c.stop = stop
	go func() {
		defer close(c.stopped)
		select {
		case <-sc.engine.Adopted():
		case <-ctx.Done():
			return
		}
		electcompat.Campaign(ctx, co, c.cfg, &c.self, log)
	}()
	if c.l == nil {
		return
	}
	c.leader = electcompat.NewLeader(c.cfg.Election, c.cfg.Candidate, &c.self, log)
	wg.Go(func() { c.leader.Follow(serveCtx, co) })
	srv := &http.Server{Handler: c.leader.Handler(), ReadHeaderTimeout: 5 * time.Second}
	wg.Go(func() {
		go func() { <-serveCtx.Done(); srv.Close() }()
		if err := srv.Serve(c.l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("leader server stopped", "addr", c.l.Addr().String(), "err", err)
		}
	})
}

// resign ends the sidecar's campaign, resigning if it leads, and returns
// once it has (the next candidate leads at once), or when ctx ends (etcd
// out of reach: the leadership then goes with the sidecar's lease).
func (sc *sidecar) resign(ctx context.Context) {
	if c := sc.cand; c != nil && c.stop != nil {
		c.stop()
		select {
		case <-c.stopped:
		case <-ctx.Done():
			sc.log.Warn("could not resign within the shutdown grace", "election", c.cfg.Election.String())
		}
	}
}
