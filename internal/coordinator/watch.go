package coordinator

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"

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
//
// Past Config.MaxLockWatches locks, the hub watches the whole scope
// instead, with one watch, as each lock's costs the sidecar goroutines and
// etcd a watcher: a sidecar holding thousands of locks receives the
// scope's deletes rather than keeping thousands of watches, and keeps no
// record of each lock it holds meanwhile (scopewatch.go). Once no more
// than half that many locks need watching and those locks have ended, the
// lock watches take over again.
type hub struct {
	store    lockstore.Watches
	layout   keyspace.Layout
	log      *slog.Logger
	clock    clockwork.Clock
	onDelete func(k keyspace.Key, key string, modRev int64)
	onResync func(k keyspace.Key, from int64) // the zero k: every lock
	linger   time.Duration
	maxLocks int

	mu      engineMutex
	ctx     context.Context             // Run's, once it runs
	stopped bool                        // Run is over
	locks   map[keyspace.Key]*lockWatch // a few dozen bytes each: a sidecar may hold 100 000 locks
	needed  int                         // locks whose need is not 0, and the scope's holds
	// scopeHolds are the held locks counted while the scope was watched,
	// which keep no lockWatch (watchHeld).
	scopeHolds int
	scope      *lockWatch   // the watch on the scope, while it stands in for the lock watches
	scoping    atomic.Bool  // scope != nil, read without mu
	failing    atomic.Int64 // watches that ended in an error and are not established again
	opened     atomic.Int64 // watches established, ever
	wg         sync.WaitGroup
}

// lockWatch is the watch on one lock's prefix, or the scope's. Guarded by
// hub.mu, but for what its goroutine writes as it runs: regs, open and
// failing are read and written without it.
type lockWatch struct {
	key  keyspace.Key // the zero Key for the scope's
	need int          // why it is open: watched holders, callers in line, waiters
	// regs are the waiters fed its deletes: written under hub.mu, a new
	// slice each time, and read without it by the goroutine that feeds
	// them.
	regs    atomic.Pointer[[]*waiter]
	since   atomic.Int64  // the revision to open it from (0: now), while it is not running
	wanted  atomic.Bool   // need > 0, read by its goroutine without hub.mu
	running bool          // its goroutine runs
	open    atomic.Int64  // while established, the first revision whose deletes it delivers; else 0
	failing atomic.Bool   // ended in an error and not established again
	wake    chan struct{} // made when its goroutine first starts
}

func newHub(store lockstore.Watches, layout keyspace.Layout, log *slog.Logger, clock clockwork.Clock, linger time.Duration, maxLocks int,
	onDelete func(k keyspace.Key, key string, modRev int64), onResync func(k keyspace.Key, from int64)) *hub {
	return &hub{store: store, layout: layout, log: log, clock: clock, onDelete: onDelete, onResync: onResync, linger: linger, maxLocks: maxLocks,
		locks: map[keyspace.Key]*lockWatch{}}
}

// need keeps the watch on lock k open until a matching unneed (or done,
// for a waiter's). since, when
// not 0, is the first revision whose deletes the watch must deliver if it
// opens for this need: a held lock's grant revision + 1, so that a delete
// of its key during its watch delay comes with the watch rather than from
// a read. A watch already open or opening needs no since: once
// established, it has the held keys older than itself read.
func (h *hub) need(k keyspace.Key, since int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.needLocked(k, since)
}

// needLocked is need, with h.mu held.
func (h *hub) needLocked(k keyspace.Key, since int64) *lockWatch {
	lw := h.locks[k]
	if lw == nil {
		lw = &lockWatch{key: k}
		h.locks[k] = lw
	}
	h.addNeedLocked(lw, 1)
	if since > 0 && lw.open.Load() == 0 {
		if was := lw.since.Load(); was == 0 || since < was {
			lw.since.Store(since)
		}
	}
	h.startLocked(lw)
	poke(lw.wake)
	return lw
}

// unneed undoes a need of k: its watch closes a linger after the last.
func (h *hub) unneed(k keyspace.Key) {
	h.mu.Lock()
	if lw := h.locks[k]; lw != nil {
		h.addNeedLocked(lw, -1)
	}
	h.mu.Unlock()
}

