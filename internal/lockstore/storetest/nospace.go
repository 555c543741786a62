package storetest

import (
	"errors"
	"testing"

	"github.com/baton-dev/baton/internal/lockstore"
)

// testOutOfSpace: while etcd's NOSPACE alarm is raised, a write that adds
// data is refused with ErrNoSpace and writes nothing, and CheckAccess and
// Refused say so; reads and deletes go on, so that holders can release
// and make room. Once it is disarmed, CheckAccess clears Refused and
// writes are taken again.
func testOutOfSpace(t *testing.T, s *suite) {
	if s.h.Full == nil {
		t.Skip("the harness cannot fill its store")
	}
	st, lock := s.h.Store, s.lock("full")
	held, other := s.h.Grant(t), s.h.Grant(t)
	created := must(t)(st.Try(lock, lockstore.Put{Key: key(lock, held), Lease: held, Record: record("holder")}))
	s.h.Full(t, true)
	t.Cleanup(func() { s.h.Full(t, false) })

	if _, err := st.Try(s.lock("free"), lockstore.Put{Key: key(s.lock("free"), other), Lease: other, Record: record("b")}); !errors.Is(err, lockstore.ErrNoSpace) {
		t.Fatalf("try while out of space: %v, want ErrNoSpace", err)
	}
	if _, err := st.Queue(lock, lockstore.Put{Key: key(lock, other), Lease: other, Record: record("b")}); !errors.Is(err, lockstore.ErrNoSpace) {
		t.Fatalf("queue while out of space: %v, want ErrNoSpace", err)
	}
	if _, err := st.Update(lockstore.Put{Key: key(lock, held), Lease: held, Record: record("extended")}, created.Rev, 0); !errors.Is(err, lockstore.ErrNoSpace) {
		t.Fatalf("update while out of space: %v, want ErrNoSpace", err)
	}
	if err := st.Refused(); !errors.Is(err, lockstore.ErrNoSpace) {
		t.Fatalf("Refused after a write refused for space: %v", err)
	}
	if err := st.CheckAccess(ctx(t), s.base); !errors.Is(err, lockstore.ErrNoSpace) {
		t.Fatalf("CheckAccess while out of space: %v, want ErrNoSpace", err)
	}
	if ok, err := st.Holds(ctx(t), key(lock, held), created.Rev); err != nil || !ok {
		t.Fatalf("read while out of space: holds %v, %v", ok, err)
	}
	cs, _, err := st.Contenders(ctx(t), s.base, 0)
	if err != nil || len(cs) != 1 || cs[0].Holder.Owner != "holder" {
		t.Fatalf("writes refused for space left keys, or a read failed: %+v %v", cs, err)
	}
	if out, err := st.Delete(key(lock, held), created.Rev); err != nil || !out.OK {
		t.Fatalf("release while out of space: %+v %v; a delete makes room, etcd takes it", out, err)
	}

	s.h.Full(t, false)
	if err := st.CheckAccess(ctx(t), s.base); err != nil {
		t.Fatalf("CheckAccess once room is made: %v", err)
	}
	if err := st.Refused(); err != nil {
		t.Fatalf("Refused after CheckAccess passed: %v", err)
	}
	again := must(t)(st.Try(lock, lockstore.Put{Key: key(lock, other), Lease: other, Record: record("b")}))
	if !again.OK || again.Rev <= created.Rev {
		t.Fatalf("try once room is made: %+v, want granted above fence %d", again, created.Rev)
	}
}
