package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/lockstore"
)

// MaxOwnerLen bounds an owner (execution id).
const MaxOwnerLen = 256

// AcquireRequest asks for a lock.
type AcquireRequest struct {
	Key keyspace.Key
	// Owner is the caller's execution id; NewOwner() makes one when empty.
	Owner string
	// TTL is how long the lock may be held before the sidecar releases it;
	// 0 means Config.DefaultTTL; at most Config.MaxHold.
	TTL time.Duration
	// Wait is how long to queue for the lock; 0 tries once.
	Wait time.Duration
	// OnQueued, if set, is called from the waiting goroutine with the number
	// of contenders ahead of the caller, each time that number is learned.
	// It may run under the coordinator's lock: it must return at once and
	// must not call the coordinator.
	OnQueued func(ahead int)
	// Hold marks a lock bound to its caller's connection (a hold stream): a
	// restarted sidecar does not keep it, since the connection died too.
	// Such a lock is meant to last as long as its caller: TTL is then the
	// renewal window, which the caller (the server's stream) keeps moving
	// with Renew while the connection lives.
	Hold bool
	// MaxHold, with Hold, caps how long the lock may be held however often
	// it is renewed or extended: at AcquiredAt+MaxHold it ends, lost with
	// reason MaxHoldReached. 0 sets no cap. At most Config.MaxHold.
	MaxHold time.Duration
}

// Grant is a lock held by a local owner.
type Grant struct {
	Key        keyspace.Key
	Owner      string
	Fence      int64
	AcquiredAt time.Time
	ExpiresAt  time.Time
	// Repeated says the owner held the lock before this call, which changed
	// nothing (acquire is idempotent).
	Repeated bool
	// TTL is the lock's window: the deadline a grant, an extend or a
	// renewal sets is that long after it.
	TTL time.Duration
	// MaxHoldAt is when the lock ends whatever its renewals (the request's
	// MaxHold); zero when uncapped.
	MaxHoldAt time.Time

	h *held
}

// Done returns a channel that is closed when the lock ends, however it ends.
func (g Grant) Done() <-chan struct{} {
	if g.h == nil {
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	return g.h.doneChan()
}

// Err returns nil while the lock is held and after its owner released it,
// and a *LostError once it ended any other way.
func (g Grant) Err() error {
	if g.h == nil {
		return nil
	}
	g.h.co.mu.Lock()
	defer g.h.co.mu.Unlock()
	if g.h.ended && g.h.lost != nil {
		return g.h.lost
	}
	return nil
}

// Acquire grants req.Key to req.Owner, or tells who holds it. A try (Wait
// 0) costs one etcd transaction, granted or refused, and leaves no key
// behind when refused. A wait queues in create-revision order across
// sidecars and deletes its contender key when it gives up.
func (c *Coordinator) Acquire(ctx context.Context, req AcquireRequest) (g Grant, err error) {
	if err := c.checkAcquire(&req); err != nil {
		return Grant{}, err
	}
	start := c.now()
	defer func() { c.acquired(req, start, err) }()
	if req.Wait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, req.Wait, errWaitOver)
		defer cancel()
	}

	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return Grant{}, fmt.Errorf("acquire %q: %w: shutting down", req.Key, ErrUnavailable)
	}
	e := c.refLocked(req.Key)
	defer c.unref(e)
	if g, answered, err := c.heldHereLocked(ctx, e, req); answered {
		return g, err
	}
	if req.Wait == 0 {
		return c.tryLocked(ctx, e, req)
	}
	return c.queueLocked(ctx, e, req, start)
}

// heldHereLocked answers an acquire of a lock held in this sidecar, when
// its holder's answer is the caller's: the grant again to its owner
// (acquire is idempotent), a refusal naming the holder to a try. answered
// says it did; then c.mu is unlocked, else it is still locked.
func (c *Coordinator) heldHereLocked(ctx context.Context, e *entry, req AcquireRequest) (g Grant, answered bool, err error) {
	if h := e.held; h != nil && !h.sess.Alive() {
		// The session just ended and its watcher has not run yet: the
		// lock is lost, not something to hand back.
		c.loseLocked(e, h, LeaseLost)
		c.passTurnLocked(e)
	}
	if h := e.held; h != nil && h.owner == req.Owner && !c.hub.covers(h.fence) {
		// Asked again before the watch reports this key's deletes (a young
		// lock, or a watch being established again): etcd says whether
		// it is still held, so a lock force released meanwhile is never
		// handed back.
		c.mu.Unlock()
		if err := c.verify(ctx, e, h); err != nil {
			return Grant{}, true, fmt.Errorf("acquire %q: %w", req.Key, err)
		}
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return Grant{}, true, fmt.Errorf("acquire %q: %w: shutting down", req.Key, ErrUnavailable)
		}
	}
	h := e.held
	switch {
	case h == nil:
		return Grant{}, false, nil
	case h.owner == req.Owner:
		g := grantOf(e, h)
		g.Repeated = true
		c.mu.Unlock()
		return g, true, nil
	case req.Wait == 0 && !h.ending:
		err := &HeldError{Key: req.Key, Holder: c.recordOf(h), Fence: h.fence}
		c.mu.Unlock()
		return Grant{}, true, err
	}
	return Grant{}, false, nil
}

