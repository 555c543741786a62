package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/lockstore"
)

// Acquire grants req.Key to req.Owner, or tells who holds it. A try (Wait
// 0) costs one etcd transaction, granted or refused, and leaves no key
// behind when refused. A wait queues in create-revision order across
// sidecars and deletes its contender key when it gives up.
func (c *Coordinator) Acquire(ctx context.Context, req AcquireRequest) (Grant, error) {
	if req.Once != nil {
		return c.acquireOnce(ctx, req)
	}
	return c.acquire(ctx, req)
}

func (c *Coordinator) acquire(ctx context.Context, req AcquireRequest) (g Grant, err error) {
	if err := c.cfg.checkAcquire(&req); err != nil {
		return Grant{}, err
	}
	start := c.now()
	if req.Wait > 0 && req.Wait != WaitForever {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, req.Wait, errWaitOver)
		defer cancel()
	}
	if err := c.guard.within(ctx, req); err != nil {
		return Grant{}, fmt.Errorf("acquire %q: %w", req.Key, err)
	}
	defer func() { c.obs.acquired(req, c.now().Sub(start), err) }()

	c.mu.Lock()
	e, err := c.enterLocked(req)
	if err != nil {
		c.unlock()
		return Grant{}, err
	}
	ref := true // the caller's reference to e, which a grant or a try's end may take over
	defer func() {
		if ref && (err != nil || g.Repeated) {
			e.unref() // else a grant took the caller's reference for its holder
		}
	}()
	d := e.decideLocked(req, nil, true)
	c.unlock()
	switch d = e.settle(ctx, req, d, true); {
	case d.answered:
		return d.g, d.err
	case req.Wait > 0:
		return e.waitAdmitted(ctx, req, start, d.ch)
	}
	return e.admission().try(ctx, req, d, &ref)
}

// mutexLine is the line of the claims that hold only alone: the key's
// entry, whose turn its local owners share (below, and wait.go).
type mutexLine struct{ *entry }

func (e mutexLine) stepLocked() decision { return decision{step: e.tryStepLocked()} }

// tryStep is what a try of a lock does next, as tryStepLocked found it
// here: make its transaction (mine: it has the turn, f is its flight), wait
// for a release here to free the turn (await), wait for another caller's
// try in flight (f), or, with none of these, be refused.
type tryStep struct {
	// leaseGone says that the try was refused once for its session's
	// lease, gone in etcd, and is made again on the next session.
	leaseGone bool
	f         *flight
	mine      bool
	await     chan struct{}
	// since is the number of the last try started here when the step was
	// found: a caller shares the refusal only of a try started after its
	// first step, so that no answer predates its question.
	since uint64
	// readFirst says that the lock was last seen held elsewhere (read it
	// before writing); load is how many locks the sidecar has (the lease
	// to put the key on). Both are read with the turn.
	readFirst bool
	load      int
}

// tryStepLocked finds what a try of e does next; the turn it takes comes
// with the flight that the lock's other tries here wait for.
func (e mutexLine) tryStepLocked() tryStep {
	c := e.co
	if e.takeTurn() {
		return e.startTry(&c.elsewhere, int(c.load.Load()))
	}
	if e.retiring || (e.held != nil && e.held.ending != nil) {
		// The lock is being released here: etcd may already show it free.
		return tryStep{await: e.lineUpLocked(queued{}), since: e.flights}
	}
	return tryStep{f: e.inFlight(), since: e.flights}
}

// startTry is the step of a try of e that has the turn, with the locks
// seen held elsewhere and the number of locks of the sidecar. Guarded by
// Coordinator.mu.
func (e *entry) startTry(elsewhere *seenHeld, load int) tryStep {
	e.flights++
	f := &flight{done: make(chan struct{}), seq: e.flights}
	e.trying = f
	return tryStep{f: f, mine: true, readFirst: elsewhere.has(e.key.String()), load: load}
}

// try carries out a try from d.step on: in etcd when the turn is free
// or is being freed by a release here, else it is refused naming the
// holder.
//
// ref is the caller's reference to e: a try of its own that leaves the
// turn (refused, held back, its read of the holder failed) drops it in the
// same hold of the mutex, and sets it false.
func (e mutexLine) try(ctx context.Context, req AcquireRequest, d decision, ref *bool) (Grant, error) {
	c := e.co
	step := d.step
	since := step.since // the caller's question: a refusal older than it does not answer it
	for {
		switch {
		case step.mine:
			return e.tryTracked(ctx, req, step, ref)
		case step.await != nil:
			// Wait for that one request, then try.
			wctx, cancel := c.cfg.etcdCtx(ctx)
			err := e.awaitTurn(wctx, step.await, false)
			cancel()
			c.mu.Lock()
			if err == nil { // the turn was handed over
				step = e.startTry(&c.elsewhere, int(c.load.Load()))
			} else {
				step = tryStep{f: e.inFlight()}
			}
			c.unlock()
			continue
		case step.f == nil:
			// The turn is another local caller's, with no try in flight (a
			// waiter's, queued in etcd or about to be): whoever holds the
			// lock, it is not this caller.
			return Grant{}, c.reads.refusal(ctx, req.Key, false, 0)
		}
		// Another caller of this sidecar is trying the lock in etcd: its
		// outcome answers this caller, naming the holder, if it began after
		// this caller asked (a refusal read now could find nobody, the try
		// not committed yet); else this caller tries again. The wait needs
		// no bound of its own: each etcd call of that try has one.
		select {
		case <-step.f.done:
		case <-ctx.Done():
			return Grant{}, c.reads.refusal(ctx, req.Key, false, 0)
		}
		if step.f.shared() && step.f.seq > since {
			return Grant{}, step.f.err // refused as that try, begun after the question, was
		}
		c.mu.Lock()
		d := e.decideLocked(req, nil, true)
		c.unlock()
		if d = e.settle(ctx, req, d, true); d.answered {
			return d.g, d.err
		}
		step = d.step
	}
}

