package memstore

import (
	"cmp"
	"context"
	"slices"
	"strings"

	"github.com/baton-dev/baton/internal/lockstore"
)

// under returns the keys under prefix in key order.
func (m *Store) under(prefix string) []lockstore.Contender {
	var cs []lockstore.Contender
	for name, k := range m.keys {
		if strings.HasPrefix(name, prefix) {
			cs = append(cs, *k)
		}
	}
	slices.SortFunc(cs, func(a, b lockstore.Contender) int { return strings.Compare(a.Key, b.Key) })
	return cs
}

func (m *Store) firstLocked(lock string) *lockstore.Contender {
	cs := m.under(lock)
	if len(cs) == 0 {
		return nil
	}
	f := slices.MinFunc(cs, func(a, b lockstore.Contender) int { return cmp.Compare(a.Create, b.Create) })
	return &f
}

func (m *Store) aheadLocked(lock, key string, create int64) (ahead []string, rev int64, mine bool) {
	if k := m.keys[key]; k == nil || k.Create != create {
		return nil, m.rev, false
	}
	cs := m.under(lock)
	slices.SortFunc(cs, func(a, b lockstore.Contender) int { return cmp.Compare(b.Create, a.Create) })
	for _, c := range cs {
		if c.Create < create {
			ahead = append(ahead, c.Key)
		}
	}
	return ahead, m.rev, true
}

// lineLocked returns the contenders of lock created before rev, first
// created first.
func (m *Store) lineLocked(lock string, rev int64) []lockstore.Contender {
	cs := slices.DeleteFunc(m.under(lock), func(c lockstore.Contender) bool { return c.Create >= rev })
	slices.SortFunc(cs, func(a, b lockstore.Contender) int { return cmp.Compare(a.Create, b.Create) })
	return cs
}

// read runs f under the store's lock, as a linearizable read.
func (m *Store) read(ctx context.Context, f func()) error {
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

// First implements lockstore.Store.
func (m *Store) First(ctx context.Context, lock string) (f *lockstore.Contender, err error) {
	err = m.read(ctx, func() { f = m.firstLocked(lock) })
	return f, err
}

// Ahead implements lockstore.Store.
func (m *Store) Ahead(ctx context.Context, lock, key string, create int64) (ahead []string, rev int64, mine bool, err error) {
	err = m.read(ctx, func() { ahead, rev, mine = m.aheadLocked(lock, key, create) })
	return ahead, rev, mine, err
}

// Line implements lockstore.Store.
func (m *Store) Line(ctx context.Context, lock, key string, create int64) (line []lockstore.Contender, rev int64, mine bool, err error) {
	err = m.read(ctx, func() {
		rev = m.rev
		if k := m.keys[key]; k == nil || k.Create != create {
			return
		}
		line, mine = m.lineLocked(lock, create), true
	})
	return line, rev, mine, err
}

// Contenders implements lockstore.Store.
func (m *Store) Contenders(ctx context.Context, prefix string, limit int) (cs []lockstore.Contender, more bool, err error) {
	err = m.read(ctx, func() {
		cs = m.under(prefix)
		if limit > 0 && len(cs) > limit {
			cs, more = cs[:limit], true
		}
	})
	return cs, more, err
}

// Holds implements lockstore.Store.
func (m *Store) Holds(ctx context.Context, key string, create int64) (ok bool, err error) {
	err = m.read(ctx, func() {
		k := m.keys[key]
		ok = k != nil && k.Create == create
	})
	return ok, err
}

// LeaseGone implements lockstore.Store.
func (m *Store) LeaseGone(ctx context.Context, id lockstore.LeaseID) (gone bool, err error) {
	err = m.read(ctx, func() { gone = m.leases[id] == nil })
	return gone, err
}
