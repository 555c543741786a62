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

// hub is the sidecar's watches on etcd: one per lock that something here
// holds past its watch delay or awaits, on that lock's prefix. It feeds
// the local waiters (one per lock: the owner of the turn, and the shared
// claims' waiters) and reports deleted keys.
//
// A lock's watch is open only while a lock held or awaited here needs it,
// and for a linger after. A sidecar thus receives the deletes of the locks
// it holds or awaits and of no other: a release reaches the sidecars that
// care about that lock, however many sidecars share the scope. A watch
// opens from the current revision, or from just after the grant of the
// held lock that asked for it; once established, whoever read before reads
// again, so nothing deleted while it was closed goes unseen.
type hub struct {
	store    lockstore.Store
	layout   keyspace.Layout
	log      *slog.Logger
	onDelete func(k keyspace.Key, key string, modRev int64)
	onResync func(k keyspace.Key, from int64)
	linger   time.Duration

	mu      sync.Mutex
	ctx     context.Context // Run's, once it runs
	stopped bool            // Run is over
	locks   map[string]*lockWatch
	failing int // watches that ended in an error and are not established again
	opened  int // watches established, ever
	wg      sync.WaitGroup
}

// lockWatch is the watch on one lock's prefix. Guarded by hub.mu.
type lockWatch struct {
	key     keyspace.Key
	need    int       // why it is open: watched holders, callers in line, waiters
	regs    []*waiter // the waiters, fed its deletes
	since   int64     // the revision to open it from (0: now), while it is not running
	running bool      // its goroutine runs
	ok      bool      // established
	from    int64     // the first revision whose deletes it delivers, when ok
	failing bool      // ended in an error and not established again
	wake    chan struct{}
}

func newHub(store lockstore.Store, layout keyspace.Layout, log *slog.Logger, linger time.Duration,
	onDelete func(k keyspace.Key, key string, modRev int64), onResync func(k keyspace.Key, from int64)) *hub {
	return &hub{store: store, layout: layout, log: log, onDelete: onDelete, onResync: onResync, linger: linger,
		locks: map[string]*lockWatch{}}
}

// need keeps the watch on lock k open until a matching unneed. since, when
// not 0, is the first revision whose deletes the watch must deliver if it
// opens for this need: a held lock's grant revision + 1, so that a delete
// of its key during its watch delay comes with the watch rather than from
// a read. A watch already open or opening needs no since: once
// established, it has the held keys older than itself read.
func (h *hub) need(k keyspace.Key, since int64) *lockWatch {
	h.mu.Lock()
	defer h.mu.Unlock()
	pfx := h.layout.LockPrefix(k)
	lw := h.locks[pfx]
	if lw == nil {
		lw = &lockWatch{key: k, wake: make(chan struct{}, 1)}
		h.locks[pfx] = lw
	}
	lw.need++
	if since > 0 && !lw.ok && (lw.since == 0 || since < lw.since) {
		lw.since = since
	}
	h.startLocked(pfx, lw)
	poke(lw.wake)
	return lw
}

// unneed undoes a need of k: its watch closes a linger after the last.
func (h *hub) unneed(k keyspace.Key) {
	h.mu.Lock()
	if lw := h.locks[h.layout.LockPrefix(k)]; lw != nil {
		lw.need--
	}
	h.mu.Unlock()
}

// startLocked starts lw's goroutine if it is not running and Run runs.
func (h *hub) startLocked(pfx string, lw *lockWatch) {
	if lw.running || h.ctx == nil || h.stopped {
		return
	}
	lw.running = true
	h.wg.Add(1)
	go h.watchLock(h.ctx, pfx, lw)
}

// register has the deletes of lock k's contender keys delivered to a new
// waiter, and its watch open until unregister.
func (h *hub) register(k keyspace.Key) *waiter {
	lw := h.need(k, 0)
	w := &waiter{notify: make(chan struct{}, 1), mu: &h.mu, gone: map[string]deletion{}}
	h.mu.Lock()
	lw.regs = append(lw.regs, w)
	h.mu.Unlock()
	return w
}