func (c *Coordinator) checkAcquire(req *AcquireRequest) error {
	if req.Key.IsZero() {
		return invalid("key", "no key")
	}
	if req.Owner == "" {
		req.Owner = NewOwner()
	} else if err := CheckOwner(req.Owner); err != nil {
		return err
	}
	ttl, err := c.checkTTL(req.TTL)
	if err != nil {
		return err
	}
	req.TTL = ttl
	switch {
	case req.MaxHold < 0:
		return invalid("max_hold", "%v is negative; leave it out to hold for as long as the stream stays open", req.MaxHold)
	case req.MaxHold > 0 && !req.Hold:
		return invalid("max_hold", "applies to hold streams (POST /v1/locks/KEY:hold), which renew their lock; a plain acquire ends at its ttl")
	case req.MaxHold > 0 && req.MaxHold < time.Second:
		return invalid("max_hold", "%v is shorter than 1s", req.MaxHold)
	case req.MaxHold > c.cfg.MaxHold:
		return invalid("max_hold", "%v is longer than the sidecar's maximum hold %v", req.MaxHold, c.cfg.MaxHold)
	case req.MaxHold > 0 && req.TTL > req.MaxHold:
		req.TTL = req.MaxHold // the cap comes first
	}
	switch {
	case req.Wait < 0:
		return invalid("wait", "%v is negative; use 0 to try once", req.Wait)
	case req.Wait > c.cfg.MaxWait:
		return invalid("wait", "%v is longer than the sidecar's maximum wait %v", req.Wait, c.cfg.MaxWait)
	}
	return nil
}

func (c *Coordinator) checkTTL(ttl time.Duration) (time.Duration, error) {
	switch {
	case ttl == 0:
		return c.cfg.DefaultTTL, nil
	case ttl < 0:
		return 0, invalid("ttl", "%v is negative", ttl)
	case ttl < time.Second:
		return 0, invalid("ttl", "%v is shorter than 1s", ttl)
	case ttl > c.cfg.MaxHold:
		return 0, invalid("ttl", "%v is longer than the sidecar's maximum hold %v", ttl, c.cfg.MaxHold)
	}
	return ttl, nil
}

// CheckOwner validates an owner: 1 to MaxOwnerLen bytes of printable UTF-8.
func CheckOwner(owner string) error {
	switch {
	case owner == "":
		return invalid("owner", "is empty")
	case len(owner) > MaxOwnerLen:
		return invalid("owner", "is %d bytes long, at most %d are allowed", len(owner), MaxOwnerLen)
	case !utf8.ValidString(owner):
		return invalid("owner", "is not valid UTF-8")
	}
	for _, r := range owner {
		if !unicode.IsPrint(r) || r == ' ' {
			return invalid("owner", "%q has %q; use printable characters without spaces", owner, r)
		}
	}
	return nil
}

// grant records a lock granted in etcd; the caller has the turn, which the
// holder keeps until the lock ends. rec is the grant's record: for a try,
// the value its transaction wrote; for a waiter, whose key still holds the
// record it queued with, what that record becomes.
func (c *Coordinator) grant(e *entry, req AcquireRequest, sess lockstore.Session, id lockstore.LeaseID, key string, fence int64, rec keyspace.Holder) (Grant, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || !sess.Alive() {
		// The lease is being revoked or is gone: the key goes with it.
		c.passTurnLocked(e)
		return Grant{}, fmt.Errorf("acquire %q: %w: the etcd session ended during the grant", req.Key, ErrUnavailable)
	}
	h := &held{
		owner: req.Owner, fence: fence, etcdKey: key, sess: sess, lease: id, hold: req.Hold,
		acquiredAt: rec.AcquiredAt, expiresAt: rec.ExpiresAt, ttl: req.TTL, co: c,
	}
	if req.MaxHold > 0 {
		h.capAt = rec.AcquiredAt.Add(req.MaxHold)
	}
	e.refs++
	c.holdLocked(e, h, req.TTL, req.Hold)
	delete(c.ended, endedKey{req.Key.String(), req.Owner})
	// A waiter's record, written when it queued, gets the grant time
	// recordDelay from now unless the lock has moved on by then.
	h.mod = fence
	c.publishLaterLocked(e)
	c.log.Info("lock granted", "lock", req.Key.String(), "owner", req.Owner, "fence", fence, "expiresAt", h.expiresAt)
	return grantOf(e, h), nil
}

// acquired reports the end of an acquire to the observer and, for a
// refusal, to the log.
func (c *Coordinator) acquired(req AcquireRequest, start time.Time, err error) {
	result := "granted"
	var he *HeldError
	switch {
	case err == nil:
	case errors.As(err, &he):
		result = "refused"
		if he.Waited {
			result = "wait_timeout"
		}
		// LogAttrs: a refusal is the hot path of a burst of duplicates,
		// and attributes cost nothing when the level is off.
		c.log.LogAttrs(context.Background(), slog.LevelInfo, "lock refused", slog.String("lock", req.Key.String()), slog.String("owner", req.Owner),
			slog.String("holder", he.Holder.Owner), slog.Int64("fence", he.Fence), slog.Bool("waited", he.Waited))
	default:
		result = "error"
	}
	c.obs.Acquired(req.Key.String(), result, req.Wait > 0, c.now().Sub(start))
}

func grantOf(e *entry, h *held) Grant {
	return Grant{Key: e.key, Owner: h.owner, Fence: h.fence, AcquiredAt: h.acquiredAt, ExpiresAt: h.expiresAt, TTL: h.ttl, MaxHoldAt: h.capAt, h: h}
}
