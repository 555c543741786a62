package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/baton-dev/baton/internal/lockstore"
	"github.com/baton-dev/baton/internal/lockstore/memstore"
	"github.com/baton-dev/baton/internal/lockstore/storetest"
)

// TestMemoryConforms runs the conformance suite on the in-memory store.
func TestMemoryConforms(t *testing.T) {
	m := memstore.New()
	var mu sync.Mutex
	sessions := map[lockstore.LeaseID]*memstore.Session{}
	storetest.Run(t, storetest.Harness{
		Store: m,
		Grant: func(t *testing.T) lockstore.LeaseID {
			s, err := m.NewSession()
			if err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			sessions[s.ID()] = s
			mu.Unlock()
			return s.ID()
		},
		Revoke: func(t *testing.T, id lockstore.LeaseID) {
			mu.Lock()
			s := sessions[id]
			mu.Unlock()
			s.Revoke()
		},
		Full: func(t *testing.T, full bool) { m.SetFull(full) },
	})
}

// TestMemoryDown: a Memory set down fails every call and ends every watch,
// as an etcd out of reach does, and serves again once up.
func TestMemoryDown(t *testing.T) {
	m := memstore.New()
	s, err := m.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ch := m.Watch(ctx, "/l/", 0)
	if r := <-ch; !r.Established {
		t.Fatalf("first response %+v", r)
	}
	m.SetDown(true)
	if r := <-ch; !errors.Is(r.Err, memstore.ErrDown) {
		t.Fatalf("watch response while down: %+v", r)
	}
	if _, ok := <-ch; ok {
		t.Fatal("the watch goes on while down")
	}
	if _, err := m.Try("/l/", lockstore.Put{Key: "/l/1", Lease: s.ID()}); !errors.Is(err, memstore.ErrDown) {
		t.Errorf("try while down: %v", err)
	}
	if _, err := m.First(ctx, "/l/"); !errors.Is(err, memstore.ErrDown) {
		t.Errorf("read while down: %v", err)
	}
	if _, err := m.NewSession(); !errors.Is(err, memstore.ErrDown) {
		t.Errorf("session while down: %v", err)
	}
	m.SetDown(false)
	if out, err := m.Try("/l/", lockstore.Put{Key: "/l/1", Lease: s.ID()}); err != nil || !out.OK {
		t.Errorf("try once up: %+v, %v", out, err)
	}
}

// TestMemorySessions: a lost session's keys live on until the sidecar
// opens its next session, which revokes them, as lease.Keeper does; a
// resumed session continues the live leases only.
func TestMemorySessions(t *testing.T) {
	m := memstore.New()
	sessions := m.Sessions()
	first, err := sessions.Current()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := m.Try("/l/", lockstore.Put{Key: "/l/1", Lease: first.ID()}); err != nil || !out.OK {
		t.Fatal(out, err)
	}
	if again, _ := sessions.Current(); again != first {
		t.Fatal("a live session was replaced")
	}
	if r := m.ResumeSession(first.ID(), 999); r == nil || !r.Resumed() || !slices.Equal(r.IDs(), []lockstore.LeaseID{first.ID()}) {
		t.Fatalf("resumed %+v, want the live lease only", r)
	}
	m.LoseSessions()
	if lockstore.Alive(first) {
		t.Fatal("a lost session is alive")
	}
	if f, _ := m.First(context.Background(), "/l/"); f == nil {
		t.Fatal("a lost session's key went before its lease")
	}
	next, err := sessions.Current()
	if err != nil || next == first || !lockstore.Alive(next) {
		t.Fatalf("next session %v, %v", next, err)
	}
	if f, _ := m.First(context.Background(), "/l/"); f != nil {
		t.Fatalf("the lost session's key outlived the next session: %+v", f)
	}
	if m.ResumeSession(first.ID()) != nil {
		t.Error("resumed a revoked lease")
	}
}

// TestMemoryCompaction: a watch that resumes before the deletes a Memory
// still keeps is told it fell behind a compaction.
func TestMemoryCompaction(t *testing.T) {
	m := memstore.New()
	s, err := m.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	var firstDelete int64
	for i := range 5000 {
		k := fmt.Sprintf("/l/%d", i)
		out, err := m.Try(k+"/", lockstore.Put{Key: k + "/x", Lease: s.ID()})
		if err != nil {
			t.Fatal(err)
		}
		del, _ := m.Delete(k+"/x", out.Rev)
		if i == 0 {
			firstDelete = del.Rev
		}
	}
	ch := m.Watch(context.Background(), "/l/", firstDelete)
	if r := <-ch; !r.Compacted {
		t.Fatalf("first response %+v, want compacted", r)
	}
	if _, ok := <-ch; ok {
		t.Fatal("a compacted watch goes on")
	}
}
