// Package memstore is a lock store kept in memory: the revisions, leases,
// watches and compactions of etcd, for tests of the coordinator's logic that
// run in milliseconds, and a store that a test can set down or full to play
// an etcd out of reach or out of space. It passes the conformance suite
// that etcdstore passes (package storetest), so what a test shows on it
// holds on etcd.
package memstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/baton-dev/baton/internal/lockstore"
)

// ErrDown is the error of every call to a Store made unavailable with
// SetDown, as a store out of reach answers.
var ErrDown = errors.New("memory store: down")

// Store is a lockstore.Store kept in memory, with the revisions, leases
// and watches of etcd. Its sessions never expire by themselves: a test ends
// one with Revoke, Expire or Abandon.
type Store struct {
	mu       sync.Mutex
	rev      int64
	keys     keys
	leases   map[lockstore.LeaseID]map[string]bool // live leases and the keys they carry
	lastID   lockstore.LeaseID
	down     bool
	full     bool               // writes that add data are refused (SetFull)
	history  []lockstore.Change // the last changes, for watches that resume in the past
	forgot   int64              // the revision of the last change dropped from history
	watches  map[*memWatch]bool
	sessions []*Session        // every session made, for LoseSessions
	denied   map[string]bool   // prefixes CheckAccess refuses (Deny)
	records  map[string][]byte // keys that are not contenders (Finish); they never expire here
}

// maxHistory bounds the changes a Store keeps for watches that resume in
// the past; past it, they see a compaction.
const maxHistory = 4096

var _ lockstore.Store = (*Store)(nil)

// New returns an empty Store.
func New() *Store {
	return &Store{rev: 1, keys: keys{}, leases: map[lockstore.LeaseID]map[string]bool{}, watches: map[*memWatch]bool{}, records: map[string][]byte{}}
}

// SetDown makes every call fail with ErrDown (true) and every watch end,
// as when etcd cannot be reached, or serves again (false).
func (m *Store) SetDown(down bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.down = down
	if down {
		for w := range m.watches {
			w.fail(ErrDown)
			delete(m.watches, w)
		}
	}
}

// Try implements lockstore.Store.
func (m *Store) Try(lock string, p lockstore.Put) (lockstore.Outcome, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.checkWrite(p); err != nil {
		return lockstore.Outcome{}, err
	}
	f := m.keys.first(lock)
	gate, gated := m.records[p.Gate]
	if f != nil || (p.Gate != "" && gated) {
		return lockstore.Outcome{Rev: m.rev, First: f, Gate: gate}, nil
	}
	return lockstore.Outcome{OK: true, Rev: m.putLocked(p)}, nil
}

// Queue implements lockstore.Store.
func (m *Store) Queue(lock string, p lockstore.Put) (lockstore.Outcome, error) {
	return m.enqueue(p, func(out *lockstore.Outcome) { out.Ahead, _ = m.keys.ahead(lock, p.Key, out.Rev) })
}

// enqueue creates p.Key unless it exists and lets read fill in, under the
// store's lock, what the same step reads; then the marker p.Gate.
func (m *Store) enqueue(p lockstore.Put, read func(out *lockstore.Outcome)) (lockstore.Outcome, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.checkWrite(p); err != nil {
		return lockstore.Outcome{}, err
	}
	if m.keys[p.Key] != nil {
		return lockstore.Outcome{Rev: m.rev}, nil
	}
	out := lockstore.Outcome{OK: true, Rev: m.putLocked(p)}
	read(&out)
	if p.Gate != "" {
		out.Gate = m.records[p.Gate]
	}
	return out, nil
}

// TryIn implements lockstore.Store.
func (m *Store) TryIn(lock string, p lockstore.Put, seen int64) (lockstore.Outcome, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.checkWrite(p); err != nil {
		return lockstore.Outcome{}, err
	}
	line := m.keys.line(lock, m.rev+1)
	gate, gated := m.records[p.Gate]
	if (len(line) == 0 || line[len(line)-1].Create <= seen) && (p.Gate == "" || !gated) {
		return lockstore.Outcome{OK: true, Rev: m.putLocked(p)}, nil
	}
	return lockstore.Outcome{Rev: m.rev, Line: line, Gate: gate}, nil
}

// Join implements lockstore.Store.
func (m *Store) Join(lock string, p lockstore.Put) (lockstore.Outcome, error) {
	return m.enqueue(p, func(out *lockstore.Outcome) { out.Line = m.keys.line(lock, out.Rev) })
}

// Update implements lockstore.Store.
func (m *Store) Update(p lockstore.Put, create, mod int64) (lockstore.Outcome, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.checkWrite(p); err != nil {
		return lockstore.Outcome{}, err
	}
	k := m.keys[p.Key]
	if k == nil || k.Create != create || (mod != 0 && k.Mod != mod) {
		return lockstore.Outcome{Rev: m.rev}, nil
	}
	return lockstore.Outcome{OK: true, Rev: m.putLocked(p)}, nil
}

