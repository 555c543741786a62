package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/lockstore"
)

// Released describes a lock its owner released.
type Released struct {
	Fence   int64
	HeldFor time.Duration
}

// Release ends owner's lock of k. The delete compares the key's create
// revision with the fence, so it never removes a newer lock (etcd #22082).
func (c *Coordinator) Release(ctx context.Context, k keyspace.Key, owner string) (Released, error) {
	return c.release(ctx, k, owner, true)
}

// Abandon ends owner's lock of k for a caller that went away without
// releasing it (a hold stream whose caller hung up): its key is deleted,
// but the lock delay it was granted with holds the lock back from everyone,
// as after a loss, since whatever the caller started may still be running.
// Without a lock delay it is Release.
func (c *Coordinator) Abandon(ctx context.Context, k keyspace.Key, owner string) (Released, error) {
	return c.release(ctx, k, owner, false)
}

// release ends owner's lock of k; clean deletes its lock-delay marker with
// it, so that the next caller is not held back.
func (c *Coordinator) release(ctx context.Context, k keyspace.Key, owner string, clean bool) (Released, error) {
	op := fmt.Sprintf("release %q", k)
	e, h, err := c.ownedBy(ctx, k, owner)
	if err != nil {
		return Released{}, fmt.Errorf("%s: %w", op, err)
	}
	var out lockstore.Outcome
	marker := h.markerOf()
	if marker != "" && clean {
		out, err = c.store.markers.DeleteWith(h.etcdKey, h.fence, marker) // a clean release: no lock delay
	} else {
		out, err = c.store.lines.Delete(h.etcdKey, h.fence)
	}

	c.mu.Lock()
	defer c.unlock()
	defer h.settleLocked()
	if err != nil {
		return Released{}, unavailable(op, err)
	}
	if e.held != h {
		if lost := c.ended.lost(c.now(), k, owner); lost != nil {
			return Released{}, fmt.Errorf("%s: %w", op, lost)
		}
		return Released{}, fmt.Errorf("%s: %w", op, ErrNotHeld)
	}
	if !out.OK {
		h.loseLocked(goneReason(h.sess))
		e.passTurnLocked()
		return Released{}, fmt.Errorf("%s: %w", op, c.ended.lost(c.now(), k, owner))
	}
	h.endLocked()
	e.passTurnLocked()
	heldFor := c.now().Sub(h.acquiredAt)
	if marker != "" && !clean {
		c.log.Warn("lock let go without its release: held back by its lock delay", "lock", k.String(), "owner", owner, "fence", h.fence, "heldFor", heldFor)
	} else {
		c.log.Info("lock released", "lock", k.String(), "owner", owner, "fence", h.fence, "heldFor", heldFor)
	}
	return Released{Fence: h.fence, HeldFor: heldFor}, nil
}

// Extend moves owner's deadline of k to now+ttl (ttl 0: the default TTL),
// never past the lock's max hold; ttl becomes the lock's window.
func (c *Coordinator) Extend(ctx context.Context, k keyspace.Key, owner string, ttl time.Duration) (Grant, error) {
	ttl, err := c.cfg.checkTTL(ttl)
	if err != nil {
		return Grant{}, fmt.Errorf("extend %q: %w", k, err)
	}
	return c.change(ctx, k, owner, change{op: fmt.Sprintf("extend %q", k), ttl: ttl, level: slog.LevelInfo})
}

// renewDue returns when g's lock should next be renewed to keep it: once a
// third of its window has passed since its deadline was last set, so that
// two renewals can fail before it expires. ok is false when no renewal can
// move the deadline any more (it is the lock's max hold).
func renewDue(g Grant) (at time.Time, ok bool) {
	if !g.MaxHoldAt.IsZero() && !g.ExpiresAt.Before(g.MaxHoldAt) {
		return time.Time{}, false
	}
	return g.ExpiresAt.Add(-2 * g.TTL / 3), true
}

// change is a change of a held lock written into its key's record: a new
// deadline (an extend, a hold's renewal) or, for an election's leader, a
// new value (a proclaim).
type change struct {
	op    string
	ttl   time.Duration // the new window: the deadline moves to now+ttl; 0 keeps it
	value *string       // the new value; nil keeps it
	level slog.Level    // of its log line
}

