package lockstore

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"
)

// memLeaseTTL is the TTL a MemSession's leases stand for: they never
// expire on their own, but a holder is told how long they would last.
const memLeaseTTL = 10 * time.Second

// MemSession is a Session of a Memory: one lease, or the leases it
// resumed. It lasts until Revoke or Expire.
type MemSession struct {
	m       *Memory
	ids     []LeaseID
	resumed bool
	done    chan struct{}
	once    sync.Once
}

var _ Session = (*MemSession)(nil)

// NewSession grants a lease and returns its session.
func (m *Memory) NewSession() (*MemSession, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.down {
		return nil, ErrDown
	}
	m.lastID++
	m.leases[m.lastID] = map[string]bool{}
	s := &MemSession{m: m, ids: []LeaseID{m.lastID}, done: make(chan struct{})}
	m.sessions = append(m.sessions, s)
	return s, nil
}

// LoseSessions ends every session and leaves their keys, as sidecars that
// heard no renewal for a lease TTL give their sessions up while etcd
// keeps the leases.
func (m *Memory) LoseSessions() {
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
func (m *Memory) ResumeSession(ids ...LeaseID) *MemSession {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := &MemSession{m: m, resumed: true, done: make(chan struct{})}
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
func (s *MemSession) Revoke() {
	s.end()
	_ = s.m.revoke(s.ids) // down: the keys stay, as etcd's would until expiry
}

// Expire deletes the session's keys, then ends it, as when etcd expires a
// lease that its sidecar stopped renewing.
func (s *MemSession) Expire() {
	_ = s.m.revoke(s.ids)
	s.end()
}

// Abandon ends the session and leaves its keys to live on, as a sidecar
// that crashed leaves its leases until they expire.
func (s *MemSession) Abandon() { s.end() }

func (s *MemSession) end() { s.once.Do(func() { close(s.done) }) }

// revoke deletes the keys of the leases ids, each lease's at one revision.
func (m *Memory) revoke(ids []LeaseID) error {
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

// ID implements Session.
func (s *MemSession) ID() LeaseID { return s.ids[0] }

// LeaseFor implements Session: a MemSession has its leases and grows none.
func (s *MemSession) LeaseFor(load int) LeaseID { return s.ids[load%len(s.ids)] }

// IDs implements Session.
func (s *MemSession) IDs() []LeaseID { return slices.Clone(s.ids) }

// Owns implements Session.
func (s *MemSession) Owns(id LeaseID) bool { return slices.Contains(s.ids, id) }

// Resumed implements Session.
func (s *MemSession) Resumed() bool { return s.resumed }

// Done implements Session.
func (s *MemSession) Done() <-chan struct{} { return s.done }

// Alive implements Session.
func (s *MemSession) Alive() bool {
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// ValidUntil implements Session: a live MemSession's leases are as good as
// just renewed.
func (s *MemSession) ValidUntil() time.Time {
	if !s.Alive() {
		return time.Time{}
	}
	return time.Now().Add(memLeaseTTL)
}

// Renewed implements Session: a MemSession's leases need no renewal, and
// ValidUntil moves on by itself.
func (s *MemSession) Renewed() <-chan struct{} { return nil }

// TTL implements Session.
func (s *MemSession) TTL() time.Duration { return memLeaseTTL }

// MemSessions gives a sidecar's sessions on a Memory: a new one whenever
// the last one ended, as a lease.Keeper that opens the next at once.
type MemSessions struct {
	m *Memory

	mu  sync.Mutex
	cur *MemSession
}

var _ Sessions = (*MemSessions)(nil)

// Sessions returns a sidecar's sessions on m.
func (m *Memory) Sessions() *MemSessions { return &MemSessions{m: m} }

// Current implements Sessions.
func (p *MemSessions) Current() (Session, error) {
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
func (p *MemSessions) Last() *MemSession {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cur
}

// Wait implements Sessions.
func (p *MemSessions) Wait(ctx context.Context) (Session, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return p.Current()
}
