package memstore

import (
	"context"
	"fmt"
	"strings"

	"github.com/baton-dev/baton/internal/lockstore"
)

// SetFull makes the store refuse with lockstore.ErrNoSpace every write that adds
// data (a key, a record, a lease) and CheckAccess, as etcd does while its
// NOSPACE alarm is raised, while reads, deletes and watches go on (true);
// or take writes again (false).
func (m *Store) SetFull(full bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.full = full
}

// errFull is the error of a write refused by SetFull.
var errFull = fmt.Errorf("%w: the memory store is full", lockstore.ErrNoSpace)

// Deny makes CheckAccess refuse prefix and every prefix under it, and
// Refused report it, as etcd does for a user whose role lacks the keys;
// Deny with denied false grants them again. Other operations are not
// refused: a test of readiness needs no more.
func (m *Store) Deny(prefix string, denied bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.denied == nil {
		m.denied = map[string]bool{}
	}
	if denied {
		m.denied[prefix] = true
	} else {
		delete(m.denied, prefix)
	}
}

// CheckAccess implements lockstore.Store.
func (m *Store) CheckAccess(ctx context.Context, prefixes ...string) (err error) {
	if err := m.read(ctx, func() {}); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.full {
		return errFull
	}
	for _, prefix := range prefixes {
		if err := m.deniedLocked(prefix); err != nil {
			return err
		}
	}
	return nil
}

// Refused implements lockstore.Store: the store is full, or denies a prefix.
func (m *Store) Refused() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.full {
		return errFull
	}
	for p := range m.denied {
		return m.deniedLocked(p)
	}
	return nil
}

func (m *Store) deniedLocked(prefix string) error {
	for p := range m.denied {
		if strings.HasPrefix(prefix, p) {
			return fmt.Errorf("%w: the memory store denies %q", lockstore.ErrPermissionDenied, prefix)
		}
	}
	return nil
}