// tryTracked is attempt, the caller having the turn and step's flight, which
// the lock's other tries here wait for until it is done. A try that ends
// with the turn still its own leaves it, in one hold of the mutex with
// the drop of the caller's reference (ref); a refusal by a holder
// elsewhere is made after that (it may read the lock's line), and the
// flight ends last, the turn free.
func (e mutexLine) tryTracked(ctx context.Context, req AcquireRequest, step tryStep, ref *bool) (Grant, error) {
	c := e.co
	var g Grant
	end := tryEnd{exit: leaveTurn}
	err := c.floor.rewound(fmt.Sprintf("acquire %q", req.Key))
	if err == nil {
		g, end, err = e.attempt(ctx, req, step)
	}
	if end.exit != turnDone {
		if end.exit == heldElsewhere {
			c.elsewhere.add(req.Key.String())
		}
		c.mu.Lock()
		if e.trying == step.f {
			e.trying = nil // over: who asks now tries anew, not behind it
		}
		e.passTurnLocked()
		e.unrefLocked()
		*ref = false
		c.unlock()
		if end.exit == heldElsewhere {
			err = c.reads.refusedBy(ctx, req.Key, end.first)
		}
	}
	step.f.err = err
	close(step.f.done)
	return g, err
}

// tryEnd is what a try leaves to do as it ends: with the lock's turn
// (exit), and for a refusal by a holder elsewhere (first), the refusal to
// make once the turn is free.
type tryEnd struct {
	exit  tryExit
	first *lockstore.Contender
}

// tryExit is what a try leaves to do with the lock's turn as it ends.
type tryExit uint8

const (
	turnDone      tryExit = iota // nothing: a holder keeps it, or a delete of the key passes it on
	leaveTurn                    // pass it on
	heldElsewhere                // pass it on, the lock seen held by another sidecar
)

// flight is a try of a lock in flight in etcd, whose outcome the other
// tries of the lock in this sidecar wait for. Those that began before it
// share its refusal; the others try again, behind or in the next flight.
type flight struct {
	done chan struct{} // closed once err is set
	err  error         // its refusal; nil when it was granted
	seq  uint64        // its number among the lock's tries here (entry.flights)
}

// inFlight returns the try of e in flight here, if any. Guarded by
// Coordinator.mu.
func (e *entry) inFlight() *flight {
	if f := e.trying; f != nil {
		select {
		case <-f.done:
			e.trying = nil
		default:
			return f
		}
	}
	return nil
}

// shared reports whether the try's outcome is every other try's too: a
// refusal by a holder elsewhere (held, held back, a semaphore), or etcd
// out of reach; not a grant (the holder is here: it refuses them itself)
// nor its caller hanging up.
func (f *flight) shared() bool {
	err := f.err
	return err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) &&
		(errors.Is(err, ErrHeld) || errors.Is(err, ErrLimitMismatch) || errors.Is(err, ErrUnavailable))
}

