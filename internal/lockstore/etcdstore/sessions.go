package etcdstore

import (
	"context"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-dev/baton/internal/lease"
	"github.com/baton-dev/baton/internal/lockstore"
)

// Sessions gives the sessions of a lease.Keeper as lockstore sessions. A
// session keeps one identity: asked twice, it gives the same value.
type Sessions struct {
	keeper *lease.Keeper

	mu   sync.Mutex
	last *session
}

var _ lockstore.Sessions = (*Sessions)(nil)

// NewSessions returns the sessions of keeper.
func NewSessions(keeper *lease.Keeper) *Sessions { return &Sessions{keeper: keeper} }

// Current implements lockstore.Sessions.
func (s *Sessions) Current() (lockstore.Session, error) {
	ls, err := s.keeper.Current()
	if err != nil {
		if a := alarm(err); a != nil {
			return nil, a
		}
		return nil, err
	}
	return s.of(ls), nil
}

// Wait implements lockstore.Sessions.
func (s *Sessions) Wait(ctx context.Context) (lockstore.Session, error) {
	ls, err := s.keeper.Wait(ctx)
	if err != nil {
		if a := alarm(err); a != nil {
			return nil, a
		}
		return nil, err
	}
	return s.of(ls), nil
}

func (s *Sessions) of(ls *lease.Session) *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last == nil || s.last.Session != ls {
		s.last = &session{ls}
	}
	return s.last
}

// session is a lease.Session in lockstore's terms.
type session struct{ *lease.Session }

func (s *session) ID() lockstore.LeaseID { return lockstore.LeaseID(s.Session.ID()) }

func (s *session) LeaseFor(load int) lockstore.LeaseID {
	return lockstore.LeaseID(s.Session.LeaseFor(load))
}

func (s *session) IDs() []lockstore.LeaseID { return leaseIDs(s.Session.IDs()) }

// Gone implements lockstore.Sessions.
func (s *Sessions) Gone(ls lockstore.Session) {
	if x, ok := ls.(*session); ok {
		x.Gone()
	}
}

func (s *session) Owns(id lockstore.LeaseID) bool { return s.Session.Owns(clientv3.LeaseID(id)) }

// leaseIDs converts etcd's lease ids.
func leaseIDs(ids []clientv3.LeaseID) []lockstore.LeaseID {
	out := make([]lockstore.LeaseID, len(ids))
	for i, id := range ids {
		out[i] = lockstore.LeaseID(id)
	}
	return out
}