func (h *hub) unregister(k keyspace.Key, w *waiter) {
	h.mu.Lock()
	if lw := h.locks[h.layout.LockPrefix(k)]; lw != nil {
		lw.regs = slices.DeleteFunc(lw.regs, func(o *waiter) bool { return o == w })
		lw.need--
	}
	h.mu.Unlock()
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

// covers reports whether lock k's watch, as established now, delivers
// every delete of a key created at revision rev: it has been established
// since before the key was created.
func (h *hub) covers(k keyspace.Key, rev int64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	lw := h.locks[h.layout.LockPrefix(k)]
	return lw != nil && lw.ok && lw.from <= rev+1
}

// broken reports whether a watch failed and has not been established
// again; a watch closed because nothing needs it is not broken.
func (h *hub) broken() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.failing > 0
}

// run has the watches run while they are needed, until ctx ends.
func (h *hub) run(ctx context.Context) error {
	h.mu.Lock()
	h.ctx = ctx
	for pfx, lw := range h.locks {
		if lw.need > 0 {
			h.startLocked(pfx, lw)
		}
	}
	h.mu.Unlock()
	<-ctx.Done()
	h.mu.Lock()
	h.stopped = true // no watch starts after Wait starts
	h.mu.Unlock()
	h.wg.Wait()
	return nil
}

// watchLock keeps lw's watch open while it is needed, until ctx ends,
// resuming after the last revision seen; after a compaction or a close it
// starts afresh and has everyone read again. Its goroutine ends, and lw is
// forgotten, once nothing has needed it for a linger.
func (h *hub) watchLock(ctx context.Context, pfx string, lw *lockWatch) {
	defer h.wg.Done()
	var next int64 // 0: from now
	for {
		h.mu.Lock()
		if lw.need == 0 || ctx.Err() != nil {
			lw.running = false
			h.failingLocked(lw, false)
			if lw.need == 0 {
				delete(h.locks, pfx)
			}
			h.mu.Unlock()
			return
		}
		if next == 0 {
			next, lw.since = lw.since, 0
		}
		h.mu.Unlock()
		wctx, cancel := context.WithCancel(ctx)
		idle := h.follow(lw, h.store.Watch(wctx, pfx, next), &next)
		cancel()
		h.mu.Lock()
		lw.ok = false
		h.failingLocked(lw, !idle && ctx.Err() == nil)
		h.mu.Unlock()
		if idle {
			h.log.Debug("nothing held or awaited: lock watch closed", "lock", lw.key.String())
			next = 0
			continue
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// failingLocked records whether lw's watch is failing.
func (h *hub) failingLocked(lw *lockWatch, failing bool) {
	switch {
	case failing && !lw.failing:
		h.failing++
	case !failing && lw.failing:
		h.failing--
	}
	lw.failing = failing
}

// follow handles the responses of one watch until it ends or has not been
// needed for a linger (idle true); next is the revision to resume from.
func (h *hub) follow(lw *lockWatch, wch <-chan lockstore.WatchResponse, next *int64) (idle bool) {
	tick := time.NewTicker(h.linger / 2)
	defer tick.Stop()
	unneeded := 0
	for {
		select {
		case <-lw.wake:
			unneeded = 0
		case <-tick.C:
			h.mu.Lock()
			needed := lw.need > 0
			h.mu.Unlock()
			if needed {
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
// who read before it read again: deletes before it may have been missed.
func (h *hub) established(lw *lockWatch, from int64) {
	h.mu.Lock()
	lw.ok, lw.from, lw.since = true, from, 0
	h.failingLocked(lw, false)
	h.opened++
	for _, w := range lw.regs {
		w.resync, w.from = true, from
		poke(w.notify)
	}
	h.mu.Unlock()
	go h.onResync(lw.key, from)
}

func (h *hub) dispatch(lw *lockWatch, d lockstore.Deletion) {
	k, _, ok := h.layout.ParseContender(d.Key)
	if !ok {
		return
	}
	h.mu.Lock()
	for _, w := range lw.regs {
		w.gone[d.Key] = deletion{modRev: d.Rev}
		poke(w.notify)
	}
	h.mu.Unlock()
	h.onDelete(k, d.Key, d.Rev)
}

func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