// attempt makes one try in one etcd transaction; the caller has the turn.
// It says what is left to do as it ends (tryEnd).
func (e mutexLine) attempt(ctx context.Context, req AcquireRequest, step tryStep) (Grant, tryEnd, error) {
	c := e.co
	sess, err := c.sessions.current(ctx)
	if err != nil {
		return Grant{}, tryEnd{exit: leaveTurn}, fmt.Errorf("acquire %q: %w", req.Key, err)
	}
	key, pfx := c.delay.contenderKey(req, sess), c.layout.LockPrefix(req.Key)
	now := c.now()
	rec := c.cfg.recordFor(req, now)

	// A lock last seen held elsewhere is read first: a refusal is then a
	// linearizable read, with no raft entry (a transaction whose compare
	// fails still costs one, and an fsync, when it has a write branch).
	id := sess.LeaseFor(step.load)
	if step.readFirst {
		first, err := c.reads.firstNow(ctx, req.Key)
		if err != nil {
			return Grant{}, tryEnd{exit: leaveTurn}, unavailable(fmt.Sprintf("acquire %q", req.Key), err)
		}
		if first != nil {
			return Grant{}, tryEnd{exit: heldElsewhere, first: first}, nil
		}
		c.elsewhere.forget(req.Key.String()) // its delete went unseen
	}

	// The outcome must not depend on the caller hanging up mid-call: the
	// store carries out a write whatever the caller does. A free lock held
	// back by a lost holder's lock delay is tried again once its marker is
	// found past its delay.
	put := lockstore.Put{Key: key, Lease: id, Record: rec, Gate: c.layout.Delay(req.Key)}
	for range 2 {
		out, err := c.store.lines.Try(pfx, put)
		if errors.Is(err, lockstore.ErrLeaseGone) && !step.leaseGone {
			// The session's lease went before the session heard (revoked,
			// or expired): end it now, and try once on the next.
			c.sessions.sessions.Gone(sess)
			step.leaseGone = true
			return e.attempt(ctx, req, step)
		}
		if err != nil {
			e.retire(key, 0, sess) // the put may have committed
			return Grant{}, tryEnd{}, unavailable(fmt.Sprintf("acquire %q", req.Key), err)
		}
		if out.OK {
			if err := e.aboveFloor(req, key, out.Rev, sess); err != nil {
				return Grant{}, tryEnd{}, err
			}
			if err := c.delay.mark(req, key, out.Rev); err != nil {
				e.retire(key, out.Rev, sess)
				return Grant{}, tryEnd{}, err
			}
			g, err := e.grant(req, sess, id, key, out.Rev, rec)
			return g, tryEnd{}, err
		}
		if out.First == nil && out.Gate != nil {
			wait, m, err := c.delay.heldBack(req.Key, out.Gate)
			if err != nil {
				return Grant{}, tryEnd{exit: leaveTurn}, unavailable(fmt.Sprintf("acquire %q", req.Key), err)
			}
			if wait > 0 {
				return Grant{}, tryEnd{exit: leaveTurn}, fmt.Errorf("acquire %q: %w", req.Key, &DelayedError{Key: req.Key, Mark: m, Until: m.LostAt.Add(m.Delay)})
			}
			continue
		}
		return Grant{}, tryEnd{exit: heldElsewhere, first: out.First}, nil
	}
	return Grant{}, tryEnd{exit: leaveTurn}, fmt.Errorf("acquire %q: %w: the lock's lock-delay marker keeps changing; retry", req.Key, ErrUnavailable)
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

// grant records a lock granted in etcd; the caller has the turn, which the
// holder keeps until the lock ends, and a reference to e (Acquire's), which
// the holder takes over when it grants. rec is the grant's record: for a try,
// the value its transaction wrote; for a waiter, whose key still holds the
// record it queued with, what that record becomes.
func (e *entry) grant(req AcquireRequest, sess lockstore.Session, id lockstore.LeaseID, key string, fence int64, rec keyspace.Holder) (Grant, error) {
	c := e.co
	if err := e.aboveFloor(req, key, fence, sess); err != nil {
		return Grant{}, err
	}
	c.mu.Lock()
	if c.draining.Load() && !c.closed.Load() && lockstore.Alive(sess) {
		// The sidecar is about to shut down: its key is let go now, so
		// that the waiters behind it elsewhere need not wait for that.
		c.unlock()
		e.retire(key, fence, sess)
		return Grant{}, fmt.Errorf("acquire %q: %w: shutting down", req.Key, ErrUnavailable)
	}
	defer c.unlock()
	if c.closed.Load() || !lockstore.Alive(sess) {
		// The lease is being revoked or is gone: the key goes with it.
		e.passTurnLocked()
		return Grant{}, fmt.Errorf("acquire %q: %w: the etcd session ended during the grant", req.Key, ErrUnavailable)
	}
	h := &held{
		owner: req.Owner, entry: e, fence: fence, etcdKey: key, sess: sess, lease: id, hold: req.Hold,
		acquiredAt: rec.AcquiredAt, expiresAt: rec.ExpiresAt, ttl: req.TTL,
	}
	if req.MaxHold > 0 {
		h.moreOf().capAt = rec.AcquiredAt.Add(req.MaxHold)
	}
	if req.Value != "" {
		h.moreOf().value = req.Value
	}
	h.holdLocked(req.TTL, req.Hold) // the holder takes the caller's reference to e
	e.trying = nil                  // the holder answers the lock's tries here now
	e.pid = req.Caller
	c.ended.forget(req.Key, req.Owner)
	// A waiter's record, written when it queued, gets the grant time
	// recordDelay from now unless the lock has moved on by then.
	h.mod = fence
	e.publishLaterLocked()
	c.log.Info("lock granted", "lock", req.Key.String(), "owner", req.Owner, "fence", fence, "expiresAt", h.expiresAt)
	g := grantOf(e, h)
	g.LockDelay = req.LockDelay // its holder's to know (ValidFor); the lock keeps it in its key's name
	return g, nil
}
