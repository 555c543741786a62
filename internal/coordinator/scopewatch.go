package coordinator

import (
	"context"

	"github.com/baton-dev/baton/internal/keyspace"
)

// The scope's watch stands in for the lock watches of a sidecar that needs
// more than Config.MaxLockWatches of them (see hub). The switch to it and
// back is made under hub.mu, which every change of a need takes while the
// scope is watched, and otherwise only one that finds more than
// MaxLockWatches locks needing a watch (the switch itself): a need counts
// itself in hub.needed before it looks at hub.scope, and the switch to the
// scope sets hub.scope before it counts them again, so one of the two sees
// the other. A lock watch's start does not rest on this: it is decided
// under that watch's own mutex, which the switch back takes for each.

// watchHeld is need for a lock held here, but while the scope is watched
// it keeps no record of the lock: the lock counts among the scope's holds,
// and the scope stays watched until they end (a sidecar holding 100 000
// locks keeps no record of each). inScope says which; unwatchHeld undoes it.
func (h *hub) watchHeld(k keyspace.Key, since int64) (inScope bool) {
	if h.scope.Load() != nil {
		h.mu.Lock()
		if h.scope.Load() != nil {
			h.scopeHolds++
			h.needed.Add(1)
			h.scopeLocked()
			h.mu.Unlock()
			return true
		}
		h.mu.Unlock()
	}
	h.need(k, since)
	return false
}

// unwatchHeld undoes watchHeld.
func (h *hub) unwatchHeld(k keyspace.Key, inScope bool) {
	if !inScope {
		h.unneed(k)
		return
	}
	h.mu.Lock()
	h.scopeHolds--
	h.needed.Add(-1)
	h.scopeLocked()
	h.mu.Unlock()
}

// rescope has the switch between the scope's watch and the locks' made,
// after a need changed, when the count of needs may call for it.
func (h *hub) rescope() {
	if h.scope.Load() == nil && h.needed.Load() <= int64(h.maxLocks) {
		return
	}
	h.mu.Lock()
	h.scopeLocked()
	h.mu.Unlock()
}

// scopeLocked has the scope watched past maxLocks locks needing a watch,
// and the locks again once at most half as many do and no lock counts
// among the scope's holds.
func (h *hub) scopeLocked() {
	sc := h.scope.Load()
	if sc == nil {
		if h.needed.Load() <= int64(h.maxLocks) {
			return
		}
		sc = &lockWatch{need: 1}
		h.scope.Store(sc) // before needed is read again, below
		h.log.Info("watching the scope rather than each lock", "locks", h.needed.Load(), "max", h.maxLocks)
		h.startLocked(sc)
	}
	keep := h.needed.Load() > int64(h.maxLocks/2) || h.scopeHolds > 0
	switch {
	case keep && sc.need == 0:
		sc.need = 1
		poke(sc.wake)
	case !keep:
		sc.need = 0
	}
}

// scopeCovers reports whether the scope's watch is established and stands
// in for the lock watches.
func (h *hub) scopeCovers() bool {
	sc := h.scope.Load()
	return sc != nil && sc.open.Load() != 0
}

// keepScopeOpen is keepOpen for the scope's watch: once it is not needed,
// the lock watches it stood in for start.
func (h *hub) keepScopeOpen(ctx context.Context, sc *lockWatch) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ctx.Err() == nil && sc.need > 0 {
		return true
	}
	sc.running = false
	h.setFailing(sc, false)
	h.scope.Store(nil) // before they look whether they may start
	h.startNeeded()
	return false
}

// idle reports whether lw's watch is not needed now (its goroutine ends
// once that has lasted a linger). For the scope's, it first has the switch
// made again: a need that changed as the scope's watch took over may not
// have.
func (h *hub) idle(lw *lockWatch) bool {
	if lw.key.IsZero() {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.scopeLocked()
		return lw.need == 0
	}
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return h.lockDoneLocked(lw)
}
