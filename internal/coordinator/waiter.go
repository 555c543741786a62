package coordinator

import (
	"sync"

	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/lockstore"
)

// waiter is a local waiter's view of the deletes under its lock's prefix.
// The watch's goroutine writes it and the waiter reads it, each under its
// own mutex: a waiter looking takes none of the engine's.
type waiter struct {
	notify chan struct{} // level-triggered: something to look at
	mu     sync.Mutex    // guards gone, resync and from
	gone   map[string]deletion
	resync bool  // the watch was established again since the waiter last looked
	from   int64 // the first revision whose deletes that watch delivers
}

// register has the deletes of lock k's contender keys delivered to a new
// waiter, and its watch open until done.
func (h *hub) register(k keyspace.Key) *waiter {
	w := &waiter{notify: make(chan struct{}, 1), gone: map[string]deletion{}}
	h.needFor(k, 0, w)
	return w
}

// waiters returns the waiters fed lw's deletes; the slice is never
// written.
func (lw *lockWatch) waiters() []*waiter {
	if regs := lw.regs.Load(); regs != nil {
		return *regs
	}
	return nil
}

// note takes in a delete under the waiter's lock.
func (w *waiter) note(d lockstore.Deletion) {
	w.mu.Lock()
	w.noteLocked(d)
	w.mu.Unlock()
}

// resyncFrom tells the waiter that the watch was established again,
// delivering the deletes from revision from on: what it read before, it
// reads again.
func (w *waiter) resyncFrom(from int64) {
	w.mu.Lock()
	w.resync, w.from = true, from
	w.mu.Unlock()
	poke(w.notify)
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

// noteLocked takes in a delete under the waiter's lock, with its mu held.
// Past maxGone deletes not looked at (a waiter behind a long, busy line,
// or one queued for its turn here again after an outage), it forgets them
// and reads again, as after a gap.
func (w *waiter) noteLocked(d lockstore.Deletion) {
	if len(w.gone) >= maxGone {
		clear(w.gone)
		if !w.resync || w.from < d.Rev+1 {
			w.from = d.Rev + 1 // never lower: a later watch's from stands
		}
		w.resync = true
	} else {
		w.gone[d.Key] = deletion{modRev: d.Rev}
	}
	poke(w.notify)
}

// maxGone bounds the deletes a waiter remembers between two looks.
const maxGone = 1 << 14

// deletion is a contender key's delete seen by the watch.
type deletion struct{ modRev int64 }

// lookout is what a waiter learns from the watch (waiter.look).
type lookout uint8

const (
	keepWaiting lookout = iota // nothing it waits for went
	aheadGone                  // every contender ahead went: it is first
	readAgain                  // the one right ahead (or one of anyOf) went, or the watch had a gap
)

// look tells a waiter whose contenders ahead at revision rev were ahead
// (the last created first) what the watch has delivered since, in one hold
// of its mutex: with followed, whether every one of them went
// (allAheadGoneLocked); else whether the one right ahead, or any of
// anyOf, went (deletedLocked).
func (w *waiter) look(followed bool, ahead []string, mine string, rev int64, anyOf map[string]bool) lookout {
	w.mu.Lock()
	defer w.mu.Unlock()
	if followed && w.allAheadGoneLocked(ahead, mine, rev) {
		return aheadGone
	}
	if w.deletedLocked(ahead[0], rev, anyOf) {
		return readAgain
	}
	return keepWaiting
}

// deletedLocked reports whether key, or any key of anyOf, was deleted
// after revision rev, or whether the watch had a gap (after which
// everything must be read again). It forgets the deletes that a read at
// rev has seen.
func (w *waiter) deletedLocked(key string, rev int64, anyOf map[string]bool) bool {
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

// allAheadGoneLocked reports, for a waiter whose contenders ahead at
// revision rev were ahead, that the watch has delivered the delete of
// every one of them and not mine's: the waiter is first in line as of the
// last delete. Nothing created after rev can get ahead of it (create
// revisions only grow), and the watch delivers every delete under the
// prefix in revision order, its own key's included, so no read is needed
// to know it. After a gap in the watch it answers false, and the waiter
// reads.
func (w *waiter) allAheadGoneLocked(ahead []string, mine string, rev int64) bool {
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

// gapSince reports whether the watch was established again, since the
// waiter last looked, from past revision rev: the deletes after rev may
// not all be delivered.
func (w *waiter) gapSince(rev int64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.resync && w.from > rev+1
}

// maxPrunedDeletes bounds the deletes a shared claim's waiter remembers
// between two reads of its line.
const maxPrunedDeletes = 4096