// addNeedLocked adds d to lw's need.
func (h *hub) addNeedLocked(lw *lockWatch, d int) {
	was := lw.need > 0
	lw.need += d
	lw.wanted.Store(lw.need > 0)
	if now := lw.need > 0; now != was {
		if now {
			h.needed++
		} else {
			h.needed--
		}
	}
	if lw.need == 0 && !lw.running {
		delete(h.locks, lw.key) // its goroutine, which would, does not run
	}
	h.scopeLocked()
}

// startLocked starts lw's goroutine if it is not running, Run runs, and
// for a lock, the scope's watch does not stand in for it.
func (h *hub) startLocked(lw *lockWatch) {
	if lw.running || h.ctx == nil || h.stopped || (lw != h.scope && h.scope != nil) {
		return
	}
	if lw.wake == nil {
		lw.wake = make(chan struct{}, 1)
	}
	pfx := h.layout.Base()
	if lw != h.scope {
		pfx = h.layout.LockPrefix(lw.key)
	}
	lw.running = true
	h.wg.Add(1)
	go h.watchLock(h.ctx, pfx, lw)
}

// covers reports whether lock k's watch, or the scope's, as established
// now, delivers every delete of a key created at revision rev: it has been
// established since before the key was created.
func (h *hub) covers(k keyspace.Key, rev int64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if lw := h.locks[k]; lw != nil {
		if from := lw.open.Load(); from != 0 && from <= rev+1 {
			return true
		}
	}
	if h.scope == nil {
		return false
	}
	from := h.scope.open.Load() // once: its watch may end meanwhile
	return from != 0 && from <= rev+1
}

// broken reports whether a watch failed and has not been established
// again; a watch closed because nothing needs it is not broken.
func (h *hub) broken() bool { return h.failing.Load() > 0 }

// run has the watches run while they are needed, until ctx ends.
func (h *hub) run(ctx context.Context) error {
	h.mu.Lock()
	h.ctx = ctx
	if h.scope != nil {
		h.startLocked(h.scope)
	}
	for _, lw := range h.locks {
		if lw.need > 0 {
			h.startLocked(lw)
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

// doneLocked reports whether lw's watch may close: nothing needs it, or,
// for a lock, the scope's watch stands in for it.
func (h *hub) doneLocked(lw *lockWatch) bool {
	return lw.need == 0 || (lw != h.scope && h.scopeCoversLocked())
}

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
// not, ends its goroutine: a lock nothing needs is forgotten, and once
// the scope's watch ends, the lock watches it stood in for start. A
// lock's watch still wanted, with no scope's watch about, learns it with
// no hub mutex.
func (h *hub) keepOpen(ctx context.Context, lw *lockWatch) bool {
	if ctx.Err() == nil && !lw.key.IsZero() && lw.wanted.Load() && !h.scoping.Load() {
		return true
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.doneLocked(lw) && ctx.Err() == nil {
		return true
	}
	lw.running = false
	h.setFailing(lw, false)
	switch {
	case lw == h.scope:
		h.scope = nil
		h.scoping.Store(false)
		for _, o := range h.locks {
			if o.need > 0 {
				h.startLocked(o)
			}
		}
	case lw.need == 0:
		delete(h.locks, lw.key)
	}
	return false
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
			h.mu.Lock()
			done := h.doneLocked(lw)
			h.mu.Unlock()
			if !done {
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
// before it may have been missed. For a lock's own watch it takes no
// mutex of the engine's.
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
		h.mu.Lock()
		for _, o := range h.locks {
			resync(o)
		}
		h.mu.Unlock()
	} else {
		resync(lw)
	}
	go h.onResync(lw.key, from)
}

// dispatch feeds a delete that lw's watch delivered to the waiters of its
// lock (for a lock's own watch, without the hub's mutex), and reports it.
func (h *hub) dispatch(lw *lockWatch, d lockstore.Deletion) {
	k, _, ok := h.layout.ParseContender(d.Key)
	if !ok {
		return
	}
	if lw.key.IsZero() { // the scope's watch: the lock's waiters
		h.mu.Lock()
		lw = h.locks[k]
		h.mu.Unlock()
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
