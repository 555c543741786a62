package coordinator

import (
	"context"
	"time"

	"github.com/baton-dev/baton/internal/lockstore"
)

// The goroutine of each watch of the hub's (hub.go): it follows its
// watch, feeds the deletes to the waiters and has everyone read again
// after a gap.

// watchLock keeps lw's watch open while it is needed, until ctx ends,
// resuming after the last revision seen; after a compaction or a close it
// starts afresh and has everyone read again. Its goroutine ends once lw
// has not been needed for a linger; a lock nothing needs is forgotten, and
// once the scope's watch ends, the lock watches it stood in for start.
func (h *hub) watchLock(ctx context.Context, pfx string, lw *lockWatch) {
	defer h.wg.Done()
	var next int64 // 0: from now
	for {
		if !h.keepOpen(ctx, lw) {
			return
		}
		if next == 0 {
			next = lw.since.Swap(0)
		}
		wctx, cancel := context.WithCancel(ctx)
		idle := h.follow(lw, h.store.Watch(wctx, pfx, next), &next)
		cancel()
		if lw.open.Swap(0) != 0 {
			// Asked for while it opened: established, it had the holders
			// read. (One asked for since it closed is dropped too; its
			// holder is read when the watch is established again.)
			lw.since.Store(0)
		}
		h.setFailing(lw, !idle && ctx.Err() == nil)
		if idle {
			h.log.Debug("watch closed: nothing held or awaited needs it", "prefix", pfx)
			next = 0
			continue
		}
		select {
		case <-ctx.Done():
		case <-h.clock.After(100 * time.Millisecond):
		}
	}
}

// keepOpen reports whether lw's watch is still needed, and when it is
// not, ends its goroutine: a lock nothing needs is retired, and once the
// scope's watch ends, the lock watches it stood in for start. A lock's
// watch still wanted, with no scope's watch about, learns it with no
// mutex.
func (h *hub) keepOpen(ctx context.Context, lw *lockWatch) bool {
	if lw.key.IsZero() {
		return h.keepScopeOpen(ctx, lw)
	}
	if ctx.Err() == nil && lw.wanted.Load() && h.scope.Load() == nil {
		return true
	}
	lw.mu.Lock()
	defer lw.mu.Unlock()
	if ctx.Err() == nil && !h.lockDoneLocked(lw) {
		return true
	}
	lw.running = false
	h.setFailing(lw, false)
	if lw.need == 0 {
		h.retireLocked(lw)
	}
	return false
}

// lockDoneLocked reports, with lw.mu held, whether a lock's watch may
// close: nothing needs it, or the scope's watch is established and stands
// in for it. (A scope's watch that ends clears hub.scope before it starts
// the lock watches, so a lock watch that saw it is started again.)
func (h *hub) lockDoneLocked(lw *lockWatch) bool {
	return lw.need == 0 || h.scopeCovers()
}

// setFailing records whether lw's watch is failing.
func (h *hub) setFailing(lw *lockWatch, failing bool) {
	if !lw.failing.CompareAndSwap(!failing, failing) {
		return
	}
	if failing {
		h.failing.Add(1)
	} else {
		h.failing.Add(-1)
	}
}

// follow handles the responses of one watch until it ends or has not been
// needed for a linger (idle true); next is the revision to resume from.
func (h *hub) follow(lw *lockWatch, wch <-chan lockstore.WatchResponse, next *int64) (idle bool) {
	tick := h.clock.NewTicker(h.linger / 2)
	defer tick.Stop()
	unneeded := 0
	for {
		select {
		case <-lw.wake:
			unneeded = 0
		case <-tick.Chan():
			if !h.idle(lw) {
				unneeded = 0
			} else if unneeded++; unneeded >= 2 {
				return true
			}
		case resp, ok := <-wch:
			switch {
			case !ok:
				return false
			case resp.Compacted:
				h.log.Warn("watch fell behind a compaction; reading everything again", "lock", lw.key.String(), "revision", *next)
				*next = 0
				return false
			case resp.Err != nil:
				h.log.Warn("watch failed; resuming", "lock", lw.key.String(), "err", resp.Err, "revision", *next)
				return false
			case resp.Established:
				if *next == 0 {
					*next = resp.Rev + 1
				}
				h.established(lw, *next)
				continue
			}
			for _, d := range resp.Deleted {
				h.dispatch(lw, d)
			}
			if resp.Rev >= *next {
				*next = resp.Rev + 1
			}
		}
	}
}

// established marks lw's watch open from revision from, and makes everyone
// who read before it (for the scope's, every lock's) read again: deletes
// before it may have been missed. It takes no mutex of the engine's.
func (h *hub) established(lw *lockWatch, from int64) {
	lw.open.Store(from)
	h.setFailing(lw, false)
	h.opened.Add(1)
	resync := func(o *lockWatch) {
		for _, w := range o.waiters() {
			w.resyncFrom(from)
		}
	}
	if lw.key.IsZero() {
		h.locks.Range(func(_, v any) bool {
			resync(v.(*lockWatch))
			return true
		})
	} else {
		resync(lw)
	}
	go h.onResync(lw.key, from)
}

// dispatch feeds a delete that lw's watch delivered to the waiters of its
// lock, without a mutex of the engine's, and reports it.
func (h *hub) dispatch(lw *lockWatch, d lockstore.Deletion) {
	k, _, ok := h.layout.ParseContender(d.Key)
	if !ok {
		return
	}
	if lw.key.IsZero() { // the scope's watch: the lock's waiters
		lw = nil
		if v, ok := h.locks.Load(k); ok {
			lw = v.(*lockWatch)
		}
	}
	if lw != nil {
		for _, w := range lw.waiters() {
			w.note(d)
		}
	}
	h.onDelete(k, d.Key, d.Rev)
}

func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