// Delete implements lockstore.Store.
func (m *Store) Delete(key string, create int64) (lockstore.Outcome, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.down {
		return lockstore.Outcome{}, ErrDown
	}
	k := m.keys[key]
	if k == nil || (create != 0 && k.Create != create) {
		return lockstore.Outcome{Rev: m.rev}, nil
	}
	m.rev++
	m.deleteLocked(key, m.rev)
	return lockstore.Outcome{OK: true, Rev: m.rev}, nil
}

// Finish implements lockstore.Store.
func (m *Store) Finish(key string, create int64, record, value string, _ lockstore.LeaseID, also string) (lockstore.Outcome, error) {
	return m.ifHeld(key, create, true, func() {
		m.records[record] = []byte(value)
		delete(m.records, also)
		m.deleteLocked(key, m.rev)
	})
}

// DeleteWith implements lockstore.Store.
func (m *Store) DeleteWith(key string, create int64, also string) (lockstore.Outcome, error) {
	return m.ifHeld(key, create, false, func() {
		delete(m.records, also)
		m.deleteLocked(key, m.rev)
	})
}

// Mark implements lockstore.Store.
func (m *Store) Mark(key string, create int64, marker, value string) (lockstore.Outcome, error) {
	return m.ifHeld(key, create, true, func() { m.records[marker] = []byte(value) })
}

// ifHeld applies f at a new revision if key is the one created at create;
// puts says f writes data.
func (m *Store) ifHeld(key string, create int64, puts bool, f func()) (lockstore.Outcome, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.down:
		return lockstore.Outcome{}, ErrDown
	case puts && m.full:
		return lockstore.Outcome{}, errFull
	}
	k := m.keys[key]
	if k == nil || k.Create != create {
		return lockstore.Outcome{Rev: m.rev}, nil
	}
	m.rev++
	f()
	return lockstore.Outcome{OK: true, Rev: m.rev}, nil
}

// Swap implements lockstore.Store.
func (m *Store) Swap(key, old, value string) (lockstore.Outcome, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.down:
		return lockstore.Outcome{}, ErrDown
	case value != "" && m.full:
		return lockstore.Outcome{}, errFull
	}
	if v, ok := m.records[key]; !ok || string(v) != old {
		return lockstore.Outcome{Rev: m.rev}, nil
	}
	m.rev++
	if value == "" {
		delete(m.records, key)
	} else {
		m.records[key] = []byte(value)
	}
	return lockstore.Outcome{OK: true, Rev: m.rev}, nil
}

// Read implements lockstore.Store.
func (m *Store) Read(ctx context.Context, key string) (v []byte, found bool, err error) {
	err = m.read(ctx, func() { v, found = m.records[key] })
	return v, found, err
}

// GrantLease implements lockstore.Store: the lease never expires here.
func (m *Store) GrantLease(ctx context.Context, _ time.Duration) (lockstore.LeaseID, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.down:
		return 0, ErrDown
	case m.full:
		return 0, errFull
	}
	m.lastID++
	m.leases[m.lastID] = map[string]bool{}
	return m.lastID, nil
}

// checkWrite refuses a write when down or when its lease is gone, as etcd
// does.
func (m *Store) checkWrite(p lockstore.Put) error {
	switch {
	case m.down:
		return ErrDown
	case m.full:
		return errFull
	case m.leases[p.Lease] == nil:
		return fmt.Errorf("%w: memory store: requested lease not found", lockstore.ErrLeaseGone)
	}
	return nil
}

// putLocked writes p at a new revision and returns it.
func (m *Store) putLocked(p lockstore.Put) int64 {
	m.rev++
	k := m.keys[p.Key]
	if k == nil {
		k = &lockstore.Contender{Key: p.Key, Create: m.rev}
		m.keys[p.Key] = k
	}
	if old := m.leases[k.Lease]; old != nil {
		delete(old, p.Key)
	}
	m.leases[p.Lease][p.Key] = true
	k.Mod, k.Lease, k.Holder = m.rev, p.Lease, p.Record
	m.changedLocked(lockstore.Change{Rev: m.rev, Contender: *k})
	return m.rev
}

// deleteLocked deletes key at revision rev and tells the watches.
func (m *Store) deleteLocked(key string, rev int64) {
	k := m.keys[key]
	delete(m.keys, key)
	if l := m.leases[k.Lease]; l != nil {
		delete(l, key)
	}
	m.changedLocked(lockstore.Change{Rev: rev, Deleted: true, Contender: lockstore.Contender{Key: key}})
}

// changedLocked keeps c for watches that resume in the past and tells the
// watches.
func (m *Store) changedLocked(c lockstore.Change) {
	if len(m.history) == maxHistory {
		m.forgot = m.history[maxHistory/2-1].Rev
		m.history = slices.Delete(m.history, 0, maxHistory/2)
	}
	m.history = append(m.history, c)
	for w := range m.watches {
		w.respond(c)
	}
}
