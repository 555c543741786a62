package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/lockstore"
)

// errWaitOver is the cause of a wait's context when the wait runs out.
var errWaitOver = errors.New("wait over")

// admitLocked admits req's waiter, when this sidecar has room for one
// more, and lines it up for the lock's turn behind the callers of this
// sidecar (lineUpLocked), telling it its place when it is behind one.
func (e *entry) admitLocked(req AcquireRequest) (chan struct{}, error) {
	c := e.co
	for { // the room taken by a swap: no two callers take the last, whatever mutex each holds
		n := c.waiting.Load()
		if n >= int64(c.cfg.MaxWaiters) {
			return nil, fmt.Errorf("acquire %q: %w: %d callers already wait in this sidecar", req.Key, ErrTooManyWaiters, n)
		}
		if c.waiting.CompareAndSwap(n, n+1) {
			break
		}
	}
	if e.busy && req.Position != nil {
		req.Position.set(len(e.queue) + 1)
	}
	return e.lineUpLocked(waiterOf(req)), nil
}

// waitAdmitted waits for the lock, admitted by admitLocked, which lined it up
// for the turn as ch: in line for the turn, then in etcd. A waiter in line
// for the turn keeps the lock's watch open from now on (whatever it waits
// behind, it must hear of its end); every waiter registers with it when it
// first queues in etcd.
func (e *entry) waitAdmitted(ctx context.Context, req AcquireRequest, start time.Time, ch chan struct{}) (Grant, error) {
	c := e.co
	var w hearing
	if ch != nil {
		c.hub.need(req.Key, 0)
		w.needed = true
	}
	c.obs.Waiting(req.Key.String(), 1)
	if req.Claim.Limit > 0 {
		c.obs.Units(req.Key.String(), req.Claim.Limit, false, req.Claim.Units())
	}
	defer func() {
		c.hub.done(req.Key, w.w, w.needed)
		c.waiting.Add(-1)
		c.obs.Waiting(req.Key.String(), -1)
		if req.Claim.Limit > 0 {
			c.obs.Units(req.Key.String(), req.Claim.Limit, false, -req.Claim.Units())
		}
	}()
	if err := e.awaitTurn(ctx, ch, true); err != nil {
		return Grant{}, c.reads.waitFailed(ctx, req.Key, start, err)
	}
	if ch != nil {
		w.turnAt = c.now()
	}
	return e.waitThrough(ctx, req, start, &w)
}

// hearing is a waiter's registration with the hub, made when it first
// queues in etcd, before any read of its (so that no delete goes unseen),
// and kept through the times it queues again; needed says it kept the
// watch open before that (hub.need).
type hearing struct {
	w      *waiter
	needed bool
	// turnAt is when the waiter got the turn from a caller of this
	// sidecar ahead of it (it ended), if it waited for it.
	turnAt time.Time
}

// of returns the waiter registered for k, registering it the first time.
func (r *hearing) of(h *hub, k keyspace.Key) *waiter {
	if r.w == nil {
		r.w = h.register(k)
	}
	return r.w
}

// turnAgain lines a waiter up for the lock's turn again, and waits for it.
func (e *entry) turnAgain(ctx context.Context, req AcquireRequest, start time.Time, w *hearing) error {
	c := e.co
	c.mu.Lock()
	if e.busy && req.Position != nil {
		req.Position.set(len(e.queue) + 1)
	}
	ch := e.lineUpLocked(waiterOf(req))
	c.unlock()
	if err := e.awaitTurn(ctx, ch, true); err != nil {
		return c.reads.waitFailed(ctx, req.Key, start, err)
	}
	w.turnAt = time.Time{}
	if ch != nil {
		w.turnAt = c.now()
	}
	return nil
}

// waitThrough waits for the lock (the caller has the turn) and rides out
// etcd being out of reach: when a wait fails for want of etcd, or its
// session ends and takes the contender key with it, it queues again on the
// next session (behind whoever queued meanwhile) until the caller's wait
// runs out. Nothing is granted without an etcd commit; a wait that runs
// out while etcd is still unreachable answers unavailable.
func (e *entry) waitThrough(ctx context.Context, req AcquireRequest, start time.Time, w *hearing) (Grant, error) {
	c := e.co
	retry := retryBackoff(time.Second)
	for {
		g, err := e.admission().wait(ctx, req, start, w)
		if err == nil || !errors.Is(err, ErrUnavailable) || ctx.Err() != nil {
			return g, err
		}
		c.log.Debug("waiting through an etcd outage", "lock", req.Key.String(), "owner", req.Owner, "err", err)
		select {
		case <-c.clock.After(retry.NextBackOff()):
		case <-ctx.Done():
			if errors.Is(context.Cause(ctx), errWaitOver) {
				return Grant{}, err // the wait ran out while nothing could be granted: why
			}
			return Grant{}, c.reads.waitFailed(ctx, req.Key, start, ctx.Err())
		case <-c.stop.Done():
			return Grant{}, err
		}
		if w.w == nil && !w.needed { // in line for the turn again: as waitAdmitted
			c.hub.need(req.Key, 0)
			w.needed = true
		}
		if err := e.turnAgain(ctx, req, start, w); err != nil {
			return Grant{}, err
		}
	}
}

