package coordinator

import (
	"context"
	"log/slog"
	"runtime"
	"slices"
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
// Each lock's watch is guarded by a mutex of its own (lockWatch.mu), so a
// lock's waiters and holders need it, register with it and let it go
// without the hub's mutex, which guards only the switch to and from the
// scope's watch (scopewatch.go). Past Config.MaxLockWatches locks, the hub
// watches the whole scope instead, with one watch, as each lock's costs the
// sidecar goroutines and etcd a watcher: a sidecar holding thousands of
// locks receives the scope's deletes rather than keeping thousands of
// watches, and keeps no record of each lock it holds meanwhile. Once no
// more than half that many locks need watching and those locks have ended,
// the lock watches take over again.
//
// Lock order: Coordinator.mu, then hub.mu, then a lockWatch's mu.
type hub struct {
	store    lockstore.Watches
	layout   keyspace.Layout
	log      *slog.Logger
	clock    clockwork.Clock
	onDelete func(k keyspace.Key, key string, modRev int64)
	onResync func(k keyspace.Key, from int64) // the zero k: every lock
	linger   time.Duration
	maxLocks int

	// locks are the lock watches (keyspace.Key → *lockWatch), a few dozen
	// bytes each: a sidecar may hold 100 000 locks. A lockWatch is taken
	// out, and retired, under its mu once nothing needs it and its
	// goroutine does not run.
	locks  sync.Map
	needed atomic.Int64 // locks whose need is not 0, and the scope's holds
	live   atomic.Bool  // Run runs: ctx is set
	ctx    context.Context
	gate   startGate
	wg     sync.WaitGroup

	mu engineMutex // guards scopeHolds, the scope's need, and writes of scope
	// scopeHolds are the held locks counted while the scope was watched,
	// which keep no lockWatch (watchHeld).
	scopeHolds int
	scope      atomic.Pointer[lockWatch] // the watch on the scope, while it stands in for the lock watches
	failing    atomic.Int64              // watches that ended in an error and are not established again
	opened     atomic.Int64              // watches established, ever
}

// lockWatch is the watch on one lock's prefix, or the scope's. Its mu
// guards need, running, retired and the writes of regs (the scope's need
// and running are guarded by hub.mu instead, and it has no waiters of its
// own); what its goroutine writes as it runs (open, failing) is atomic.
type lockWatch struct {
	key     keyspace.Key // the zero Key for the scope's
	mu      sync.Mutex
	need    int  // why it is open: watched holders, callers in line, waiters
	running bool // its goroutine runs
	retired bool // taken out of hub.locks: a need must find or make another
	// regs are the waiters fed its deletes: a new slice each time, read
	// without mu by the goroutine that feeds them.
	regs    atomic.Pointer[[]*waiter]
	since   atomic.Int64  // the revision to open it from (0: now), while it is not running
	wanted  atomic.Bool   // need > 0, read by its goroutine without mu
	open    atomic.Int64  // while established, the first revision whose deletes it delivers; else 0
	failing atomic.Bool   // ended in an error and not established again
	wake    chan struct{} // made when its goroutine first starts
}

func newHub(store lockstore.Watches, layout keyspace.Layout, log *slog.Logger, clock clockwork.Clock, linger time.Duration, maxLocks int,
	onDelete func(k keyspace.Key, key string, modRev int64), onResync func(k keyspace.Key, from int64)) *hub {
	return &hub{store: store, layout: layout, log: log, clock: clock, onDelete: onDelete, onResync: onResync, linger: linger, maxLocks: maxLocks}
}

// need keeps the watch on lock k open until a matching unneed (or done,
// for a waiter's). since, when not 0, is the first revision whose deletes
// the watch must deliver if it opens for this need: a held lock's grant
// revision + 1, so that a delete of its key during its watch delay comes
// with the watch rather than from a read. A watch already open or opening
// needs no since: once established, it has the held keys older than
// itself read.
func (h *hub) need(k keyspace.Key, since int64) { h.needFor(k, since, nil) }

// needFor is need, registering w (when not nil) with the watch in the same
// hold of the lock watch's mutex.
func (h *hub) needFor(k keyspace.Key, since int64, w *waiter) {
	for {
		lw := h.lockWatch(k)
		lw.mu.Lock()
		if lw.retired {
			lw.mu.Unlock()
			continue
		}
		h.addNeedLocked(lw, 1)
		if w != nil {
			regs := append(slices.Clip(lw.waiters()), w)
			lw.regs.Store(&regs)
		}
		if since > 0 && lw.open.Load() == 0 {
			if was := lw.since.Load(); was == 0 || since < was {
				lw.since.Store(since)
			}
		}
		h.startLocked(lw)
		poke(lw.wake)
		lw.mu.Unlock()
		break
	}
	h.rescope()
}

// lockWatch returns lock k's watch, made if there is none.
func (h *hub) lockWatch(k keyspace.Key) *lockWatch {
	if v, ok := h.locks.Load(k); ok {
		return v.(*lockWatch)
	}
	v, _ := h.locks.LoadOrStore(k, &lockWatch{key: k})
	return v.(*lockWatch)
}

// unneed undoes a need of k: its watch closes a linger after the last.
func (h *hub) unneed(k keyspace.Key) { h.done(k, nil, true) }

// done undoes, in one hold of k's watch's mutex, a need of k (needed) and,
// when it registered w (not nil), w's registration and its need. The
// watch is the one they were made on: their need keeps it from retiring.
func (h *hub) done(k keyspace.Key, w *waiter, needed bool) {
	if w == nil && !needed {
		return
	}
	v, ok := h.locks.Load(k)
	if !ok {
		return
	}
	lw := v.(*lockWatch)
	lw.mu.Lock()
	d := 0
	if needed {
		d--
	}
	if w != nil {
		regs := slices.DeleteFunc(slices.Clone(lw.waiters()), func(o *waiter) bool { return o == w })
		lw.regs.Store(&regs)
		d-- // the registration's need
	}
	h.addNeedLocked(lw, d)
	lw.mu.Unlock()
	h.rescope()
}

// addNeedLocked adds d to a lock watch's need, with its mu held, and
// retires it once nothing needs it and its goroutine, which would, does
// not run.
func (h *hub) addNeedLocked(lw *lockWatch, d int) {
	was := lw.need > 0
	lw.need += d
	now := lw.need > 0
	lw.wanted.Store(now)
	switch {
	case now && !was:
		h.needed.Add(1)
	case was && !now:
		h.needed.Add(-1)
	}
	if !now && !lw.running {
		h.retireLocked(lw)
	}
}

// retireLocked takes a lock watch out of the hub, with its mu held.
func (h *hub) retireLocked(lw *lockWatch) {
	lw.retired = true
	h.locks.CompareAndDelete(lw.key, lw)
}

// startLocked starts lw's goroutine, with lw guarded (its mu held; for the
// scope's, hub.mu), if it is not running, Run runs, and for a lock, the
// scope's watch does not stand in for it. A lock watch that started as
// the scope's watch took over ends once that is established.
func (h *hub) startLocked(lw *lockWatch) {
	if lw.running || !h.live.Load() || (!lw.key.IsZero() && h.scope.Load() != nil) || !h.gate.enter() {
		return
	}
	defer h.gate.leave()
	if lw.wake == nil {
		lw.wake = make(chan struct{}, 1)
	}
	pfx := h.layout.Base()
	if !lw.key.IsZero() {
		pfx = h.layout.LockPrefix(lw.key)
	}
	lw.running = true
	h.wg.Add(1)
	go h.watchLock(h.ctx, pfx, lw)
}

// startNeeded starts the goroutine of every lock watch that is needed:
// when Run starts and when the scope's watch ends. A need made meanwhile
// that did not start its watch is seen: each need adds itself to
// hub.locks before it looks whether it may start.
func (h *hub) startNeeded() {
	h.locks.Range(func(_, v any) bool {
		lw := v.(*lockWatch)
		lw.mu.Lock()
		if lw.need > 0 {
			h.startLocked(lw)
		}
		lw.mu.Unlock()
		return true
	})
}

// covers reports whether lock k's watch, or the scope's, as established
// now, delivers every delete of a key created at revision rev: it has been
// established since before the key was created.
func (h *hub) covers(k keyspace.Key, rev int64) bool {
	if v, ok := h.locks.Load(k); ok {
		if from := v.(*lockWatch).open.Load(); from != 0 && from <= rev+1 {
			return true
		}
	}
	sc := h.scope.Load()
	if sc == nil {
		return false
	}
	from := sc.open.Load() // once: its watch may end meanwhile
	return from != 0 && from <= rev+1
}

// broken reports whether a watch failed and has not been established
// again; a watch closed because nothing needs it is not broken.
func (h *hub) broken() bool { return h.failing.Load() > 0 }

// run has the watches run while they are needed, until ctx ends.
func (h *hub) run(ctx context.Context) error {
	h.mu.Lock()
	h.ctx = ctx
	h.live.Store(true)
	if sc := h.scope.Load(); sc != nil {
		h.startLocked(sc)
	}
	h.mu.Unlock()
	h.startNeeded()
	<-ctx.Done()
	h.gate.close() // no watch starts after Wait starts
	h.wg.Wait()
	return nil
}

// startGate lets watches start, each adding itself to the hub's
// WaitGroup, until Run ends, with no mutex: a start counts itself in
// while it adds, and closing the gate waits for the starts counted in
// before Run waits on the group.
type startGate struct{ n atomic.Int64 }

// gateClosed is the bit of startGate.n that says it is closed.
const gateClosed = 1 << 62

// enter counts a start in, or reports that the gate is closed.
func (g *startGate) enter() bool {
	if g.n.Add(1)&gateClosed != 0 {
		g.n.Add(-1)
		return false
	}
	return true
}

// leave counts a start out.
func (g *startGate) leave() { g.n.Add(-1) }

// close closes the gate and waits for the starts counted in.
func (g *startGate) close() {
	g.n.Or(gateClosed)
	for g.n.Load() != gateClosed {
		runtime.Gosched()
	}
}
