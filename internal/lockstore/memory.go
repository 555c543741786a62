package lockstore

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"
)

// ErrDown is the error of every call to a Memory made unavailable with
// SetDown, as a store out of reach answers.
var ErrDown = errors.New("memory store: down")

// Memory is a Store kept in memory, with the revisions, leases and watches
// of etcd, for tests of the coordinator's logic that run in milliseconds.
// Its sessions never expire by themselves: a test ends one with End. It
// passes the conformance suite that etcdstore passes (package storetest).
type Memory struct {
	mu       sync.Mutex
	rev      int64
	keys     map[string]*Contender
	leases   map[LeaseID]map[string]bool // live leases and the keys they carry
	lastID   LeaseID
	down     bool
	full     bool     // writes that add data are refused (SetFull)
	history  []Change // the last changes, for watches that resume in the past
	forgot   int64    // the revision of the last change dropped from history
	watches  map[*memWatch]bool
	sessions []*MemSession     // every session made, for LoseSessions
	denied   map[string]bool   // prefixes CheckAccess refuses (Deny)
	records  map[string][]byte // keys that are not contenders (Finish); they never expire here
}

// maxHistory bounds the changes a Memory keeps for watches that resume in
// the past; past it, they see a compaction.
const maxHistory = 4096

var _ Store = (*Memory)(nil)

// NewMemory returns an empty Memory.
func NewMemory() *Memory {
	return &Memory{rev: 1, keys: map[string]*Contender{}, leases: map[LeaseID]map[string]bool{}, watches: map[*memWatch]bool{}, records: map[string][]byte{}}
}

// SetDown makes every call fail with ErrDown (true) and every watch end,
// as when etcd cannot be reached, or serves again (false).
func (m *Memory) SetDown(down bool) {
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

// Try implements Store.
func (m *Memory) Try(lock string, p Put) (Outcome, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.checkWrite(p); err != nil {
		return Outcome{}, err
	}
	f := m.firstLocked(lock)
	gate, gated := m.records[p.Gate]
	if f != nil || (p.Gate != "" && gated) {
		return Outcome{Rev: m.rev, First: f, Gate: gate}, nil
	}
	return Outcome{OK: true, Rev: m.putLocked(p)}, nil
}

// Queue implements Store.
func (m *Memory) Queue(lock string, p Put) (Outcome, error) {
	return m.enqueue(p, func(out *Outcome) { out.Ahead, _, _ = m.aheadLocked(lock, p.Key, out.Rev) })
}

// enqueue creates p.Key unless it exists and lets read fill in, under the
// store's lock, what the same step reads; then the marker p.Gate.
func (m *Memory) enqueue(p Put, read func(out *Outcome)) (Outcome, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.checkWrite(p); err != nil {
		return Outcome{}, err
	}
	if m.keys[p.Key] != nil {
		return Outcome{Rev: m.rev}, nil
	}
	out := Outcome{OK: true, Rev: m.putLocked(p)}
	read(&out)
	if p.Gate != "" {
		out.Gate = m.records[p.Gate]
	}
	return out, nil
}

// TryIn implements Store.
func (m *Memory) TryIn(lock string, p Put, seen int64) (Outcome, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.checkWrite(p); err != nil {
		return Outcome{}, err
	}
	line := m.lineLocked(lock, m.rev+1)
	gate, gated := m.records[p.Gate]
	if (len(line) == 0 || line[len(line)-1].Create <= seen) && (p.Gate == "" || !gated) {
		return Outcome{OK: true, Rev: m.putLocked(p)}, nil
	}
	return Outcome{Rev: m.rev, Line: line, Gate: gate}, nil
}

// Join implements Store.
func (m *Memory) Join(lock string, p Put) (Outcome, error) {
	return m.enqueue(p, func(out *Outcome) { out.Line = m.lineLocked(lock, out.Rev) })
}

// Update implements Store.
func (m *Memory) Update(p Put, create, mod int64) (Outcome, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.checkWrite(p); err != nil {
		return Outcome{}, err
	}
	k := m.keys[p.Key]
	if k == nil || k.Create != create || (mod != 0 && k.Mod != mod) {
		return Outcome{Rev: m.rev}, nil
	}
	return Outcome{OK: true, Rev: m.putLocked(p)}, nil
}

// Delete implements Store.
func (m *Memory) Delete(key string, create int64) (Outcome, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.down {
		return Outcome{}, ErrDown
	}
	k := m.keys[key]
	if k == nil || (create != 0 && k.Create != create) {
		return Outcome{Rev: m.rev}, nil
	}
	m.rev++
	m.deleteLocked(key, m.rev)
	return Outcome{OK: true, Rev: m.rev}, nil
}

// Finish implements Store.
func (m *Memory) Finish(key string, create int64, record, value string, _ LeaseID, also string) (Outcome, error) {
	return m.ifHeld(key, create, true, func() {
		m.records[record] = []byte(value)
		delete(m.records, also)
		m.deleteLocked(key, m.rev)
	})
}

// DeleteWith implements Store.
func (m *Memory) DeleteWith(key string, create int64, also string) (Outcome, error) {
	return m.ifHeld(key, create, false, func() {
		delete(m.records, also)
		m.deleteLocked(key, m.rev)
	})
}

// Mark implements Store.
func (m *Memory) Mark(key string, create int64, marker, value string) (Outcome, error) {
	return m.ifHeld(key, create, true, func() { m.records[marker] = []byte(value) })
}

// ifHeld applies f at a new revision if key is the one created at create;
// puts says f writes data.
func (m *Memory) ifHeld(key string, create int64, puts bool, f func()) (Outcome, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.down:
		return Outcome{}, ErrDown
	case puts && m.full:
		return Outcome{}, errFull
	}
	k := m.keys[key]
	if k == nil || k.Create != create {
		return Outcome{Rev: m.rev}, nil
	}
	m.rev++
	f()
	return Outcome{OK: true, Rev: m.rev}, nil
}

