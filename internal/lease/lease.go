// Package lease keeps the sidecar's one etcd session: a lease with a single
// keep-alive stream that carries every lock the sidecar holds. It knows
// nothing about locks; it tells when a session ends (Session.Done) and opens
// the next one.
package lease

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// MinTTL is the shortest lease etcd handles reliably: the server checks
// expiry every 500 ms and a leader change adds an election timeout.
const MinTTL = 2 * time.Second

// Config configures the session keeper.
type Config struct {
	// TTL of the lease: how long after a crash the sidecar's locks stay held.
	// Rounded up to whole seconds. Default 10s, at least MinTTL.
	TTL time.Duration
	// GrantTimeout bounds one attempt to grant a lease. Default 3s; less
	// than TTL.
	GrantTimeout time.Duration
	// RetryMin and RetryMax bound the back-off between failed grants.
	// Defaults 200ms and 5s.
	RetryMin, RetryMax time.Duration
	// LossMargin is how long before etcd could expire the lease, counting
	// from the last renewal heard, the session is given up. 0 means TTL/4;
	// less than TTL/2.
	LossMargin time.Duration
}

func (c Config) lossMargin() time.Duration {
	if c.LossMargin == 0 {
		return c.TTL / 4
	}
	return c.LossMargin
}

// Default returns the documented defaults.
func Default() Config {
	return Config{TTL: 10 * time.Second, GrantTimeout: 3 * time.Second, RetryMin: 200 * time.Millisecond, RetryMax: time.Second}
}

// Validate checks the fields and their relations.
func (c Config) Validate() error {
	switch {
	case c.TTL < MinTTL:
		return fmt.Errorf("lease TTL %v: must be at least %v", c.TTL, MinTTL)
	case c.GrantTimeout <= 0 || c.GrantTimeout >= c.TTL:
		return fmt.Errorf("grant timeout %v: must be positive and less than the lease TTL %v", c.GrantTimeout, c.TTL)
	case c.RetryMin <= 0 || c.RetryMax < c.RetryMin:
		return fmt.Errorf("retry back-off %v..%v: need 0 < min <= max", c.RetryMin, c.RetryMax)
	case c.LossMargin < 0 || c.LossMargin >= c.TTL/2:
		return fmt.Errorf("loss margin %v: must be at least 0 and less than half the lease TTL %v", c.LossMargin, c.TTL)
	}
	return nil
}

// TTLSeconds converts a TTL to etcd's whole seconds, rounding up.
func TTLSeconds(d time.Duration) int64 { return int64(math.Ceil(d.Seconds())) }

// ErrNoSession is returned by Keeper.Current while no session is alive.
var ErrNoSession = errors.New("no etcd session")

// ErrLeaseGone is returned by Resume when the lease expired or was revoked.
var ErrLeaseGone = errors.New("lease is gone")

// Session is one lease kept alive by one keep-alive stream.
//
// It ends (Done) when etcd says the lease is gone, and also when no renewal
// has been heard for the lease TTL less a margin (Config.LossMargin): etcd
// expires a lease a TTL after the last renewal it processed, and that
// renewal was answered no earlier, so giving the session up a margin before
// then tells the holders of its locks that they lost them before etcd can
// hand the locks to anyone else, as long as an answer takes less than the
// margin to arrive.
type Session struct {
	cli     *clientv3.Client
	id      clientv3.LeaseID
	ttl     time.Duration
	resumed bool
	stop    context.CancelFunc
	done    chan struct{}
}

// Open grants a lease of cfg.TTL and keeps it alive until ctx ends, the
// lease is lost, or Revoke is called.
func Open(ctx context.Context, cli *clientv3.Client, cfg Config) (*Session, error) {
	gctx, cancel := context.WithTimeout(ctx, cfg.GrantTimeout)
	defer cancel()
	g, err := cli.Grant(gctx, TTLSeconds(cfg.TTL))
	if err != nil {
		return nil, fmt.Errorf("grant lease: %w", err)
	}
	return keep(ctx, cli, cfg, g.ID, time.Duration(g.TTL)*time.Second, false)
}

// Resume keeps an existing lease alive again, such as the one a restarted
// sidecar held before it crashed. It fails with ErrLeaseGone when the lease
// no longer exists.
func Resume(ctx context.Context, cli *clientv3.Client, cfg Config, id clientv3.LeaseID) (*Session, error) {
	gctx, cancel := context.WithTimeout(ctx, cfg.GrantTimeout)
	defer cancel()
	ttl, err := cli.TimeToLive(gctx, id)
	if err != nil {
		return nil, fmt.Errorf("look up lease %x: %w", int64(id), err)
	}
	if ttl.TTL <= 0 {
		return nil, fmt.Errorf("resume lease %x: %w", int64(id), ErrLeaseGone)
	}
	// Until the first renewal, the lease is good for what etcd said is left.
	return keep(ctx, cli, cfg, id, time.Duration(ttl.TTL)*time.Second, true)
}

// keep starts the keep-alive of lease id, good for left from now.
func keep(ctx context.Context, cli *clientv3.Client, cfg Config, id clientv3.LeaseID, left time.Duration, resumed bool) (*Session, error) {
	kctx, stop := context.WithCancel(ctx)
	ch, err := cli.KeepAlive(kctx, id)
	if err != nil {
		stop()
		return nil, fmt.Errorf("keep lease %x alive: %w", int64(id), err)
	}
	s := &Session{cli: cli, id: id, ttl: cfg.TTL, resumed: resumed, stop: stop, done: make(chan struct{})}
	// A resumed lease may have less left than the margin; its first renewal
	// is sent at once, so give that half of what is left to arrive.
	first := max(left-cfg.lossMargin(), left/2)
	go s.watch(ch, first, cfg.lossMargin())
	return s, nil
}

// watch drains the keep-alive answers and ends the session when they stop
// or come too late.
func (s *Session) watch(ch <-chan *clientv3.LeaseKeepAliveResponse, first, margin time.Duration) {
	defer close(s.done)
	defer s.stop()
	t := time.NewTimer(first)
	defer t.Stop()
	for {
		select {
		case resp, ok := <-ch:
			if !ok {
				return // etcd says the lease is gone, or the stream was stopped
			}
			t.Reset(time.Duration(resp.TTL)*time.Second - margin)
		case <-t.C:
			return // no renewal heard in time: etcd may expire the lease soon
		}
	}
}

// Resumed reports whether the session continues a lease of an earlier
// process (Resume) rather than a new one.
func (s *Session) Resumed() bool { return s.resumed }

// ID is the lease id that every contender key of this session carries.
func (s *Session) ID() clientv3.LeaseID { return s.id }

// TTL is the lease TTL.
func (s *Session) TTL() time.Duration { return s.ttl }

// Done is closed when the session ends: the lease expired or was revoked,
// renewals stopped for nearly a TTL, or Revoke was called.
func (s *Session) Done() <-chan struct{} { return s.done }

// Alive reports whether Done is still open.
func (s *Session) Alive() bool {
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// Revoke stops the keep-alive and revokes the lease, deleting every key
// attached to it at once.
func (s *Session) Revoke(ctx context.Context) error {
	s.stop()
	if _, err := s.cli.Revoke(ctx, s.id); err != nil {
		return fmt.Errorf("revoke lease %x: %w", int64(s.id), err)
	}
	return nil
}
