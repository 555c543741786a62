package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Hold is a lock kept for as long as its holder wants it, as client-go's
// leader election keeps its lease in one loop and Consul's Lock hands back
// a channel closed on loss: its deadline is moved on before it comes, it
// tells how it ended, and it is let go when its holder goes. The socket
// API's hold streams are Holds; baton run holds through one.
type Hold struct {
	c       *Coordinator
	mu      sync.Mutex
	g       Grant         // the grant, with its deadline as last renewed
	release chan string   // Release's why, for the keeper
	over    chan struct{} // closed once the hold is over: the lock ended, or was let go
	err     error         // the loss that ended it, if one did
}

// Keep keeps g, a grant of a hold (AcquireRequest.Hold; or any grant that
// Release is to let go), until its lock ends or ctx ends: its deadline is renewed a third of its window after it
// was last set (renewDue), so that two renewals can fail before it
// expires, until its max hold; a renewal that fails for want of etcd is
// tried again every tenth of the window, and the lock ends at its deadline
// (lost, expired) if etcd stays away. When ctx ends first, its holder went
// away without releasing it, which may have left its work running: the
// lock is let go as abandoned (Abandon: its lock delay holds it back from
// everyone, as after a loss), context.Cause(ctx) saying why in the log.
func (c *Coordinator) Keep(ctx context.Context, g Grant) *Hold {
	h := &Hold{c: c, g: g, release: make(chan string, 1), over: make(chan struct{})}
	go h.keep(ctx)
	return h
}

// Release lets the lock go as released (no lock delay): for a holder that
// never started work under it (it never heard of the grant), why saying so
// in the log. It returns once the hold is over.
func (h *Hold) Release(why string) {
	select {
	case h.release <- why:
	default: // released already
	}
	<-h.over
}

// Grant is the hold's grant, its deadline as last renewed.
func (h *Hold) Grant() Grant {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.g
}

// Done is closed once the hold is over: its lock ended (released by its
// owner, or lost), or was let go when the hold's context ended.
func (h *Hold) Done() <-chan struct{} { return h.over }

// Err is, once Done is closed, the *LostError of a lock that ended other
// than by its release; nil for a lock released or let go, and while the
// hold lasts.
func (h *Hold) Err() error {
	select {
	case <-h.over:
		return h.err
	default:
		return nil
	}
}

// keep renews the lock until it ends or ctx ends.
func (h *Hold) keep(ctx context.Context) {
	defer close(h.over)
	g := h.Grant()
	done := g.Done()
	timer := h.c.clock.NewTimer(time.Hour)
	defer timer.Stop()
	schedule := func(retry time.Duration) {
		timer.Stop()
		at, ok := renewDue(h.Grant())
		if !ok {
			return // at its max hold: no renewal moves it
		}
		d := h.c.clock.Until(at)
		if retry > 0 {
			d = retry
		}
		timer.Reset(max(d, 0))
	}
	schedule(0)
	fails := 0
	for {
		select {
		case <-done:
			h.err = g.Err()
			return
		case <-ctx.Done():
			why := "its holder went away without releasing it"
			if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
				why = cause.Error()
			}
			h.letGo(true, why)
			h.err = g.Err()
			return
		case why := <-h.release:
			h.letGo(false, why)
			h.err = g.Err()
			return
		case <-timer.Chan():
			if retry := h.renew(ctx, &fails); retry >= 0 {
				schedule(retry)
			}
		}
	}
}

// renew moves the deadline on and says when to renew next: 0 on the
// schedule, a retry delay after a failure for want of etcd, -1 never (the
// lock is gone: Done tells).
func (h *Hold) renew(ctx context.Context, fails *int) time.Duration {
	g := h.Grant()
	// An extend by the window, which the log shows at debug level only.
	// Its wait for a release or extend in flight is bounded: meanwhile
	// this loop hears neither its caller hang up nor a release.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.c.cfg.RequestTimeout)
	ng, err := h.c.change(rctx, g.Key, g.Owner, change{op: fmt.Sprintf("extend %q", g.Key), ttl: g.TTL, level: slog.LevelDebug})
	cancel()
	if err == nil {
		h.mu.Lock()
		h.g, *fails = ng, 0
		h.mu.Unlock()
		return 0
	}
	*fails++
	var other *NotOwnerError // released meanwhile, and held by someone else since
	if errors.Is(err, ErrLost) || errors.Is(err, ErrNotHeld) || errors.As(err, &other) {
		return -1
	}
	level := slog.LevelDebug
	if *fails == 1 {
		level = slog.LevelWarn
	}
	h.c.log.Log(ctx, level, "cannot renew a hold's lock yet; retrying", "lock", g.Key.String(), "owner", g.Owner, "expiresAt", g.ExpiresAt, "failures", *fails, "err", err)
	return max(g.TTL/10, 50*time.Millisecond)
}

// letGo releases the hold's lock for a holder that cannot any more (its
// caller went away, or never heard of the grant), why saying so in the log.
// abandoned says the holder went away holding the lock, which may have let
// it start work that is still running: the lock's lock delay then holds it
// back from everyone, as after a loss (Abandon). While etcd cannot be
// reached it retries, so that a lock whose holder is gone never waits for
// its deadline: it ends released, or lost with the session once etcd has
// been out of reach for the lease TTL.
func (h *Hold) letGo(abandoned bool, why string) {
	c, g := h.c, h.Grant()
	let := c.Release
	if abandoned {
		let = c.Abandon
	}
	retry := retryBackoff(2 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := let(ctx, g.Key, g.Owner)
		cancel()
		switch {
		case err == nil || errors.Is(err, ErrLost) || errors.Is(err, ErrNotHeld):
			c.log.Info("lock released: its holder is gone", "lock", g.Key.String(), "owner", g.Owner, "fence", g.Fence, "why", why)
			return
		case !errors.Is(err, ErrUnavailable):
			c.log.Warn("cannot release the lock of a holder that is gone; it ends at its deadline or with the lease", "lock", g.Key.String(), "owner", g.Owner, "err", err)
			return
		}
		wait := retry.NextBackOff()
		c.log.Warn("cannot release the lock of a holder that is gone yet; retrying", "lock", g.Key.String(), "owner", g.Owner, "retry_in", wait, "err", err)
		select {
		case <-g.Done(): // lost with the session, or released by someone else
			return
		case <-c.clock.After(wait):
		}
	}
}
