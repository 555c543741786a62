package coordinator

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/lockstore"
)

// hub is the sidecar's one watch on its scope's prefix. It feeds the local
// waiters (one per lock: the owner of the turn) and reports deleted keys.
//
// The watch is open only while a lock awaited or held here needs it (see
// Coordinator.busy), and for a while after (linger): every sidecar
// watching a scope receives and decodes every delete in it, so idle
// sidecars and short locks must not. It opens from the
// current revision and everyone reads again once it is established, so
// nothing deleted while it was closed goes unseen.
type hub struct {
	store    lockstore.Store
	layout   keyspace.Layout
	log      *slog.Logger
	onDelete func(k keyspace.Key, key string, modRev int64)
	onResync func(from int64)
	busy     func() bool // whether something held or awaited needs the watch
	linger   time.Duration
	wake     chan struct{} // poked by want

	mu      sync.Mutex
	regs    map[string][]*waiter // by lock prefix: the owner of its turn, and the shared claims' waiters
	ok      bool                 // the watch is established
	from    int64                // the first revision whose deletes it delivers, when ok
	failing bool                 // the watch ended in an error and is not established again
}

// waiter is a local waiter's view of the deletes under its lock's prefix.
type waiter struct {
	notify chan struct{} // level-triggered: something to look at
	mu     *sync.Mutex   // the hub's, guarding gone, resync and from
	gone   map[string]deletion
	resync bool  // the watch was established again since the waiter last looked
	from   int64 // the first revision whose deletes that watch delivers
}

// coveredLocked reports whether the watch delivers every delete after a
// read at rev; a watch established again from a later revision does not,
// and the waiter must read again.
func (w *waiter) coveredLocked(rev int64) bool {
	if w.resync && w.from <= rev+1 {
		w.resync = false
	}
	return !w.resync
}

// deletion is a contender key's delete seen by the watch.
type deletion struct{ modRev int64 }

func newHub(store lockstore.Store, layout keyspace.Layout, log *slog.Logger, linger time.Duration, busy func() bool,
	onDelete func(k keyspace.Key, key string, modRev int64), onResync func(from int64)) *hub {
	return &hub{store: store, layout: layout, log: log, onDelete: onDelete, onResync: onResync, busy: busy, linger: linger,
		wake: make(chan struct{}, 1), regs: map[string][]*waiter{}}
}

// want opens the watch if it is closed: something is held or awaited.
func (h *hub) want() { poke(h.wake) }

// needed reports whether anything held or awaited needs the watch.
func (h *hub) needed() bool {
	h.mu.Lock()
	n := len(h.regs)
	h.mu.Unlock()
	return n > 0 || h.busy()
}

func (h *hub) register(pfx string) *waiter {
	w := &waiter{notify: make(chan struct{}, 1), mu: &h.mu, gone: map[string]deletion{}}
	h.mu.Lock()
	h.regs[pfx] = append(h.regs[pfx], w)
	h.mu.Unlock()
	h.want()
	return w
}

func (h *hub) unregister(pfx string, w *waiter) {
	h.mu.Lock()
	ws := slices.DeleteFunc(h.regs[pfx], func(o *waiter) bool { return o == w })
	if len(ws) == 0 {
		delete(h.regs, pfx)
	} else {
		h.regs[pfx] = ws
	}
	h.mu.Unlock()
}

// deleted reports whether key, or any key of anyOf, was deleted after
// revision rev, or whether the watch had a gap (after which everything
// must be read again). It forgets the deletes that a read at rev has seen.
func (w *waiter) deleted(key string, rev int64, anyOf map[string]bool) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.coveredLocked(rev) {
		w.resync = false
		return true
	}
	hit := false
	for k, d := range w.gone {
		switch {
		case d.modRev <= rev:
			delete(w.gone, k)
		case k == key, anyOf[k]:
			hit = true
		}
	}
	return hit
}

// allAheadGone reports, for a waiter whose contenders ahead at revision rev
// were ahead, that the watch has delivered the delete of every one of them
// and not mine's: the waiter is first in line as of the last delete.
// Nothing created after rev can get ahead of it (create revisions only
// grow), and the watch delivers every delete under the prefix in revision
// order, its own key's included, so no read is needed to know it. After a
// gap in the watch it answers false, and the waiter reads.
func (w *waiter) allAheadGone(ahead []string, mine string, rev int64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.coveredLocked(rev) {
		return false
	}
	for _, k := range ahead {
		if d, ok := w.gone[k]; !ok || d.modRev <= rev {
			return false
		}
	}
	m, ok := w.gone[mine]
	return !ok || m.modRev <= rev
}

