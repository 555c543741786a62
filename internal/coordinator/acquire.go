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

// maxHeldElsewhere bounds the memory of locks seen held elsewhere; past it
// the memory starts over (a forgotten lock costs one write on its next
// refusal, nothing more).
const maxHeldElsewhere = 1 << 16

// errWaitOver is the cause of a wait's context when the wait runs out.
var errWaitOver = errors.New("wait over")

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
			return Grant{}, fmt.Errorf("acquire %q: %w", req.Key, err)
		}
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return Grant{}, fmt.Errorf("acquire %q: %w: shutting down", req.Key, ErrUnavailable)
		}
	}
	if h := e.held; h != nil {
		if h.owner == req.Owner {
			g := grantOf(e, h)
			g.Repeated = true
			c.mu.Unlock()
			return g, nil // idempotent
		}
		if req.Wait == 0 && !h.ending {
			err := &HeldError{Key: req.Key, Holder: c.recordOf(h), Fence: h.fence}
			c.mu.Unlock()
			return Grant{}, err
		}
	}
	if req.Wait == 0 {
		if c.tryTurnLocked(e) {
			c.mu.Unlock()
			return c.try(ctx, e, req)
		}
		if letGo := e.retiring || (e.held != nil && e.held.ending); letGo {
			// The lock is being released here: etcd may already show it
			// free. Wait for that one request, then try.
			wctx, cancel := c.etcdCtx(ctx)
			err := c.waitTurnLocked(wctx, e, false)
			cancel()
			if err == nil {
				c.mu.Unlock()
				return c.try(ctx, e, req)
			}
		}
		c.mu.Unlock()
		// A local caller is queued in etcd: whoever holds the lock, it is
		// not this caller.
		return Grant{}, c.refusal(ctx, req.Key, false, 0)
	}
	if c.waiting >= c.cfg.MaxWaiters {
		c.mu.Unlock()
		return Grant{}, fmt.Errorf("acquire %q: %w: %d callers already wait in this sidecar (--max-waiters)", req.Key, ErrTooManyWaiters, c.waiting)
	}
	c.waiting++
	c.hub.want() // whatever it waits behind, it must hear of its end
	c.obs.Waiting(req.Key.String(), 1)
	defer func() {
		c.mu.Lock()
		c.waiting--
		c.mu.Unlock()
		c.obs.Waiting(req.Key.String(), -1)
	}()
	if e.busy && req.OnQueued != nil {
		req.OnQueued(len(e.queue) + 1)
	}
	if err := c.waitTurnLocked(ctx, e, true); err != nil {
		c.mu.Unlock()
		return Grant{}, c.waitFailed(ctx, req.Key, start, err)
	}
	c.mu.Unlock()
	return c.waitThrough(ctx, e, req, start)
}

