// Package lease keeps the sidecar's etcd session: a small set of leases,
// renewed together over one keep-alive stream of its own, that carries
// every lock the sidecar holds. It knows nothing about locks; it tells when a
// session ends (Session.Done) and opens the next one.
//
// A session starts with one lease and adds more as the number of keys it
// carries grows (Config.KeysPerLease): revoking or expiring a lease deletes
// all its keys in one raft entry, during which etcd applies nothing else, so
// a lease with 100k keys would stall every write to the cluster for a second.
package lease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrNoSession is returned by Keeper.Current while no session is alive.
var ErrNoSession = errors.New("no etcd session")

// ErrLeaseGone is returned by Resume when the lease expired or was revoked.
var ErrLeaseGone = errors.New("lease is gone")

// Session is a set of leases kept alive together; every key it carries
// goes when the session ends.
//
// It ends (Done) when etcd says one of its leases is gone, and also when no
// renewal of one has been heard for the lease TTL less a margin
// (Config.LossMargin): etcd expires a lease a TTL after the last renewal it
// processed, and that renewal was answered no earlier, so giving the session
// up a margin before then tells the holders of its locks that they lost them
// before etcd can hand the locks to anyone else, as long as an answer takes
// less than the margin to arrive.
type Session struct {
	cli     *clientv3.Client
	cfg     Config
	resumed bool
	ctx     context.Context // the keep-alives' context
	stop    context.CancelFunc
	done    chan struct{}
	end     sync.Once
	next    atomic.Uint64 // round-robin over leases
	renew   *renewer

	mu       sync.Mutex
	leases   []clientv3.LeaseID // the first is the session's ID
	growing  bool               // a lease is being granted
	failedAt time.Time          // last failed grant of an extra lease
	// until is, by lease, when the session gives it up unless a renewal is
	// heard first: its last renewal heard plus its TTL, less the margin.
	until   map[clientv3.LeaseID]time.Time
	renewed chan struct{}   // closed and replaced at each renewal heard
	why     string          // why it ended by itself, once it did
	heard   func(rev int64) // told the revision in each renewal's answer; nil: nobody
}

// Open grants a lease of cfg.TTL and keeps it alive until ctx ends, the
// lease is lost, or Revoke is called.
func Open(ctx context.Context, cli *clientv3.Client, cfg Config) (*Session, error) {
	return open(ctx, cli, cfg, nil)
}

// open is Open, telling heard the revision in each renewal's answer.
func open(ctx context.Context, cli *clientv3.Client, cfg Config, heard func(rev int64)) (*Session, error) {
	s := newSession(ctx, cli, cfg, false)
	s.heard = heard
	id, err := s.grant()
	if err != nil {
		s.stop()
		return nil, err
	}
	s.keep(id, cfg.TTL)
	return s, nil
}

// Resume keeps the leases of an earlier session alive again, such as those
// of a sidecar that crashed and restarted. Leases that no longer exist are
// left out; it fails with ErrLeaseGone when none does.
func Resume(ctx context.Context, cli *clientv3.Client, cfg Config, ids ...clientv3.LeaseID) (*Session, error) {
	return resume(ctx, cli, cfg, nil, ids...)
}

// resume is Resume, telling heard the revision in each renewal's answer.
func resume(ctx context.Context, cli *clientv3.Client, cfg Config, heard func(rev int64), ids ...clientv3.LeaseID) (*Session, error) {
	s := newSession(ctx, cli, cfg, true)
	s.heard = heard
	for _, id := range ids {
		gctx, cancel := context.WithTimeout(ctx, cfg.GrantTimeout)
		ttl, err := cli.TimeToLive(gctx, id)
		cancel()
		if err != nil {
			s.stop()
			return nil, fmt.Errorf("look up lease %x: %w", int64(id), err)
		}
		if ttl.TTL <= 0 {
			continue
		}
		// Until the first renewal, the lease is good for what etcd said is left.
		s.keep(id, time.Duration(ttl.TTL)*time.Second)
	}
	if len(s.leases) == 0 {
		s.stop()
		return nil, fmt.Errorf("resume leases %x: %w", ids, ErrLeaseGone)
	}
	return s, nil
}

