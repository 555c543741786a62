package coordinator

import (
	"context"
	"fmt"
	"time"

	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/lockstore"
)

// wait is wait for a shared claim: it joins the line, learning the
// claims ahead in the same transaction, and waits until they leave room
// for it. The caller has the turn.
func (e sharedLine) wait(ctx context.Context, req AcquireRequest, start time.Time, w *hearing) (Grant, error) {
	c := e.co
	op := fmt.Sprintf("acquire %q", req.Key)
	p, rec, err := e.placeFor(ctx, req, op, func(sess lockstore.Session) string {
		return c.layout.UnitKey(req.Key, int64(sess.ID()), e.slot.tag)
	})
	if err != nil {
		return Grant{}, err
	}
	sess := p.sess
	p.w = w.of(c.hub, req.Key)
	out, err := c.store.shared.Join(p.lock, lockstore.Put{Key: p.key, Lease: p.lease, Record: rec, Gate: c.layout.Delay(req.Key)})
	if err := e.placed(&p, rec, out, err, op); err != nil {
		return Grant{}, err
	}
	if err := agree(req, out.Line); err != nil {
		e.retire(p.key, p.rev, sess)
		return Grant{}, err
	}
	delayed := out.Gate != nil
	for _, ct := range out.Line {
		delayed = delayed || keyspace.IsDelayContender(ct.Key)
	}
	if fits(out.Line, req.Claim) && !delayed {
		return e.grantPlaced(req, p, rec)
	}
	if err := e.waitRoom(ctx, req, start, p, out.Line); err != nil {
		return Grant{}, err
	}
	if delayed {
		if err := e.gate(ctx, req, start, p); err != nil {
			return Grant{}, err
		}
	}
	if err := e.stillAllowed(ctx, req, p); err != nil {
		return Grant{}, err
	}
	now := c.now()
	rec = c.cfg.recordFor(req, now)
	return e.grantPlaced(req, p, rec)
}

// waitRoom waits until the contenders ahead of p, line as read at p.rev,
// leave room for its claim. It follows their deletes on the watch and
// reads the line again only when the watch may have missed some. When it
// fails, p's key is being deleted or is gone, and the turn passes on.
func (e sharedLine) waitRoom(ctx context.Context, req AcquireRequest, start time.Time, p place, line []lockstore.Contender) error {
	c := e.co
	op := fmt.Sprintf("acquire %q", req.Key)
	readRev := p.rev
	told := -1
	for {
		if req.Position != nil && len(line) != told {
			told = len(line)
			req.Position.set(told)
		}
		rest, covered, mineGone := p.w.pruned(line, p.key, readRev)
		switch {
		case mineGone:
			e.leaveTurn()
			return fmt.Errorf("%s: %w: this sidecar's contender key was deleted while it waited (session lost or force release); retry", op, ErrUnavailable)
		case covered:
			line = rest
		default:
			var mine bool
			var err error
			line, readRev, mine, err = e.lineAhead(ctx, p)
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
			}
		}
		if fits(line, req.Claim) {
			return nil
		}
		select {
		case <-p.w.notify:
		case <-ctx.Done():
			e.retire(p.key, p.rev, p.sess)
			return c.reads.waitFailed(ctx, req.Key, start, ctx.Err())
		case <-p.sess.Done():
			e.leaveTurn() // the key went with the lease
			return fmt.Errorf("%s: %w: the etcd session ended while waiting", op, ErrUnavailable)
		case <-c.stop.Done():
			e.retire(p.key, p.rev, p.sess)
			return fmt.Errorf("%s: %w: shutting down", op, ErrUnavailable)
		}
	}
}

// lineAhead reads the contenders ahead of p, whether p's key is still
// there, and the revision of the read.
func (e sharedLine) lineAhead(ctx context.Context, p place) (line []lockstore.Contender, rev int64, mine bool, err error) {
	c := e.co
	tctx, cancel := c.cfg.etcdCtx(ctx)
	defer cancel()
	return c.store.shared.Line(tctx, p.lock, p.key, p.rev)
}
