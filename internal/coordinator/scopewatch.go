package coordinator

import "github.com/baton-dev/baton/internal/keyspace"

// The scope's watch stands in for the lock watches of a sidecar that needs
// more than Config.MaxLockWatches of them (see hub).

// watchHeld is need for a lock held here, but while the scope is watched
// it keeps no record of the lock: the lock counts among the scope's holds,
// and the scope stays watched until they end (a sidecar holding 100 000
// locks keeps no record of each). inScope says which; unwatchHeld undoes it.
func (h *hub) watchHeld(k keyspace.Key, since int64) (inScope bool) {
	h.mu.Lock()
	if h.scope != nil {
		h.scopeHolds++
		h.needed++
		h.scopeLocked()
		h.mu.Unlock()
		return true
	}
	h.mu.Unlock()
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
	h.needed--
	h.scopeLocked()
	h.mu.Unlock()
}

// scopeLocked has the scope watched past maxLocks locks needing a watch,
// and the locks again once at most half as many do and no lock counts
// among the scope's holds.
func (h *hub) scopeLocked() {
	keep := h.needed > h.maxLocks/2 || h.scopeHolds > 0
	switch {
	case h.needed > h.maxLocks && h.scope == nil:
		h.scope = &lockWatch{need: 1}
		h.scoping.Store(true)
		h.log.Info("watching the scope rather than each lock", "locks", h.needed, "max", h.maxLocks)
		h.startLocked(h.scope)
	case h.scope != nil && keep && h.scope.need == 0:
		h.scope.need = 1
		poke(h.scope.wake)
	case h.scope != nil && !keep:
		h.scope.need = 0
	}
}

// scopeCoversLocked reports whether the scope's watch is established and
// stands in for the lock watches.
func (h *hub) scopeCoversLocked() bool { return h.scope != nil && h.scope.open.Load() != 0 }
