package memstore

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/baton-dev/baton/internal/lockstore"
)

// leaseTTL is the TTL a Session's leases stand for: they never
// expire on their own, but a holder is told how long they would last.
const leaseTTL = 10 * time.Second

// Session is a lockstore.Session of a Store: one lease, or the leases it
// resumed. It lasts until Revoke or Expire.
type Session struct {
	m       *Store
	ids     []lockstore.LeaseID
	resumed bool
	done    chan struct{}
	once    sync.Once
}

var _ lockstore.Session = (*Session)(nil)

// NewSession grants a lease and returns its session.
func (m *Store) NewSession() (*Session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.down {
		return nil, ErrDown
	}
	m.lastID++
	m.leases[m.lastID] = map[string]bool{}
	s := &Session{m: m, ids: []lockstore.LeaseID{m.lastID}, done: make(chan struct{})}
	m.sessions = append(m.sessions, s)
	return s, nil
}

// LoseSessions ends every session and leaves their keys, as sidecars that
// heard no renewal for a lease TTL give their sessions up while etcd
// keeps the leases.
func (m *Store) LoseSessions() {
	m.mu.Lock()
	ss := m.sessions
	m.sessions = nil
	m.mu.Unlock()
	for _, s := range ss {
		s.Abandon()
	}
}

// ResumeSession returns a session that continues the leases ids that are
// still live, as a restarted sidecar's; nil when none is.
func (m *Store) ResumeSession(ids ...lockstore.LeaseID) *Session {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := &Session{m: m, resumed: true, done: make(chan struct{})}
	for _, id := range ids {
		if m.leases[id] != nil {
			s.ids = append(s.ids, id)
		}
	}
	if len(s.ids) == 0 {
		return nil
	}
	return s
}

// Revoke ends the session, then deletes its keys, as a sidecar that shuts
// down does.
func (s *Session) Revoke() {
	s.end()
	_ = s.m.revoke(s.ids) // down: the keys stay, as etcd's would until expiry
}

// Expire deletes the session's keys, then ends it, as when etcd expires a
// lease that its sidecar stopped renewing.
func (s *Session) Expire() {
	_ = s.m.revoke(s.ids)
	s.end()
}

// Abandon ends the session and leaves its keys to live on, as a sidecar
// that crashed leaves its leases until they expire.
func (s *Session) Abandon() { s.end() }

func (s *Session) end() { s.once.Do(func() { close(s.done) }) }

// Gone implements lockstore.Sessions: it ends s, as a sidecar does when
// etcd refuses a write for its lease.
func (p *Sessions) Gone(s lockstore.Session) {
	if x, ok := s.(*Session); ok {
		x.end()
	}
}

// revoke deletes the keys of the leases ids, each lease's at one revision.
func (m *Store) revoke(ids []lockstore.LeaseID) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.down {
		return ErrDown
	}
	for _, id := range ids {
		keys := m.leases[id]
		if keys == nil {
			continue
		}
		m.rev++
		for _, k := range slices.Sorted(maps.Keys(keys)) {
			m.deleteLocked(k, m.rev)
		}
		delete(m.leases, id)
	}
	return nil
}

// ID implements lockstore.Session.
func (s *Session) ID() lockstore.LeaseID { return s.ids[0] }

// LeaseFor implements lockstore.Session: a Session has its leases and grows none.
func (s *Session) LeaseFor(load int) lockstore.LeaseID { return s.ids[load%len(s.ids)] }

// IDs implements lockstore.Session.
func (s *Session) IDs() []lockstore.LeaseID { return slices.Clone(s.ids) }

// Owns implements lockstore.Session.
func (s *Session) Owns(id lockstore.LeaseID) bool { return slices.Contains(s.ids, id) }

// Resumed implements lockstore.Session.
func (s *Session) Resumed() bool { return s.resumed }

// Done implements lockstore.Session.
func (s *Session) Done() <-chan struct{} { return s.done }

// Alive reports whether the session has not ended (lockstore.Alive).
func (s *Session) Alive() bool { return lockstore.Alive(s) }

// ValidUntil implements lockstore.Session: a live Session's leases are as good as
// just renewed.
func (s *Session) ValidUntil() time.Time {
	if !s.Alive() {
		return time.Time{}
	}
	return time.Now().Add(leaseTTL)
}

// Renewed implements lockstore.Session: a Session's leases need no renewal, and
// ValidUntil moves on by itself.
func (s *Session) Renewed() <-chan struct{} { return nil }

// TTL implements lockstore.Session.
func (s *Session) TTL() time.Duration { return leaseTTL }

// Sessions gives a sidecar's sessions on a Store: a new one whenever
// the last one ended, as a lease.Keeper that opens the next at once.
type Sessions struct {
	m *Store

	mu  sync.Mutex
	cur *Session
}

var _ lockstore.Sessions = (*Sessions)(nil)

// Sessions returns a sidecar's sessions on m.
func (m *Store) Sessions() *Sessions { return &Sessions{m: m} }

// Current implements lockstore.Sessions.
func (p *Sessions) Current() (lockstore.Session, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur == nil || !p.cur.Alive() {
		if p.cur != nil {
			// Given up for lost: its leases must not outlive it, as
			// lease.Keeper revokes them once etcd answers again.
			if p.m.revoke(p.cur.ids) != nil {
				return nil, ErrDown
			}
		}
		s, err := p.m.NewSession()
		if err != nil {
			return nil, err
		}
		p.cur = s
	}
	return p.cur, nil
}

// Last returns the current session without opening one; nil when none.
func (p *Sessions) Last() *Session {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cur
}

// Wait implements lockstore.Sessions.
func (p *Sessions) Wait(ctx context.Context) (lockstore.Session, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return p.Current()
}
