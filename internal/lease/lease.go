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
	"go.etcd.io/etcd/client/v3/concurrency"
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
}

// Default returns the documented defaults.
func Default() Config {
	return Config{TTL: 10 * time.Second, GrantTimeout: 3 * time.Second, RetryMin: 200 * time.Millisecond, RetryMax: 5 * time.Second}
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
	}
	return nil
}

// TTLSeconds converts a TTL to etcd's whole seconds, rounding up.
func TTLSeconds(d time.Duration) int64 { return int64(math.Ceil(d.Seconds())) }

// ErrNoSession is returned by Keeper.Current while no session is alive.
var ErrNoSession = errors.New("no etcd session")

// Session is one lease kept alive by one keep-alive stream.
type Session struct {
	s       *concurrency.Session
	ttl     time.Duration
	resumed bool
}

// Open grants a lease of cfg.TTL and keeps it alive until ctx ends, the
// lease expires, or Revoke is called.
func Open(ctx context.Context, cli *clientv3.Client, cfg Config) (*Session, error) {
	gctx, cancel := context.WithTimeout(ctx, cfg.GrantTimeout)
	defer cancel()
	g, err := cli.Grant(gctx, TTLSeconds(cfg.TTL))
	if err != nil {
		return nil, fmt.Errorf("grant lease: %w", err)
	}
	s, err := concurrency.NewSession(cli, concurrency.WithLease(g.ID), concurrency.WithContext(ctx), concurrency.WithTTL(int(TTLSeconds(cfg.TTL))))
	if err != nil {
		return nil, fmt.Errorf("keep lease %x alive: %w", int64(g.ID), err)
	}
	return &Session{s: s, ttl: time.Duration(g.TTL) * time.Second}, nil
}

// ErrLeaseGone is returned by Resume when the lease expired or was revoked.
var ErrLeaseGone = errors.New("lease is gone")

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
	s, err := concurrency.NewSession(cli, concurrency.WithLease(id), concurrency.WithContext(ctx), concurrency.WithTTL(int(ttl.GrantedTTL)))
	if err != nil {
		return nil, fmt.Errorf("keep lease %x alive: %w", int64(id), err)
	}
	return &Session{s: s, ttl: time.Duration(ttl.GrantedTTL) * time.Second, resumed: true}, nil
}

// Resumed reports whether the session continues a lease of an earlier
// process (Resume) rather than a new one.
func (s *Session) Resumed() bool { return s.resumed }

// ID is the lease id that every contender key of this session carries.
func (s *Session) ID() clientv3.LeaseID { return s.s.Lease() }

// TTL is the lease TTL granted by etcd.
func (s *Session) TTL() time.Duration { return s.ttl }

// Done is closed when the session ends: the lease expired, keep-alive could
// not reach etcd for a TTL, or the session was revoked.
func (s *Session) Done() <-chan struct{} { return s.s.Done() }

// Alive reports whether Done is still open.
func (s *Session) Alive() bool {
	select {
	case <-s.Done():
		return false
	default:
		return true
	}
}

// Revoke stops the keep-alive and revokes the lease, deleting every key
// attached to it at once.
func (s *Session) Revoke(ctx context.Context) error {
	s.s.Orphan()
	if _, err := s.s.Client().Revoke(ctx, s.ID()); err != nil {
		return fmt.Errorf("revoke lease %x: %w", int64(s.ID()), err)
	}
	return nil
}
