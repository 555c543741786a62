package coordinator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/lockstore"
)

// Shared claims (readers of a read/write lock, units of a semaphore) stand
// in the same line as the mutex's contenders, but a sidecar may hold one
// lock several times over: each owner's claim has an entry of its own
// (slotName), with a contender key of its own (keyspace.Layout.UnitKey)
// and so a fence of its own. Whether it holds the lock is keyspace.Holders
// applied to the line ahead of it, which its try or its join reads in the
// same etcd transaction that writes its key.

// slot is what a shared claim's entry has more than the key's entry.
type slot struct {
	name  string         // its name in Coordinator.locks (slotName)
	claim keyspace.Claim // shared: a reader's or a semaphore's
	tag   uint32         // the tag of its contender key (UnitKey)
}

// nameOf is e's name in Coordinator.locks.
func nameOf(e *entry) string {
	if e.slot != nil {
		return e.slot.name
	}
	return e.key.String()
}

// claimOf is e's claim.
func claimOf(e *entry) keyspace.Claim {
	if e.slot != nil {
		return e.slot.claim
	}
	return keyspace.Claim{}
}

// slotName is the name of owner's entry for a shared claim of k; an
// exclusive claim's entry is named k, shared by every local owner.
func slotName(k keyspace.Key, owner string) string { return k.String() + "\x00" + owner }

// try is a try of a shared claim, lined up for the turn of its owner's
// slot as d.ch: nil when it had the turn at once, else the same owner's
// other call is in flight, and its outcome is this one's answer too.
func (e sharedLine) try(ctx context.Context, req AcquireRequest, d decision, _ *bool) (Grant, error) {
	c := e.co
	wctx, cancel := c.cfg.etcdCtx(ctx)
	err := e.awaitTurn(wctx, d.ch, false)
	cancel()
	if err != nil {
		c.mu.Lock()
		d = e.decideLocked(req, nil, false)
		c.unlock()
		if d = e.settle(ctx, req, d, false); d.answered {
			return d.g, d.err
		}
		return Grant{}, fmt.Errorf("acquire %q: %w: another acquire by %s is in flight; retry", req.Key, ErrUnavailable, req.Owner)
	}
	return e.tryIn(ctx, req)
}

// maxTryIn bounds the transactions of one try of a shared claim: each
// that fails found a contender that joined the line since the last read.
const maxTryIn = 4

// tryIn is attempt for a shared claim; the caller has the turn. A lock seen
// full is read first, so a refusal of a full lock costs a read and no
// write; a transaction that finds newcomers in line reads the line in the
// same round trip.
func (e sharedLine) tryIn(ctx context.Context, req AcquireRequest) (Grant, error) {
	c := e.co
	op := fmt.Sprintf("acquire %q", req.Key)
	sess, err := c.sessions.current(ctx)
	if err != nil {
		e.leaveTurn()
		return Grant{}, fmt.Errorf("%s: %w", op, err)
	}
	if err := c.floor.rewound(op); err != nil {
		e.leaveTurn()
		return Grant{}, err
	}
	key, pfx := c.layout.UnitKey(req.Key, int64(sess.ID()), e.slot.tag), c.layout.LockPrefix(req.Key)
	now := c.now()
	rec := c.cfg.recordFor(req, now)

	readFirst := c.elsewhere.has(req.Key.String())
	id := sess.LeaseFor(int(c.load.Load()))
	var seen int64
	if readFirst {
		line, err := c.reads.lineOf(ctx, req.Key)
		if err != nil {
			e.leaveTurn()
			return Grant{}, unavailable(op, err)
		}
		if err := e.judge(req, line); err != nil {
			e.leaveTurn()
			return Grant{}, err
		}
		seen = lastCreated(line)
	}
	for range maxTryIn {
		out, err := c.store.shared.TryIn(pfx, lockstore.Put{Key: key, Lease: id, Record: rec, Gate: c.layout.Delay(req.Key)}, seen)
		if errors.Is(err, lockstore.ErrLeaseGone) {
			c.sessions.sessions.Gone(sess) // the next call goes on the next session
		}
		if err != nil {
			e.retire(key, 0, sess) // the put may have committed
			return Grant{}, unavailable(op, err)
		}
		if out.OK {
			return e.grant(req, sess, id, key, out.Rev, rec)
		}
		if err := e.judge(req, out.Line); err != nil {
			e.leaveTurn()
			return Grant{}, err
		}
		if out.Gate != nil {
			// Room in line, but a lost holder's lock delay holds it back.
			wait, m, err := c.delay.heldBack(req.Key, out.Gate)
			if err != nil {
				e.leaveTurn()
				return Grant{}, unavailable(op, err)
			}
			if wait > 0 {
				e.leaveTurn()
				return Grant{}, fmt.Errorf("%s: %w", op, &DelayedError{Key: req.Key, Mark: m, Until: m.LostAt.Add(m.Delay)})
			}
		}
		seen = lastCreated(out.Line)
	}
	e.leaveTurn()
	return Grant{}, fmt.Errorf("%s: %w: contenders kept joining the line while trying; retry, or wait", op, ErrUnavailable)
}

