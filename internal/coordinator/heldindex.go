package coordinator

import (
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/lockstore"
)

// heldIndex tells the watch's goroutine, without Coordinator.mu, whether a
// deleted contender key may be held here: the engine's mutex is taken only
// for those. A key is named after the session that wrote it, so another
// sidecar's key is told apart by its name alone (sessions: the names of
// this sidecar's sessions). Its own keys are counted by a hash of each, in
// a fixed table rather than a set of the keys (a sidecar may hold 100 000
// locks, and a set of their keys cost it 4 MiB of heap and twice that of
// RSS): a key whose count is 0 is not held here; one whose count is not
// may be, and the caller looks under the mutex. It remembers the last deletes of
// keys it did not have (missed), so that a key deleted as it is granted,
// its delete delivered before the grant indexed it, is lost rather than
// held in silence.
type heldIndex struct {
	// sessions are the names (hex lease IDs) of the sessions this sidecar
	// wrote keys with: a few, one more after each loss of etcd. Copied on
	// write, under mu.
	sessions atomic.Pointer[[]string]
	mu       sync.Mutex
	seed     maphash.Seed
	counts   [heldSlots]atomic.Int32 // the keys held here, by heldSlot
	n        atomic.Int64            // the keys held here
	missed   missedDeletes
}

// heldSlots is the size of heldIndex's table: 16 KiB, with few keys
// sharing a slot in a sidecar holding a few hundred locks.
const heldSlots = 1 << 12

func newHeldIndex() *heldIndex { return &heldIndex{seed: maphash.MakeSeed()} }

// slot is key's place in the table.
func (x *heldIndex) slot(key string) *atomic.Int32 {
	return &x.counts[maphash.String(x.seed, key)%heldSlots]
}

// began notes a session of this sidecar's, before any key of it is
// written.
func (x *heldIndex) began(s lockstore.Session) { x.ours(keyspace.SessionName(int64(s.ID()))) }

// ours adds a session's name to the sessions.
func (x *heldIndex) ours(name string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	var names []string
	if p := x.sessions.Load(); p != nil {
		names = *p
	}
	if !slices.Contains(names, name) {
		names = append(slices.Clip(names), name)
		x.sessions.Store(&names)
	}
}

// mine reports whether key was written by a session of this sidecar: its
// name (after its lock's prefix, up to a tag or a suffix) is a session's.
func (x *heldIndex) mine(key string) bool {
	if p := x.sessions.Load(); p != nil {
		return slices.Contains(*p, keyspace.SessionOf(key))
	}
	return false
}

// add counts h's key in, and returns the revision of a delete of it that
// the watch delivered before (0: none). Called once per hold, under
// Coordinator.mu, as remove is.
func (x *heldIndex) add(h *held) int64 {
	if !x.mine(h.etcdKey) { // a key of the process before, taken over
		x.ours(keyspace.SessionOf(h.etcdKey))
	}
	x.slot(h.etcdKey).Add(1)
	x.n.Add(1)
	return x.missed.of(h.etcdKey) // after the count: deleted sees one or the other
}

// remove counts h's key out.
func (x *heldIndex) remove(h *held) {
	x.slot(h.etcdKey).Add(-1)
	x.n.Add(-1)
}

// deleted takes in a delete of key at rev that the watch delivered, and
// reports whether key may be held here: the caller then looks under
// Coordinator.mu, and notes a delete of a key it does not hold as missed
// (a grant may be about to index it). Another sidecar's key is not.
func (x *heldIndex) deleted(key string, rev int64) bool {
	if !x.mine(key) {
		return false
	}
	n := x.slot(key)
	if n.Load() > 0 {
		return true
	}
	x.missed.note(key, rev)
	return n.Load() > 0 // counted in meanwhile: add may not have seen the note
}

// len is the number of keys held here.
func (x *heldIndex) len() int64 { return x.n.Load() }

// missedDeletes remembers the last deletes of keys not held here when the
// watch delivered them, the revision of each, with a mutex of its own.
type missedDeletes struct {
	mu   sync.Mutex
	rev  map[string]int64
	ring [256]string // the keys, oldest first from next: past them, forgotten
	next int
}

// note remembers the delete of key at rev.
func (m *missedDeletes) note(key string, rev int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.rev == nil {
		m.rev = map[string]int64{}
	}
	if _, ok := m.rev[key]; !ok {
		delete(m.rev, m.ring[m.next])
		m.ring[m.next] = key
		m.next = (m.next + 1) % len(m.ring)
	}
	m.rev[key] = max(m.rev[key], rev)
}

// of returns the revision of the last delete of key remembered (0: none).
func (m *missedDeletes) of(key string) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.rev[key]
}
