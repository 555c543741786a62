package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Keeper keeps one session alive at a time: it opens a session, waits for it
// to end, and opens the next, with back-off while etcd cannot be reached.
type Keeper struct {
	cli    *clientv3.Client
	cfg    Config
	log    *slog.Logger
	onLost func()
	heard  func(rev int64)
	resume []clientv3.LeaseID

	mu      sync.Mutex
	lastErr error // why the last session could not be opened; nil once one is
	cur     *Session
	changed chan struct{} // closed and replaced whenever cur changes
	closed  bool
}

// Option configures a Keeper.
type Option func(*Keeper)

// OnSessionLost makes f run each time a session is lost (not revoked).
func OnSessionLost(f func()) Option { return func(k *Keeper) { k.onLost = f } }

// HeardRevisions makes f hear the etcd revision in the answer to every
// renewal of a lease (its member's revision then: it may lag behind the
// cluster's, never run ahead of what was committed).
func HeardRevisions(f func(rev int64)) Option { return func(k *Keeper) { k.heard = f } }

// ResumeLeases makes the first session continue the leases ids, those that
// are still alive: a restarted sidecar keeps the locks of the process before
// it.
func ResumeLeases(ids ...clientv3.LeaseID) Option { return func(k *Keeper) { k.resume = ids } }

// NewKeeper validates cfg and returns a Keeper; Run starts it.
func NewKeeper(cli *clientv3.Client, cfg Config, log *slog.Logger, opts ...Option) (*Keeper, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	k := &Keeper{cli: cli, cfg: cfg, log: log, onLost: func() {}, changed: make(chan struct{})}
	for _, o := range opts {
		o(k)
	}
	return k, nil
}

// Run opens sessions until ctx ends or Close is called.
func (k *Keeper) Run(ctx context.Context) error {
	// Each delay varied by ±20%, so that the sidecars that lost etcd
	// together do not come back in step.
	retry := &backoff.ExponentialBackOff{InitialInterval: k.cfg.RetryMin, RandomizationFactor: 0.2, Multiplier: 2, MaxInterval: k.cfg.RetryMax}
	resumeUntil := time.Now().Add(2 * k.cfg.TTL) // past that, the lease has surely expired
	for ctx.Err() == nil && !k.isClosed() {
		var s *Session
		var err error
		if len(k.resume) > 0 && time.Now().Before(resumeUntil) {
			s, err = resume(ctx, k.cli, k.cfg, k.heard, k.resume...)
			if errors.Is(err, ErrLeaseGone) {
				k.log.Warn("the leases of the previous process are gone; its locks are lost", "leases", fmt.Sprintf("%x", k.resume))
				k.resume = nil
				continue
			}
		} else {
			s, err = open(ctx, k.cli, k.cfg, k.heard)
		}
		if err != nil {
			k.failed(err)
			wait := retry.NextBackOff()
			k.log.Warn("cannot open etcd session; retrying", "etcd", k.cli.Endpoints(), "err", err, "retryIn", wait.Round(time.Millisecond))
			select {
			case <-ctx.Done():
			case <-time.After(wait):
			}
			continue
		}
		retry.Reset()
		if !k.publish(s) {
			_ = s.Revoke(context.Background())
			return nil
		}
		k.resume = nil
		k.log.Info("etcd session open", "leaseID", fmt.Sprintf("%x", int64(s.ID())), "leases", len(s.IDs()), "ttl", s.TTL(), "resumed", s.Resumed())
		select {
		case <-s.Done():
			if k.unpublish(s) {
				k.log.Error("etcd session lost; its locks are lost", "leaseID", fmt.Sprintf("%x", int64(s.ID())), "why", s.lostBecause())
				k.onLost()
				go k.revokeLost(ctx, s)
			}
		case <-ctx.Done():
		}
	}
	return nil
}

// revokeLost revokes a session that was given up for lost. etcd may still
// hold its lease, for instance after a restart, which renews every lease;
// the keys of its lost locks would then block other callers for another
// TTL. It retries while etcd cannot be reached, for a bounded time.
func (k *Keeper) revokeLost(ctx context.Context, s *Session) {
	deadline := time.Now().Add(10 * k.cfg.TTL)
	for time.Now().Before(deadline) {
		rctx, cancel := context.WithTimeout(ctx, k.cfg.GrantTimeout)
		err := s.Revoke(rctx)
		cancel()
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(k.cfg.RetryMax):
		}
	}
}

// Current returns the live session, or ErrNoSession saying which etcd it
// is opened with and, when that failed, why.
func (k *Keeper) Current() (*Session, error) {
	k.mu.Lock()
	s, lastErr := k.cur, k.lastErr
	k.mu.Unlock()
	if s == nil || !s.Alive() {
		at := strings.Join(k.cli.Endpoints(), ",")
		if lastErr != nil {
			return nil, fmt.Errorf("%w: etcd at %s cannot be reached: %w", ErrNoSession, at, lastErr)
		}
		return nil, fmt.Errorf("%w: opening one with etcd at %s", ErrNoSession, at)
	}
	return s, nil
}

// failed records why a session could not be opened.
func (k *Keeper) failed(err error) {
	k.mu.Lock()
	k.lastErr = err
	k.mu.Unlock()
}

// Wait returns the live session, waiting for one to open until ctx ends.
func (k *Keeper) Wait(ctx context.Context) (*Session, error) {
	for {
		changed := k.Changed()
		if s, err := k.Current(); err == nil {
			return s, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			_, err := k.Current()
			return nil, fmt.Errorf("%w (gave up waiting for one: %w)", err, ctx.Err())
		}
	}
}

// Changed returns a channel closed at the next change of the current
// session (opened, lost or revoked).
func (k *Keeper) Changed() <-chan struct{} {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.changed
}

// Close revokes the current session, freeing every lock it carries at once,
// and stops opening new ones. Run returns soon after.
func (k *Keeper) Close(ctx context.Context) error {
	k.mu.Lock()
	k.closed = true
	s := k.cur
	k.cur = nil
	k.notifyLocked()
	k.mu.Unlock()
	if s == nil {
		return nil
	}
	return s.Revoke(ctx)
}

func (k *Keeper) isClosed() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.closed
}

func (k *Keeper) publish(s *Session) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return false
	}
	k.cur, k.lastErr = s, nil
	k.notifyLocked()
	return true
}

// unpublish clears s if it is still current and reports whether it was.
func (k *Keeper) unpublish(s *Session) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.cur != s {
		return false
	}
	k.cur = nil
	k.notifyLocked()
	return true
}

func (k *Keeper) notifyLocked() {
	close(k.changed)
	k.changed = make(chan struct{})
}