// change writes ch into owner's lock of k. The write compares the key's
// create revision: a lock lost meanwhile is never written to, and its
// owner hears why.
func (c *Coordinator) change(ctx context.Context, k keyspace.Key, owner string, ch change) (Grant, error) {
	e, h, err := c.ownedBy(ctx, k, owner)
	if err != nil {
		return Grant{}, fmt.Errorf("%s: %w", ch.op, err)
	}
	c.mu.Lock()
	rec := h.recordOf()
	exp := h.expiresAt
	if ch.ttl > 0 {
		exp = c.now().Add(ch.ttl)
		if capAt := h.maxHoldAt(); !capAt.IsZero() && exp.After(capAt) {
			exp = capAt
		}
	}
	rec.ExpiresAt = exp.UTC()
	if ch.value != nil {
		rec.Value = *ch.value
	}
	rec.Queued = int(e.queued.Load())
	c.unlock()
	out, err := c.store.lines.Update(lockstore.Put{Key: h.etcdKey, Lease: h.lease, Record: rec}, h.fence, 0)
	if errors.Is(err, ErrNoSpace) && ch.value == nil {
		return h.extendHere(ctx, k, ch.op, exp, ch.ttl, ch.level, err)
	}

	c.mu.Lock()
	defer c.unlock()
	h.settleLocked()
	if err != nil {
		refused := errors.Is(err, ErrNoSpace) || errors.Is(err, ErrPermissionDenied) || errors.Is(err, ErrCorrupt) || errors.Is(err, lockstore.ErrLeaseGone)
		if ch.value != nil && e.held == h && !refused {
			// Not refused: the value may be in etcd. The lock's next write
			// (a renewal) carries it, rather than undo it with the one
			// before.
			h.moreOf().value = *ch.value
			return Grant{}, unavailable(ch.op+" (its outcome is unknown: the leader's next renewal writes the value asked for)", err)
		}
		return Grant{}, unavailable(ch.op, err)
	}
	if e.held != h {
		if lost := c.ended.lost(c.now(), k, owner); lost != nil {
			return Grant{}, fmt.Errorf("%s: %w", ch.op, lost)
		}
		return Grant{}, fmt.Errorf("%s: %w", ch.op, ErrNotHeld)
	}
	if !out.OK {
		h.loseLocked(goneReason(h.sess))
		e.passTurnLocked()
		return Grant{}, fmt.Errorf("%s: %w", ch.op, c.ended.lost(c.now(), k, owner))
	}
	// The lock as etcd now has it, before its record is compared with it.
	if ch.value != nil {
		h.moreOf().value = *ch.value
	}
	if ch.ttl > 0 {
		h.expiresAt, h.ttl = rec.ExpiresAt, ch.ttl
	}
	e.wroteLocked(h.etcdKey, h.fence, out.Rev, rec)
	h.goneAfterLocked(out.Rev)
	if ch.ttl > 0 {
		c.deadlines.arm(h, h.expiresAt.Sub(c.now()))
		h.changedLocked(false)
		c.log.Log(ctx, ch.level, "lock extended", "lock", k.String(), "owner", owner, "fence", h.fence, "expiresAt", h.expiresAt)
	} else {
		c.log.Log(ctx, ch.level, "leader proclaimed", "election", k.String(), "owner", owner, "fence", h.fence, "revision", out.Rev)
	}
	return grantOf(e, h), nil
}

// expire ends h at its deadline and deletes its key.
func (h *held) expire() {
	c := h.entry.co
	e := h.entry
	c.mu.Lock()
	if e.held != h {
		c.unlock()
		return
	}
	if h.ending != nil { // a release or extend is in flight: look again soon
		c.deadlines.arm(h, 100*time.Millisecond)
		c.unlock()
		return
	}
	if d := h.expiresAt.Sub(c.now()); d > 0 { // extended meanwhile
		c.deadlines.arm(h, d)
		c.unlock()
		return
	}
	reason, what := Expired, "lock expired after %v"
	if capAt := h.maxHoldAt(); !capAt.IsZero() && !h.expiresAt.Before(capAt) {
		reason, what = MaxHoldReached, "lock reached its max hold of %v"
	}
	lost := &LostError{Key: e.key, Owner: h.owner, Fence: h.fence, Reason: reason, At: c.now(), HeldFor: h.expiresAt.Sub(h.acquiredAt)}
	h.endOf().lost = lost
	h.endLocked()
	c.ended.remember(c.now(), e.key, endedLock{owner: h.owner, fence: h.fence, reason: reason, at: lost.At, expiresAt: h.expiresAt})
	c.log.Warn(fmt.Sprintf(what, h.expiresAt.Sub(h.acquiredAt).Round(time.Millisecond)),
		"lock", e.key.String(), "owner", h.owner, "fence", h.fence, "heldFor", c.now().Sub(h.acquiredAt))
	c.unlock()
	e.retire(h.etcdKey, h.fence, h.sess)
}