// wait queues in etcd behind the contenders created before it, hearing of
// the deletes under the lock through w; the caller has the turn.
func (e mutexLine) wait(ctx context.Context, req AcquireRequest, start time.Time, w *hearing) (Grant, error) {
	c := e.co
	op := fmt.Sprintf("acquire %q", req.Key)
	// The key's name stays that of the session (its first lease), as in
	// concurrency.Mutex, so one session has one contender key per lock
	// whatever lease carries it.
	p, rec, err := e.placeFor(ctx, req, op, func(sess lockstore.Session) string { return c.delay.contenderKey(req, sess) })
	if err != nil {
		return Grant{}, err
	}
	sess := p.sess
	p.w = w.of(c.hub, req.Key)

	// The same write tells the contenders ahead, so a waiter knows its
	// place without a second round trip.
	out, err := c.store.lines.Queue(p.lock, lockstore.Put{Key: p.key, Lease: p.lease, Record: rec, Gate: c.layout.Delay(req.Key)})
	if err := e.placed(&p, rec, out, err, op); err != nil {
		return Grant{}, err
	}
	delayed := mayBeHeldBack(out)
	first := w.turnAt // when the last contender ahead went, here or in etcd
	if len(out.Ahead) > 0 {
		if err := e.waitFirst(ctx, req, start, p, out.Ahead); err != nil {
			return Grant{}, err
		}
		first = c.now()
	}
	if delayed {
		if err := e.gate(ctx, req, start, p); err != nil {
			return Grant{}, err
		}
	}
	if err := e.stillAllowed(ctx, req, p); err != nil {
		return Grant{}, err
	}
	if err := e.aboveFloor(req, p.key, p.rev, sess); err != nil {
		return Grant{}, err
	}
	if err := c.delay.mark(req, p.key, p.rev); err != nil {
		e.retire(p.key, p.rev, sess)
		return Grant{}, err
	}
	if len(out.Ahead) > 0 || delayed {
		// First in line, and the key (so the session) was still there
		// when etcd said so (etcd issue #11456), by a read or by the
		// watch: granted, with no write on the way. The record's grant
		// time and deadline follow off the hand-off's path.
		rec = c.cfg.recordFor(req, c.now())
	}
	g, err := e.grantPlaced(req, p, rec)
	if err == nil && !first.IsZero() {
		c.obs.leaderless(req.Key, c.now().Sub(first))
	}
	return g, err
}

// grantPlaced grants the waiter at p. A delete of its key that the watch
// delivered before the grant is found by the grant (heldIndex); but when
// the watch had a gap since the waiter last looked, a delete may never be
// delivered, and the key is read.
func (e *entry) grantPlaced(req AcquireRequest, p place, rec keyspace.Holder) (Grant, error) {
	g, err := e.grant(req, p.sess, p.lease, p.key, p.rev, rec)
	if err == nil && p.w != nil && p.w.gapSince(p.rev) {
		go func() { _ = g.h.verify(e.co.stop) }()
	}
	return g, err
}

// placeFor makes the place of req's waiter, with the key keyOf names
// for the current session, and the record it queues with; the caller has
// the turn, which passes on when there is no session.
func (e *entry) placeFor(ctx context.Context, req AcquireRequest, op string, keyOf func(lockstore.Session) string) (place, keyspace.Holder, error) {
	c := e.co
	sess, err := c.sessions.current(ctx)
	if err != nil {
		e.leaveTurn()
		return place{}, keyspace.Holder{}, fmt.Errorf("%s: %w", op, err)
	}
	if err := c.floor.rewound(op); err != nil {
		e.leaveTurn()
		return place{}, keyspace.Holder{}, err
	}
	p := place{key: keyOf(sess), lock: c.layout.LockPrefix(req.Key), sess: sess}
	now := c.now()
	rec := c.cfg.recordFor(req, now)
	rec.Queued = int(e.queued.Load())
	p.lease = sess.LeaseFor(int(c.load.Load()))
	p.pid = req.Caller
	return p, rec, nil
}