func newSession(ctx context.Context, cli *clientv3.Client, cfg Config, resumed bool) *Session {
	kctx, stop := context.WithCancel(ctx)
	s := &Session{cli: cli, cfg: cfg, resumed: resumed, ctx: kctx, stop: stop, done: make(chan struct{}), until: map[clientv3.LeaseID]time.Time{}, renewed: make(chan struct{})}
	s.renew = newRenewer(cli, cfg.renewEvery(), cfg.RetryMin)
	go s.renew.run(kctx)
	return s
}

// grant grants one lease of the configured TTL.
func (s *Session) grant() (clientv3.LeaseID, error) {
	gctx, cancel := context.WithTimeout(s.ctx, s.cfg.GrantTimeout)
	defer cancel()
	g, err := s.cli.Grant(gctx, TTLSeconds(s.cfg.TTL))
	if err != nil {
		return 0, fmt.Errorf("grant lease: %w", err)
	}
	return g.ID, nil
}

// keep starts the renewals of lease id, good for left from now, and adds
// it to the session.
func (s *Session) keep(id clientv3.LeaseID, left time.Duration) {
	ch := s.renew.add(id)
	// A resumed lease may have less left than the margin; its first renewal
	// is sent at once, so give that half of what is left to arrive.
	margin := s.cfg.lossMargin()
	first := max(left-margin, left/2)
	s.mu.Lock()
	s.leases = append(s.leases, id)
	s.until[id] = time.Now().Add(first)
	s.mu.Unlock()
	go s.watch(id, ch, first, margin)
}

// watch reads the renewals of one lease and ends the session when etcd
// says the lease is gone or when they stop or come too late.
func (s *Session) watch(id clientv3.LeaseID, ch <-chan renewal, first, margin time.Duration) {
	t := time.NewTimer(first)
	defer t.Stop()
	heard := time.Now()
	for {
		select {
		case a := <-ch:
			if a.ttl <= 0 {
				s.endFor("etcd says lease %x is gone: it expired or was revoked", int64(id))
				return
			}
			heard = a.at
			if s.heard != nil && a.rev != 0 {
				s.heard(a.rev)
			}
			// Counted from when the answer was heard, which is after
			// etcd renewed the lease.
			until := a.at.Add(a.ttl - margin)
			s.mu.Lock()
			s.until[id] = until
			close(s.renewed)
			s.renewed = make(chan struct{})
			s.mu.Unlock()
			t.Reset(time.Until(until))
		case <-t.C: // etcd may expire the lease soon
			s.endFor("no renewal of lease %x heard for %v", int64(id), time.Since(heard).Round(time.Millisecond))
			return
		case <-s.ctx.Done():
			s.finish() // revoked, or its context ended
			return
		}
	}
}

// finish ends the session: every lease's keep-alive stops.
func (s *Session) finish() {
	s.end.Do(func() {
		s.stop()
		close(s.done)
	})
}

// Resumed reports whether the session continues leases of an earlier
// process (Resume) rather than new ones.
func (s *Session) Resumed() bool { return s.resumed }

// ID is the session's first lease: it names the session.
func (s *Session) ID() clientv3.LeaseID {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.leases[0]
}

// IDs returns every lease of the session.
func (s *Session) IDs() []clientv3.LeaseID {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.leases)
}

// Owns reports whether id is one of the session's leases.
func (s *Session) Owns(id clientv3.LeaseID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Contains(s.leases, id)
}