// sharedLine is the line of a claim that may hold beside others (a
// reader, a semaphore's units): its owner's slot (below, and
// shared_wait.go).
type sharedLine struct{ *entry }

func (e sharedLine) stepLocked() decision { return decision{ch: e.lineUpLocked(queued{})} }

// judge returns nil when req's claim would hold the lock behind line, and
// else why not: the claims disagree, or it is held, which the next try
// reads first.
func (e sharedLine) judge(req AcquireRequest, line []lockstore.Contender) error {
	c := e.co
	if err := agree(req, line); err != nil {
		return err
	}
	if fits(line, req.Claim) {
		return nil
	}
	c.elsewhere.add(req.Key.String())
	return sharedHeld(req.Key, line, false, 0)
}

// sharedHeld is the refusal of a caller of a shared lock (a semaphore,
// readers and writers), naming every holder of line.
func sharedHeld(k keyspace.Key, line []lockstore.Contender, waited bool, wait time.Duration) error {
	he := &HeldError{Key: k, Waited: waited, Wait: wait.Round(time.Millisecond)}
	first := firstOf(line)
	if first != nil {
		he.Holder, he.Fence = first.Holder, first.Create
	}
	if first != nil && !first.Holder.Foreign && !keyspace.ClaimOf(first.Holder).IsExclusive() {
		for _, ct := range line[:holdersOf(line)] {
			he.Holders = append(he.Holders, Holding{Holder: ct.Holder, Fence: ct.Create})
		}
	}
	return he
}

// agree checks req's claim against the one in force on line.
func agree(req AcquireRequest, line []lockstore.Contender) error {
	for _, ct := range line {
		if ct.Holder.Foreign {
			continue
		}
		if !ct.Holder.Agrees(req.Claim) {
			return fmt.Errorf("acquire %q: %w", req.Key, &MismatchError{Key: req.Key, Asked: req.Claim, InForce: ct.Holder.Claim, Holder: ct.Holder, Fence: ct.Create})
		}
		return nil
	}
	return nil
}

// fits reports whether a contender claiming cl, behind line, holds the
// lock.
func fits(line []lockstore.Contender, cl keyspace.Claim) bool {
	claims := append(claimsOf(line), cl)
	return keyspace.Holders(claims) == len(claims)
}

// holdersOf returns how many contenders at the front of line, ordered by
// create revision, hold the lock.
func holdersOf(line []lockstore.Contender) int { return keyspace.Holders(claimsOf(line)) }

func claimsOf(line []lockstore.Contender) []keyspace.Claim {
	claims := make([]keyspace.Claim, len(line), len(line)+1)
	for i, ct := range line {
		claims[i] = keyspace.ClaimOf(ct.Holder)
	}
	return claims
}

func firstOf(line []lockstore.Contender) *lockstore.Contender {
	if len(line) == 0 {
		return nil
	}
	return &line[0]
}

func lastCreated(line []lockstore.Contender) int64 {
	if len(line) == 0 {
		return 0
	}
	return line[len(line)-1].Create
}

func sortLine(cs []lockstore.Contender) {
	slices.SortFunc(cs, func(a, b lockstore.Contender) int { return cmp.Compare(a.Create, b.Create) })
}
