package memstore

import (
	"cmp"
	"context"
	"slices"
	"strings"

	"github.com/baton-dev/baton/internal/lockstore"
)

// keys are the contender keys, by name. Guarded by Store.mu.
type keys map[string]*lockstore.Contender

// under returns the keys under prefix in key order.
func (ks keys) under(prefix string) []lockstore.Contender {
	var cs []lockstore.Contender
	for name, k := range ks {
		if strings.HasPrefix(name, prefix) {
			cs = append(cs, *k)
		}
	}
	slices.SortFunc(cs, func(a, b lockstore.Contender) int { return strings.Compare(a.Key, b.Key) })
	return cs
}

// first returns the first contender of lock, nil when it has none.
func (ks keys) first(lock string) *lockstore.Contender {
	cs := ks.under(lock)
	if len(cs) == 0 {
		return nil
	}
	f := slices.MinFunc(cs, func(a, b lockstore.Contender) int { return cmp.Compare(a.Create, b.Create) })
	return &f
}

// ahead returns the contenders of lock created before key (created at
// create), the last created first, and whether key is there.
func (ks keys) ahead(lock, key string, create int64) (ahead []string, mine bool) {
	if k := ks[key]; k == nil || k.Create != create {
		return nil, false
	}
	cs := ks.under(lock)
	slices.SortFunc(cs, func(a, b lockstore.Contender) int { return cmp.Compare(b.Create, a.Create) })
	for _, c := range cs {
		if c.Create < create {
			ahead = append(ahead, c.Key)
		}
	}
	return ahead, true
}

// line returns the contenders of lock created before rev, first created
// first.
func (ks keys) line(lock string, rev int64) []lockstore.Contender {
	cs := slices.DeleteFunc(ks.under(lock), func(c lockstore.Contender) bool { return c.Create >= rev })
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
	err = m.read(ctx, func() { f = m.keys.first(lock) })
	return f, err
}

// Ahead implements lockstore.Store.
func (m *Store) Ahead(ctx context.Context, lock, key string, create int64) (ahead []string, rev int64, mine bool, err error) {
	err = m.read(ctx, func() {
		ahead, mine = m.keys.ahead(lock, key, create)
		rev = m.rev
	})
	return ahead, rev, mine, err
}

// Line implements lockstore.Store.
func (m *Store) Line(ctx context.Context, lock, key string, create int64) (line []lockstore.Contender, rev int64, mine bool, err error) {
	err = m.read(ctx, func() {
		rev = m.rev
		if k := m.keys[key]; k == nil || k.Create != create {
			return
		}
		line, mine = m.keys.line(lock, create), true
	})
	return line, rev, mine, err
}

// Contenders implements lockstore.Store.
func (m *Store) Contenders(ctx context.Context, prefix string, limit int) (cs []lockstore.Contender, more bool, err error) {
	err = m.read(ctx, func() {
		cs = m.keys.under(prefix)
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