// Swap implements Store.
func (m *Memory) Swap(key, old, value string) (Outcome, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.down:
		return Outcome{}, ErrDown
	case value != "" && m.full:
		return Outcome{}, errFull
	}
	if v, ok := m.records[key]; !ok || string(v) != old {
		return Outcome{Rev: m.rev}, nil
	}
	m.rev++
	if value == "" {
		delete(m.records, key)
	} else {
		m.records[key] = []byte(value)
	}
	return Outcome{OK: true, Rev: m.rev}, nil
}

// Read implements Store.
func (m *Memory) Read(ctx context.Context, key string) (v []byte, found bool, err error) {
	err = m.read(ctx, func() { v, found = m.records[key] })
	return v, found, err
}

// GrantLease implements Store: the lease never expires here.
func (m *Memory) GrantLease(ctx context.Context, _ time.Duration) (LeaseID, error) {
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
func (m *Memory) checkWrite(p Put) error {
	switch {
	case m.down:
		return ErrDown
	case m.full:
		return errFull
	case m.leases[p.Lease] == nil:
		return errors.New("memory store: requested lease not found")
	}
	return nil
}

// putLocked writes p at a new revision and returns it.
func (m *Memory) putLocked(p Put) int64 {
	m.rev++
	k := m.keys[p.Key]
	if k == nil {
		k = &Contender{Key: p.Key, Create: m.rev}
		m.keys[p.Key] = k
	}
	if old := m.leases[k.Lease]; old != nil {
		delete(old, p.Key)
	}
	m.leases[p.Lease][p.Key] = true
	k.Mod, k.Lease, k.Holder = m.rev, p.Lease, p.Record
	m.changedLocked(Change{Rev: m.rev, Contender: *k})
	return m.rev
}

// deleteLocked deletes key at revision rev and tells the watches.
func (m *Memory) deleteLocked(key string, rev int64) {
	k := m.keys[key]
	delete(m.keys, key)
	if l := m.leases[k.Lease]; l != nil {
		delete(l, key)
	}
	m.changedLocked(Change{Rev: rev, Deleted: true, Contender: Contender{Key: key}})
}

// changedLocked keeps c for watches that resume in the past and tells the
// watches.
func (m *Memory) changedLocked(c Change) {
	if len(m.history) == maxHistory {
		m.forgot = m.history[maxHistory/2-1].Rev
		m.history = slices.Delete(m.history, 0, maxHistory/2)
	}
	m.history = append(m.history, c)
	for w := range m.watches {
		w.respond(c)
	}
}

// under returns the keys under prefix in key order.
func (m *Memory) under(prefix string) []Contender {
	var cs []Contender
	for name, k := range m.keys {
		if strings.HasPrefix(name, prefix) {
			cs = append(cs, *k)
		}
	}
	slices.SortFunc(cs, func(a, b Contender) int { return strings.Compare(a.Key, b.Key) })
	return cs
}

func (m *Memory) firstLocked(lock string) *Contender {
	cs := m.under(lock)
	if len(cs) == 0 {
		return nil
	}
	f := slices.MinFunc(cs, func(a, b Contender) int { return cmp.Compare(a.Create, b.Create) })
	return &f
}

func (m *Memory) aheadLocked(lock, key string, create int64) (ahead []string, rev int64, mine bool) {
	if k := m.keys[key]; k == nil || k.Create != create {
		return nil, m.rev, false
	}
	cs := m.under(lock)
	slices.SortFunc(cs, func(a, b Contender) int { return cmp.Compare(b.Create, a.Create) })
	for _, c := range cs {
		if c.Create < create {
			ahead = append(ahead, c.Key)
		}
	}
	return ahead, m.rev, true
}

// lineLocked returns the contenders of lock created before rev, first
// created first.
func (m *Memory) lineLocked(lock string, rev int64) []Contender {
	cs := slices.DeleteFunc(m.under(lock), func(c Contender) bool { return c.Create >= rev })
	slices.SortFunc(cs, func(a, b Contender) int { return cmp.Compare(a.Create, b.Create) })
	return cs
}

// read runs f under the store's lock, as a linearizable read.
func (m *Memory) read(ctx context.Context, f func()) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.down {
		return ErrDown
	}
	f()
	return nil
}

