package coordinator

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/lockstore"
)

// Lock delay (Chubby's, Consul's): a holder granted with a lock delay
// writes the lock's marker (keyspace.DelayMark, Layout.Delay) before its
// caller hears of the grant, names its contender key so
// (Layout.DelayContenderKey), and deletes the marker with its key when it
// lets go cleanly. Lost any other way, it leaves the marker, and whoever
// is next finds it: a try in the else branch of its transaction, a waiter
// in its queueing transaction or, behind a contender named so, in a read
// once first in line. The first to find it sets when the loss was found,
// and nobody is granted the lock until the delay has passed since then.
// Locks without a delay pay a compare and a one-key read inside
// transactions they make anyway.

// DelayedError tells a caller that the lock is free but held back by the
// lock delay of a holder that was lost.
type DelayedError struct {
	Key   keyspace.Key
	Mark  keyspace.DelayMark
	Until time.Time
}

func (e *DelayedError) Error() string {
	who := e.Mark.Owner
	if e.Mark.Pod != "" {
		who += " (pod " + e.Mark.Pod + ")"
	}
	return fmt.Sprintf("lock %q is held back until %s: its holder %s (fence %d) was lost at %s without releasing it, and asked for a lock delay of %v; try again then",
		e.Key.String(), e.Until.UTC().Format(time.RFC3339Nano), who, e.Mark.Fence, e.Mark.LostAt.UTC().Format(time.RFC3339Nano), e.Mark.Delay)
}

// Is makes errors.Is(err, ErrHeld) true: the caller is refused for now.
func (e *DelayedError) Is(target error) bool { return target == ErrHeld }

// markerOf is the lock-delay marker h deletes when it lets go cleanly; ""
// when it was granted without a lock delay.
func (h *held) markerOf() string {
	c := h.entry.co
	e := h.entry
	if keyspace.IsDelayContender(h.etcdKey) {
		return c.layout.Delay(e.key)
	}
	return ""
}

// lockDelay holds a lock back, after a holder that asked for a lock delay
// was lost, until the delay has passed: its marker, written beside the
// holder's key, outlives the holder's lease.
type lockDelay struct {
	layout  keyspace.Layout
	markers lockstore.Markers
	pod     string // this sidecar's pod, named in the markers
	now     func() time.Time
	log     *slog.Logger
}

// contenderKey is the key a session contends with for req.
func (d *lockDelay) contenderKey(req AcquireRequest, sess lockstore.Session) string {
	if req.LockDelay > 0 {
		return d.layout.DelayContenderKey(req.Key, int64(sess.ID()))
	}
	return d.layout.ContenderKey(req.Key, int64(sess.ID()))
}

// mark writes the lock-delay marker of a holder just granted with a lock
// delay, before its caller hears of the grant.
func (d *lockDelay) mark(req AcquireRequest, key string, fence int64) error {
	if req.LockDelay == 0 {
		return nil
	}
	m := keyspace.DelayMark{Fence: fence, Delay: req.LockDelay, Owner: req.Owner, Pod: d.pod}
	out, err := d.markers.Mark(key, fence, d.layout.Delay(req.Key), m.Encode())
	switch {
	case err != nil:
		return unavailable(fmt.Sprintf("acquire %q: write its lock-delay marker", req.Key), err)
	case !out.OK:
		return fmt.Errorf("acquire %q: %w: the lock was lost as it was granted; retry", req.Key, ErrUnavailable)
	}
	return nil
}

// heldBack reads the marker v of a lost holder: how long k is held back
// still, with the marker; 0 when its delay has passed (the marker is then
// deleted). The first to read it sets when the loss was found.
func (d *lockDelay) heldBack(k keyspace.Key, v []byte) (time.Duration, keyspace.DelayMark, error) {
	marker := d.layout.Delay(k)
	m, err := keyspace.DecodeDelayMark(v)
	if err != nil {
		d.log.Warn("deleting a lock-delay marker that cannot be read", "lock", k.String(), "err", err)
		_, err := d.markers.Swap(marker, string(v), "")
		return 0, m, err
	}
	now := d.now()
	if m.LostAt.IsZero() {
		m.LostAt = now.UTC()
		out, err := d.markers.Swap(marker, string(v), m.Encode())
		if err != nil || !out.OK {
			return time.Millisecond, m, err // changed meanwhile: read again
		}
		v = []byte(m.Encode())
		d.log.Info("lock held back by the lock delay of a holder that was lost", "lock", k.String(), "owner", m.Owner, "fence", m.Fence, "delay", m.Delay)
	}
	if left := m.LostAt.Add(m.Delay).Sub(now); left > 0 {
		return left, m, nil
	}
	_, err = d.markers.Swap(marker, string(v), "")
	return 0, m, err
}

// gate waits out, for a waiter first in line (p), the lock delay of a
// holder lost before it; the caller has the turn. When it fails, p's key
// is being deleted or is gone, and the turn passes on.
func (e *entry) gate(ctx context.Context, req AcquireRequest, start time.Time, p place) error {
	c := e.co
	op := fmt.Sprintf("acquire %q", req.Key)
	for {
		tctx, cancel := c.cfg.etcdCtx(ctx)
		v, found, err := c.store.records.Read(tctx, c.layout.Delay(req.Key))
		cancel()
		if err == nil && !found {
			return nil
		}
		var wait time.Duration
		var m keyspace.DelayMark
		if err == nil {
			wait, m, err = c.delay.heldBack(req.Key, v)
		}
		if err != nil {
			e.retire(p.key, p.rev, p.sess)
			if isContextErr(ctx, err) {
				return c.reads.waitFailed(ctx, req.Key, start, ctx.Err())
			}
			return unavailable(op, err)
		}
		if wait == 0 {
			return nil
		}
		select {
		case <-c.clock.After(wait):
		case <-ctx.Done():
			e.retire(p.key, p.rev, p.sess)
			if m.LostAt.IsZero() {
				return c.reads.waitFailed(ctx, req.Key, start, ctx.Err())
			}
			return fmt.Errorf("%s: %w", op, &DelayedError{Key: req.Key, Mark: m, Until: m.LostAt.Add(m.Delay)})
		case <-p.sess.Done():
			e.leaveTurn()
			return fmt.Errorf("%s: %w: the etcd session ended while waiting", op, ErrUnavailable)
		case <-c.stop.Done():
			e.retire(p.key, p.rev, p.sess)
			return fmt.Errorf("%s: %w: shutting down", op, ErrUnavailable)
		}
	}
}

// mayBeHeldBack reports whether a waiter must read the marker once first
// in line: one was there when it queued, or a contender ahead of it asked
// for a lock delay.
func mayBeHeldBack(out lockstore.Outcome) bool {
	if out.Gate != nil {
		return true
	}
	for _, name := range out.Ahead {
		if keyspace.IsDelayContender(name) {
			return true
		}
	}
	return false
}