// waitThrough waits for the lock (the caller has the turn) and rides out
// etcd being out of reach: when a wait fails for want of etcd, or its
// session ends and takes the contender key with it, it queues again on the
// next session (behind whoever queued meanwhile) until the caller's wait
// runs out. Nothing is granted without an etcd commit; a wait that runs
// out while etcd is still unreachable answers unavailable.
func (c *Coordinator) waitThrough(ctx context.Context, e *entry, req AcquireRequest, start time.Time) (Grant, error) {
	retry := retryBackoff(time.Second)
	for {
		g, err := c.wait(ctx, e, req, start)
		if err == nil || !errors.Is(err, ErrUnavailable) || ctx.Err() != nil {
			return g, err
		}
		c.log.Debug("waiting through an etcd outage", "lock", req.Key.String(), "owner", req.Owner, "err", err)
		select {
		case <-time.After(retry.NextBackOff()):
		case <-ctx.Done():
			return Grant{}, c.waitFailed(ctx, req.Key, start, ctx.Err())
		case <-c.stop.Done():
			return Grant{}, err
		}
		c.mu.Lock()
		if e.busy && req.OnQueued != nil {
			// Behind a local caller again: say so, as on arrival (a hold
			// stream may not have told its caller anything yet).
			req.OnQueued(len(e.queue) + 1)
		}
		if err := c.waitTurnLocked(ctx, e, true); err != nil {
			c.mu.Unlock()
			return Grant{}, c.waitFailed(ctx, req.Key, start, err)
		}
		c.mu.Unlock()
	}
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
		return invalid("max_hold", "%v is longer than the sidecar's maximum hold %v (--max-hold)", req.MaxHold, c.cfg.MaxHold)
	case req.MaxHold > 0 && req.TTL > req.MaxHold:
		req.TTL = req.MaxHold // the cap comes first
	}
	switch {
	case req.Wait < 0:
		return invalid("wait", "%v is negative; use 0 to try once", req.Wait)
	case req.Wait > c.cfg.MaxWait:
		return invalid("wait", "%v is longer than the sidecar's maximum wait %v (--max-wait)", req.Wait, c.cfg.MaxWait)
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
		return 0, invalid("ttl", "%v is longer than the sidecar's maximum hold %v (--max-hold)", ttl, c.cfg.MaxHold)
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

// try makes one attempt in one etcd transaction; the caller has the turn.
func (c *Coordinator) try(ctx context.Context, e *entry, req AcquireRequest) (Grant, error) {
	sess, err := c.session(ctx)
	if err != nil {
		c.leaveTurn(e)
		return Grant{}, fmt.Errorf("acquire %q: %w", req.Key, err)
	}
	key, pfx := c.layout.ContenderKey(req.Key, int64(sess.ID())), c.layout.LockPrefix(req.Key)
	now := c.now()
	rec := c.record(req.Owner, now, now.Add(req.TTL))

	// A lock last seen held elsewhere is read first: a refusal is then a
	// linearizable read, with no raft entry (a transaction whose compare
	// fails still costs one, and an fsync, when it has a write branch).
	c.mu.Lock()
	readFirst := c.heldElsewhere[req.Key.String()]
	load := len(c.locks)
	c.mu.Unlock()
	id := sess.LeaseFor(load)
	if readFirst {
		first, err := c.firstContender(ctx, req.Key)
		if err != nil {
			c.leaveTurn(e)
			return Grant{}, unavailable(fmt.Sprintf("acquire %q", req.Key), err)
		}
		if first != nil {
			c.leaveTurn(e)
			return Grant{}, heldFrom(req.Key, first, false, 0)
		}
		c.mu.Lock()
		delete(c.heldElsewhere, req.Key.String()) // its delete went unseen
		c.mu.Unlock()
	}

	// The outcome must not depend on the caller hanging up mid-call: the
	// store carries out a write whatever the caller does.
	out, err := c.store.Try(pfx, lockstore.Put{Key: key, Lease: id, Record: rec})
	if err != nil {
		c.retire(e, key, 0, sess) // the put may have committed
		return Grant{}, unavailable(fmt.Sprintf("acquire %q", req.Key), err)
	}
	if !out.OK {
		c.mu.Lock()
		if len(c.heldElsewhere) >= maxHeldElsewhere {
			clear(c.heldElsewhere)
		}
		c.heldElsewhere[req.Key.String()] = true
		c.mu.Unlock()
		c.leaveTurn(e)
		return Grant{}, heldFrom(req.Key, out.First, false, 0)
	}
	return c.grant(e, req, sess, id, key, out.Rev, rec)
}

// wait queues in etcd behind the contenders created before it; the caller
// has the turn.
func (c *Coordinator) wait(ctx context.Context, e *entry, req AcquireRequest, start time.Time) (Grant, error) {
	op := fmt.Sprintf("acquire %q", req.Key)
	sess, err := c.session(ctx)
	if err != nil {
		c.leaveTurn(e)
		return Grant{}, fmt.Errorf("%s: %w", op, err)
	}
	key, pfx := c.layout.ContenderKey(req.Key, int64(sess.ID())), c.layout.LockPrefix(req.Key)
	now := c.now()
	rec := c.record(req.Owner, now, now.Add(req.TTL))
	c.mu.Lock()
	rec.Queued = e.queued
	// The key's name stays that of the session (its first lease), as in
	// concurrency.Mutex, so one session has one contender key per lock
	// whatever lease carries it.
	id := sess.LeaseFor(len(c.locks))
	c.mu.Unlock()

	w := c.hub.register(pfx) // before any read, so no delete goes unseen
	defer c.hub.unregister(pfx, w)

	// The same write tells the contenders ahead, so a waiter knows its
	// place without a second round trip.
	out, err := c.store.Queue(pfx, lockstore.Put{Key: key, Lease: id, Record: rec})
	if err != nil {
		c.retire(e, key, 0, sess)
		return Grant{}, unavailable(op, err)
	}
	if !out.OK {
		// Only this sidecar writes this key and it has the turn: a key left
		// by an earlier call whose outcome was unknown. Remove it.
		c.retire(e, key, 0, sess)
		return Grant{}, fmt.Errorf("%s: %w: a stale contender key of this sidecar was found and is being removed; retry", op, ErrUnavailable)
	}
	myRev := out.Rev
	c.mu.Lock()
	c.contendLocked(e, key, myRev, myRev, id, rec)
	c.mu.Unlock()
	ahead, readRev := out.Ahead, myRev
	if len(ahead) == 0 {
		return c.grant(e, req, sess, id, key, myRev, rec)
	}

wait:
	for read := false; ; read = true {
		if read {
			var mine bool
			ahead, readRev, mine, err = c.predecessor(ctx, key, pfx, myRev)
			if err != nil {
				c.retire(e, key, myRev, sess)
				if isContextErr(ctx, err) {
					return Grant{}, c.waitFailed(ctx, req.Key, start, ctx.Err())
				}
				return Grant{}, unavailable(op, err)
			}
			if !mine {
				c.leaveTurn(e)
				return Grant{}, fmt.Errorf("%s: %w: this sidecar's contender key was deleted while it waited (session lost or force release); retry", op, ErrUnavailable)
			}
			if len(ahead) == 0 {
				break
			}
		}
		pred := ahead[0]
		if req.OnQueued != nil {
			req.OnQueued(len(ahead))
		}
		// With OnQueued, any contender ahead leaving is news; otherwise
		// only the one right ahead matters.
		var anyOf map[string]bool
		if req.OnQueued != nil && len(ahead) > 1 {
			anyOf = make(map[string]bool, len(ahead))
			for _, k := range ahead {
				anyOf[k] = true
			}
		}
		// A short line is followed key by key: once the watch has shown
		// every contender ahead gone, the waiter is first with no read.
		followed := len(ahead) <= maxFollowedAhead
		for {
			if followed && w.allAheadGone(ahead, key, readRev) {
				break wait // first in line: no read needed
			}
			if w.deleted(pred, readRev, anyOf) {
				break // read again
			}
			select {
			case <-w.notify:
			case <-ctx.Done():
				c.retire(e, key, myRev, sess)
				return Grant{}, c.waitFailed(ctx, req.Key, start, ctx.Err())
			case <-sess.Done():
				c.leaveTurn(e) // the key went with the lease
				return Grant{}, fmt.Errorf("%s: %w: the etcd session ended while waiting", op, ErrUnavailable)
			case <-c.stop.Done():
				c.retire(e, key, myRev, sess)
				return Grant{}, fmt.Errorf("%s: %w: shutting down", op, ErrUnavailable)
			}
		}
	}

	// First in line, and the key (so the session) was still there when
	// etcd said so (etcd issue #11456), by a read or by the watch: granted,
	// with no write on the way. The record's grant time and deadline follow
	// off the hand-off's path.
	now = c.now()
	rec = c.record(req.Owner, now, now.Add(req.TTL))
	return c.grant(e, req, sess, id, key, myRev, rec)
}

// maxFollowedAhead is the longest line ahead of a waiter whose departures
// it follows key by key; behind a longer one it reads again when the
// contender right ahead leaves (each check costs a look-up per key ahead).
const maxFollowedAhead = 64

// predecessor reads the contenders created before myRev, the last created
// first (none when key is first in line), the revision the read saw, and
// whether key (created at myRev) still exists.
func (c *Coordinator) predecessor(ctx context.Context, key, pfx string, myRev int64) (ahead []string, rev int64, mine bool, err error) {
	tctx, cancel := c.etcdCtx(ctx)
	defer cancel()
	return c.store.Ahead(tctx, pfx, key, myRev)
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

// waitFailed turns the end of a wait into the caller's error: a wait that
// ran out is a refusal naming the holder.
func (c *Coordinator) waitFailed(ctx context.Context, k keyspace.Key, start time.Time, err error) error {
	if errors.Is(context.Cause(ctx), errWaitOver) {
		return c.refusal(context.WithoutCancel(ctx), k, true, c.now().Sub(start))
	}
	return fmt.Errorf("acquire %q: %w", k, err)
}

// refusal reads who holds k (a read, no write) for a refused caller.
func (c *Coordinator) refusal(ctx context.Context, k keyspace.Key, waited bool, wait time.Duration) error {
	first, err := c.firstContender(ctx, k)
	if err != nil {
		return unavailable(fmt.Sprintf("acquire %q", k), err)
	}
	return heldFrom(k, first, waited, wait)
}

// heldFrom is the refusal naming first, which is nil when the lock was
// found free (a wait that ran out just as its holder left).
func heldFrom(k keyspace.Key, first *lockstore.Contender, waited bool, wait time.Duration) error {
	he := &HeldError{Key: k, Waited: waited, Wait: wait.Round(time.Millisecond)}
	if first != nil {
		he.Holder, he.Fence = first.Holder, first.Create
	}
	return he
}

func grantOf(e *entry, h *held) Grant {
	return Grant{Key: e.key, Owner: h.owner, Fence: h.fence, AcquiredAt: h.acquiredAt, ExpiresAt: h.expiresAt, TTL: h.ttl, MaxHoldAt: h.capAt, h: h}
}
