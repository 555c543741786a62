package etcdstore

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/baton-dev/baton/internal/lockstore"
	"github.com/baton-dev/baton/internal/testing/etcdtest"
)

// TestHistoryNoticesEtcdGoingBack: a History that followed one etcd to a
// revision notices another at a lower revision (an etcd restored from an
// older snapshot, or made anew), says so once with what to do, and keeps
// grants refused until etcd's revision passes the highest seen.
func TestHistoryNoticesEtcdGoingBack(t *testing.T) {
	var mu sync.Mutex
	var told []error
	h := NewHistory(func(err error) { mu.Lock(); told = append(told, err); mu.Unlock() })
	dial := func(srv *etcdtest.Server) *clientv3.Client {
		cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second,
			DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(h.UnaryClientInterceptor())}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cli.Close() })
		return cli
	}
	ctx := context.Background()
	old := dial(testEtcd)
	for range 20 {
		if _, err := old.Put(ctx, "/history/k", "v"); err != nil {
			t.Fatal(err)
		}
	}
	high := h.High()
	if high < 20 || h.Err() != nil || h.Floor() != 0 {
		t.Fatalf("after 20 writes: high %d, floor %d, err %v", high, h.Floor(), h.Err())
	}

	fresh, err := etcdtest.Start() // etcd with its data lost: revision 1
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fresh.Close)
	cli := dial(fresh)
	if _, err := cli.Get(ctx, "/history/k"); err != nil {
		t.Fatal(err)
	}
	err = h.Err()
	if !errors.Is(err, lockstore.ErrRewound) || h.Floor() != high || !strings.Contains(err.Error(), "--bump-revision") {
		t.Fatalf("after the revision went back: floor %d (want %d), err %v", h.Floor(), high, err)
	}
	mu.Lock()
	if len(told) != 1 || !errors.Is(told[0], lockstore.ErrRewound) {
		t.Errorf("told %v; want once, that etcd went back", told)
	}
	mu.Unlock()

	// Writes take the fresh etcd past the floor: grants may go on.
	for h.Err() != nil {
		if _, err := cli.Put(ctx, "/history/k", "v"); err != nil {
			t.Fatal(err)
		}
	}
	if h.Floor() != high || h.High() < high {
		t.Errorf("past the floor: floor %d, high %d", h.Floor(), h.High())
	}
	mu.Lock()
	if len(told) != 1 {
		t.Errorf("told %d times, want once", len(told))
	}
	mu.Unlock()
}

// TestHistoryFloorFromOutside: a floor raised from outside (this sidecar's
// state file, the scope's floor key) above etcd's revision refuses grants,
// with its source in the message; a cluster id that changes is etcd gone
// back too.
func TestHistoryFloorFromOutside(t *testing.T) {
	told := 0
	h := NewHistory(func(error) { told++ })
	if h.Raise(100, "the state file") {
		t.Error("below the floor before any answer")
	}
	h.Observe(&etcdserverpb.ResponseHeader{ClusterId: 7, Revision: 40})
	if err := h.Err(); !errors.Is(err, lockstore.ErrRewound) || !strings.Contains(err.Error(), "the state file says fences up to 100") || told != 1 {
		t.Errorf("revision 40 under a floor of 100: %v (told %d)", err, told)
	}
	h.Observe(&etcdserverpb.ResponseHeader{ClusterId: 7, Revision: 100})
	if err := h.Err(); err != nil {
		t.Errorf("at the floor, the next key is above it: %v", err)
	}
	// Another etcd past the floor: holders are told to check their keys,
	// grants go on.
	h.Observe(&etcdserverpb.ResponseHeader{ClusterId: 9, Revision: 150})
	if err := h.Err(); err != nil || h.Floor() != 100 || told != 2 {
		t.Errorf("another cluster past the floor: floor %d, %v (told %d)", h.Floor(), err, told)
	}
	h.Observe(&etcdserverpb.ResponseHeader{ClusterId: 11, Revision: 20})
	if err := h.Err(); !errors.Is(err, lockstore.ErrRewound) || !strings.Contains(err.Error(), "cluster id changed") || h.Floor() != 150 || told != 3 {
		t.Errorf("another cluster below the floor: floor %d, %v (told %d)", h.Floor(), err, told)
	}
}

// TestRaiseFloor: the floor key only ever grows.
func TestRaiseFloor(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	key := f.base + "floor"
	for _, v := range []int64{50, 30, 80} {
		if err := f.s.RaiseFloor(ctx, key, v); err != nil {
			t.Fatal(err)
		}
	}
	r, err := f.cli.Get(ctx, key)
	if err != nil || len(r.Kvs) != 1 {
		t.Fatal(r, err)
	}
	if got, err := ParseFloor(r.Kvs[0].Value); err != nil || got != 80 {
		t.Errorf("floor %d (%v), want 80", got, err)
	}
}

// TestHistoryCallsInFlight: answers to calls in flight together come in
// any order; one sent before a higher revision was seen is not etcd going
// back.
func TestHistoryCallsInFlight(t *testing.T) {
	told := 0
	h := NewHistory(func(error) { told++ })
	h.Observe(&etcdserverpb.ResponseHeader{ClusterId: 1, Revision: 10})
	before := h.seen() // a call sent now...
	h.Observe(&etcdserverpb.ResponseHeader{ClusterId: 1, Revision: 12})
	h.Heard(15)                                                                 // a lease renewal's answer
	h.observe(&etcdserverpb.ResponseHeader{ClusterId: 1, Revision: 11}, before) // ...answered last
	if err := h.Err(); err != nil || told != 0 || h.Floor() != 0 {
		t.Errorf("an answer overtaken by later ones: %v (told %d, floor %d)", err, told, h.Floor())
	}
	h.Observe(&etcdserverpb.ResponseHeader{ClusterId: 1, Revision: 13}) // sent after 15 was heard
	if err := h.Err(); !errors.Is(err, lockstore.ErrRewound) || h.Floor() != 15 || told != 1 {
		t.Errorf("below a revision heard before the call: %v (told %d, floor %d)", err, told, h.Floor())
	}
}