// LeaseFor returns the lease that the next key should carry, given that the
// session carries about load keys already. When each lease carries
// KeysPerLease keys on average it starts granting another one (in the
// background: keys go on the existing leases until it is there), so the
// session's leases double as its keys grow. New keys are spread evenly.
func (s *Session) LeaseFor(load int) clientv3.LeaseID {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.leases)
	if load >= n*s.cfg.KeysPerLease && n < s.cfg.MaxLeases && !s.growing &&
		time.Since(s.failedAt) > s.cfg.RetryMin && s.Alive() {
		s.growing = true
		go s.grow(min(2*n, s.cfg.MaxLeases) - n)
	}
	return s.leases[s.next.Add(1)%uint64(n)]
}

// grow adds k leases to the session.
func (s *Session) grow(k int) {
	defer func() {
		s.mu.Lock()
		s.growing = false
		s.mu.Unlock()
	}()
	for range k {
		id, err := s.grant()
		if err == nil {
			s.keep(id, s.cfg.TTL)
		}
		if err != nil {
			s.mu.Lock()
			s.failedAt = time.Now()
			s.mu.Unlock()
			return
		}
		if !s.Alive() {
			// Ended meanwhile: its other leases are being revoked or
			// expire; this one must not outlive them.
			s.revoke(id)
			return
		}
	}
}

// revoke revokes a lease that never carried a key, on a best-effort basis:
// unrevoked, it expires after its TTL anyway.
func (s *Session) revoke(id clientv3.LeaseID) {
	s.renew.remove(id)
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.GrantTimeout)
	defer cancel()
	_, _ = s.cli.Revoke(ctx, id)
}

// lostBecause says why the session ended by itself: etcd said a lease
// was gone, or no renewal was heard in time, and why the keep-alive stream
// last broke, if it did.
func (s *Session) lostBecause() string {
	s.mu.Lock()
	why := s.why
	s.mu.Unlock()
	if err := s.renew.err(); err != nil {
		why += "; the keep-alive stream last broke: " + err.Error()
	}
	return why
}

// Gone ends the session at once: etcd refused a write carrying one of its
// leases, which it no longer has (it expired or was revoked). The next
// renewal would have said so; the next session opens now.
func (s *Session) Gone() {
	s.endFor("etcd refused a write with a lease of the session: the lease is gone (it expired or was revoked)")
}

// endFor ends the session, saying why.
func (s *Session) endFor(format string, args ...any) {
	s.mu.Lock()
	if s.why == "" {
		s.why = fmt.Sprintf(format, args...)
	}
	s.mu.Unlock()
	s.finish()
}

// TTL is the lease TTL.
func (s *Session) TTL() time.Duration { return s.cfg.TTL }

// Renewed returns a channel closed at the next renewal heard of one of the
// session's leases (ValidUntil may then move on).
func (s *Session) Renewed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.renewed
}

// ValidUntil is when the session gives itself up unless it hears another
// renewal of its leases first: the last renewal heard of the lease
// renewed longest ago, plus the TTL, less the loss margin. Until then etcd
// cannot have expired any of its leases (as long as a renewal's answer
// takes less than the margin to arrive), so no key it carries can have
// gone with its lease. Zero once the session ended.
func (s *Session) ValidUntil() time.Time {
	if !s.Alive() {
		return time.Time{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var first time.Time
	for _, at := range s.until {
		if first.IsZero() || at.Before(first) {
			first = at
		}
	}
	return first
}

// Done is closed when the session ends: a lease expired or was revoked,
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

// Revoke ends the session and revokes its leases one after the other,
// deleting every key attached to them; etcd applies other writes between
// two revokes. (Two at a time were measured no faster, with longer stalls.)
// A lease that is already gone is skipped.
func (s *Session) Revoke(ctx context.Context) error {
	s.finish()
	var errs []error
	for _, id := range s.IDs() {
		if _, err := s.cli.Revoke(ctx, id); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			errs = append(errs, fmt.Errorf("revoke lease %x: %w", int64(id), err))
			if ctx.Err() != nil {
				break
			}
		}
	}
	return errors.Join(errs...)
}