// retire deletes a contender key of ours, then passes the turn. The turn is
// kept until the key is gone, so the next local caller never finds it. rev
// is the key's create revision, or 0 when unknown (a put whose outcome was
// lost). On failure it retries in the background until the key is deleted
// or its session has ended (taking the key with it).
func (e *entry) retire(key string, rev int64, sess lockstore.Session) {
	c := e.co
	c.mu.Lock()
	e.retiring = true
	c.unlock()
	if _, err := c.store.lines.Delete(key, rev); err == nil {
		e.leaveTurn()
		return
	}
	go func() {
		defer e.leaveTurn()
		retry := retryBackoff(2 * time.Second)
		for {
			select {
			case <-sess.Done():
				return
			case <-c.stop.Done():
				return
			case <-c.clock.After(retry.NextBackOff()):
			}
			_, err := c.store.lines.Delete(key, rev)
			if err == nil {
				return
			}
			c.log.Warn("cannot delete contender key; retrying", "key", key, "err", err)
		}
	}()
}

// onDelete is called by the watch for every contender key deleted in the
// scope. A holder key of ours deleted by someone else means a lost lock.
// It must not block the watch: telling why the key went takes a request.
//
// A holder's key is named after its session, so a delete of that name is
// of the holder's key if it came after the key was created (revision =
// fence); an earlier key of the same name was deleted before.
func (c *Coordinator) onDelete(k keyspace.Key, key string, modRev int64) {
	c.elsewhere.forget(k.String())
	if !c.heldKeys.deleted(key, modRev) {
		return // not a key held here: the engine's mutex is not taken
	}
	c.mu.Lock()
	e := c.locks[k.String()]
	if u := c.units[key]; u != nil {
		e = u
	}
	if e == nil || e.held == nil || e.held.etcdKey != key || modRev <= e.held.fence {
		// Another key of the index's slot, or this one about to be granted:
		// its grant, under the mutex after this, looks for the delete.
		c.heldKeys.missed.note(key, modRev)
		c.unlock()
		return
	}
	h := e.held
	if h.ending != nil {
		// A release's own delete, or someone else's as an extend's write
		// lands: the change, as it ends, tells which (goneAfterLocked).
		h.endOf().goneAt = max(h.endOf().goneAt, modRev)
		c.unlock()
		return
	}
	c.unlock()
	go h.lostByDelete()
}

// lostByDelete marks h lost after its key was deleted: lease_lost when its
// lease is gone too, force_released otherwise.
func (h *held) lostByDelete() {
	c := h.entry.co
	reason := ForceReleased
	ctx, cancel := c.cfg.etcdCtx(c.stop)
	gone, err := c.store.leases.LeaseGone(ctx, h.lease)
	cancel()
	if !lockstore.Alive(h.sess) || (err == nil && gone) {
		reason = LeaseLost
	}
	c.mu.Lock()
	defer c.unlock()
	if e := h.entry; e.held == h && h.ending == nil {
		h.loseLocked(reason)
		e.passTurnLocked()
	}
}

// verify reads whether h's key is still in etcd, and loses h if it is not.
func (h *held) verify(ctx context.Context) error {
	ok, err := h.keyHeld(ctx)
	if err != nil {
		return unavailable("read holder", err)
	}
	if !ok {
		h.lostByDelete()
	}
	return nil
}

// keyHeld reads whether h's key is still in etcd, created at its fence.
func (h *held) keyHeld(ctx context.Context) (bool, error) {
	c := h.entry.co
	tctx, cancel := c.cfg.etcdCtx(ctx)
	defer cancel()
	return c.store.lines.Holds(tctx, h.etcdKey, h.fence)
}

// checkHeld verifies, once lock k's watch (the zero k: the scope's) is
// established from revision from, that every local holder key of k older
// than that is still in etcd, and loses those that are not. A key created
// at from-1 or later cannot have been deleted before the watch delivers
// deletes.
func (c *Coordinator) checkHeld(k keyspace.Key, from int64) {
	if k.IsZero() {
		c.elsewhere.forgetAll() // deletes may have been missed
	} else {
		c.elsewhere.forget(k.String())
	}
	if c.heldKeys.len() == 0 {
		return // nothing held here: the engine's mutex is not taken
	}
	c.mu.Lock()

	var hs []*held
	older := func(e *entry) {
		if e != nil && e.held != nil && e.held.fence < from-1 {
			hs = append(hs, e.held)
		}
	}
	if k.IsZero() {
		for _, e := range c.locks {
			older(e)
		}
	} else {
		// The lock's entry, and its shared claims held here: not every
		// lock's, which a sidecar holding many would pay at each watch.
		older(c.locks[k.String()])
		for _, u := range c.units {
			if u.key == k {
				older(u)
			}
		}
	}
	c.unlock()
	for _, h := range hs {
		if ok, err := h.keyHeld(context.Background()); err == nil && !ok {
			h.lostByDelete() // else still held, or unknown
		}
	}
}

func goneReason(s lockstore.Session) LostReason {
	if !lockstore.Alive(s) {
		return LeaseLost
	}
	return ForceReleased
}