// pruned returns line, read at rev, without the contenders whose delete
// the watch has delivered since; covered is false when the watch may have
// missed some (a gap), and the waiter must read again. mineGone says the
// waiter's own key, mine, was deleted. Deletes of keys not in line are
// forgotten once too many pile up, since a read then starts over.
func (w *waiter) pruned(line []lockstore.Contender, mine string, rev int64) (rest []lockstore.Contender, covered, mineGone bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.coveredLocked(rev) || len(w.gone) > maxPrunedDeletes {
		w.resync = false
		clear(w.gone)
		return nil, false, false
	}
	if d, ok := w.gone[mine]; ok && d.modRev > rev {
		return nil, true, true
	}
	rest = line[:0:0]
	for _, ct := range line {
		if d, ok := w.gone[ct.Key]; !ok || d.modRev <= rev {
			rest = append(rest, ct)
		}
	}
	return rest, true, false
}

// maxPrunedDeletes bounds the deletes a shared claim's waiter remembers
// between two reads of its line.
const maxPrunedDeletes = 4096

// covers reports whether the watch, as established now, delivers every
// delete of a key created at revision rev: it has been established since
// before the key was created.
func (h *hub) covers(rev int64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.ok && h.from <= rev+1
}

// broken reports whether the watch failed and has not been established
// again; a watch closed because nothing needs it is not broken.
func (h *hub) broken() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.failing
}

// run keeps the watch open while it is needed, until ctx ends, resuming
// after the last revision seen; after a compaction or a close it starts
// afresh and has everyone read again.
func (h *hub) run(ctx context.Context) error {
	var next int64 // 0: from now
	for ctx.Err() == nil {
		if !h.needed() {
			next = 0
			h.mu.Lock()
			h.failing = false
			h.mu.Unlock()
			select {
			case <-ctx.Done():
				return nil
			case <-h.wake:
			}
			continue
		}
		wctx, cancel := context.WithCancel(ctx)
		idle := h.follow(h.store.Watch(wctx, h.layout.Base(), next), &next)
		cancel()
		h.mu.Lock()
		h.ok = false
		h.failing = !idle && ctx.Err() == nil
		h.mu.Unlock()
		if idle {
			h.log.Debug("nothing held or awaited: scope watch closed")
			continue
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

// follow handles the responses of one watch until it ends or has not been
// needed for a linger (idle true); next is the revision to resume from.
func (h *hub) follow(wch <-chan lockstore.WatchResponse, next *int64) (idle bool) {
	tick := time.NewTicker(h.linger / 2)
	defer tick.Stop()
	unneeded := 0
	for {
		select {
		case <-h.wake:
			unneeded = 0
		case <-tick.C:
			if h.needed() {
				unneeded = 0
			} else if unneeded++; unneeded >= 2 {
				return true
			}
		case resp, ok := <-wch:
			switch {
			case !ok:
				return false
			case resp.Compacted:
				h.log.Warn("watch fell behind a compaction; reading everything again", "revision", *next)
				*next = 0
				return false
			case resp.Err != nil:
				h.log.Warn("watch failed; resuming", "err", resp.Err, "revision", *next)
				return false
			case resp.Established:
				if *next == 0 {
					*next = resp.Rev + 1
				}
				h.established(*next)
				continue
			}
			for _, d := range resp.Deleted {
				h.dispatch(d)
			}
			if resp.Rev >= *next {
				*next = resp.Rev + 1
			}
		}
	}
}

// established marks the watch open from revision from, and makes everyone
// who read before it read again: deletes before it may have been missed.
func (h *hub) established(from int64) {
	h.mu.Lock()
	h.ok, h.failing, h.from = true, false, from
	for _, ws := range h.regs {
		for _, w := range ws {
			w.resync, w.from = true, from
			poke(w.notify)
		}
	}
	h.mu.Unlock()
	go h.onResync(from)
}

func (h *hub) dispatch(d lockstore.Deletion) {
	key := d.Key
	k, pfx, ok := h.layout.ParseContender(key)
	if !ok {
		return
	}
	modRev := d.Rev
	h.mu.Lock()
	for _, w := range h.regs[pfx] {
		w.gone[key] = deletion{modRev: modRev}
		poke(w.notify)
	}
	h.mu.Unlock()
	h.onDelete(k, key, modRev)
}

func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