// placed takes in the outcome of the write that queued p (Queue or Join),
// which wrote rec; on failure p's key is being deleted and the turn
// passes on. On success it notes the key with no mutex (entry.placing):
// the next look at the lock's record under Coordinator.mu (a change of its
// queue, the grant) takes it in.
func (e *entry) placed(p *place, rec keyspace.Holder, out lockstore.Outcome, err error, op string) error {
	c := e.co
	if err != nil {
		e.retire(p.key, 0, p.sess)
		return unavailable(op, err)
	}
	if !out.OK {
		// Only this sidecar writes this key and it has the turn: a key left
		// by an earlier call whose outcome was unknown. Remove it.
		e.retire(p.key, 0, p.sess)
		return fmt.Errorf("%s: %w: a stale contender key of this sidecar was found and is being removed; retry", op, ErrUnavailable)
	}
	p.rev = out.Rev
	e.placing.Store(&contenderRecord{key: p.key, create: p.rev, mod: p.rev, lease: p.lease, wrote: rec, pid: p.pid})
	if e.queued.Load() != int32(rec.Queued) {
		// The queue behind it moved since its record was made: it is
		// written again. (A change from now on finds the key placed: a
		// change counts itself in before it looks.)
		c.mu.Lock()
		e.publishLaterLocked()
		c.unlock()
	}
	return nil
}

// place is a waiter's contender key in etcd.
type place struct {
	key, lock string // the key and its lock's prefix
	rev       int64  // the key's create revision
	lease     lockstore.LeaseID
	sess      lockstore.Session
	w         *waiter // the waiter's view of the deletes under lock
	pid       int32   // its caller's process (AcquireRequest.Caller)
}

// waitFirst waits until p is first in line, ahead (as read at p.rev)
// being the contenders ahead of it, the last created first. When it fails,
// p's key is being deleted or is gone, and the turn passes on.
func (e mutexLine) waitFirst(ctx context.Context, req AcquireRequest, start time.Time, p place, ahead []string) error {
	c := e.co
	op := fmt.Sprintf("acquire %q", req.Key)
	readRev := p.rev
	for {
		if req.Position != nil {
			req.Position.set(len(ahead))
		}
		first, err := e.waitAhead(ctx, req, start, p, ahead, readRev)
		if first || err != nil {
			return err
		}
		var mine bool
		ahead, readRev, mine, err = c.reads.ahead(ctx, p.key, p.lock, p.rev)
		switch {
		case err != nil:
			e.retire(p.key, p.rev, p.sess)
			if isContextErr(ctx, err) {
				return c.reads.waitFailed(ctx, req.Key, start, ctx.Err())
			}
			return unavailable(op, err)
		case !mine:
			e.leaveTurn()
			return fmt.Errorf("%s: %w: this sidecar's contender key was deleted while it waited (session lost or force release); retry", op, ErrUnavailable)
		case len(ahead) == 0:
			return nil
		}
	}
}

// waitAhead follows the deletes of the contenders ahead (read at readRev)
// on the watch until the waiter is first (first) or must read again.
func (e mutexLine) waitAhead(ctx context.Context, req AcquireRequest, start time.Time, p place, ahead []string, readRev int64) (first bool, err error) {
	c := e.co
	op := fmt.Sprintf("acquire %q", req.Key)
	// With a Position, any contender ahead leaving is news; otherwise only
	// the one right ahead matters.
	var anyOf map[string]bool
	if req.Position != nil && len(ahead) > 1 {
		anyOf = make(map[string]bool, len(ahead))
		for _, k := range ahead {
			anyOf[k] = true
		}
	}
	// A short line is followed key by key: once the watch has shown every
	// contender ahead gone, the waiter is first with no read.
	followed := len(ahead) <= maxFollowedAhead
	for {
		switch p.w.look(followed, ahead, p.key, readRev, anyOf) {
		case aheadGone:
			return true, nil
		case readAgain:
			return false, nil
		}
		select {
		case <-p.w.notify:
		case <-ctx.Done():
			e.retire(p.key, p.rev, p.sess)
			return false, c.reads.waitFailed(ctx, req.Key, start, ctx.Err())
		case <-p.sess.Done():
			e.leaveTurn() // the key went with the lease
			return false, fmt.Errorf("%s: %w: the etcd session ended while waiting", op, ErrUnavailable)
		case <-c.stop.Done():
			e.retire(p.key, p.rev, p.sess)
			return false, fmt.Errorf("%s: %w: shutting down", op, ErrUnavailable)
		}
	}
}

// maxFollowedAhead is the longest line ahead of a waiter whose departures
// it follows key by key; behind a longer one it reads again when the
// contender right ahead leaves (each check costs a look-up per key ahead).
const maxFollowedAhead = 64