// First implements Store.
func (m *Memory) First(ctx context.Context, lock string) (f *Contender, err error) {
	err = m.read(ctx, func() { f = m.firstLocked(lock) })
	return f, err
}

// Ahead implements Store.
func (m *Memory) Ahead(ctx context.Context, lock, key string, create int64) (ahead []string, rev int64, mine bool, err error) {
	err = m.read(ctx, func() { ahead, rev, mine = m.aheadLocked(lock, key, create) })
	return ahead, rev, mine, err
}

// Line implements Store.
func (m *Memory) Line(ctx context.Context, lock, key string, create int64) (line []Contender, rev int64, mine bool, err error) {
	err = m.read(ctx, func() {
		rev = m.rev
		if k := m.keys[key]; k == nil || k.Create != create {
			return
		}
		line, mine = m.lineLocked(lock, create), true
	})
	return line, rev, mine, err
}

// Contenders implements Store.
func (m *Memory) Contenders(ctx context.Context, prefix string, limit int) (cs []Contender, more bool, err error) {
	err = m.read(ctx, func() {
		cs = m.under(prefix)
		if limit > 0 && len(cs) > limit {
			cs, more = cs[:limit], true
		}
	})
	return cs, more, err
}

// Holds implements Store.
func (m *Memory) Holds(ctx context.Context, key string, create int64) (ok bool, err error) {
	err = m.read(ctx, func() {
		k := m.keys[key]
		ok = k != nil && k.Create == create
	})
	return ok, err
}

// LeaseGone implements Store.
func (m *Memory) LeaseGone(ctx context.Context, id LeaseID) (gone bool, err error) {
	err = m.read(ctx, func() { gone = m.leases[id] == nil })
	return gone, err
}
