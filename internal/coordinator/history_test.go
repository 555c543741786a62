package coordinator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// floorAt is a History whose floor the test sets, as etcdstore's History
// does when etcd went back in time.
type floorAt struct {
	mu    sync.Mutex
	floor int64
	below bool
}

func (f *floorAt) Floor() int64 { f.mu.Lock(); defer f.mu.Unlock(); return f.floor }
func (f *floorAt) Err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.below {
		return nil
	}
	return fmt.Errorf("%w: etcd's revision went back below %d", ErrRewound, f.floor)
}

func (f *floorAt) set(floor int64, below bool) {
	f.mu.Lock()
	f.floor, f.below = floor, below
	f.mu.Unlock()
}

// TestRewound: while etcd is below the floor, nothing is granted (a try,
// a wait, a shared claim: 503 ErrRewound, no key written) and the sidecar
// is not ready; a key created at or below the floor anyway is never
// granted; told etcd went back, the coordinator loses the locks whose keys
// are gone (etcd_rewound) and keeps those still there.
func TestRewound(t *testing.T) {
	parallel(t)
	a := newSidecar(t, "pod-a")
	h := &floorAt{}
	a.c.floor.History = h

	kept, gone := key(t, uniq("kept")), key(t, uniq("gone"))
	keptG := a.mustAcquire(t, kept, "o1")
	goneG := a.mustAcquire(t, gone, "o2")

	// etcd "goes back": gone's key vanishes with the history after it.
	a.deleteKey(t, goneG.h.etcdKey)
	h.set(goneG.Fence+1000, true)
	if err := a.c.Ready(); !errors.Is(err, ErrRewound) || !errors.Is(err, ErrUnavailable) {
		t.Errorf("ready while below the floor: %v", err)
	}
	a.c.Rewound(h.Err())
	if _, err := a.c.Release(context.Background(), gone, "o2"); !errors.Is(err, ErrLost) {
		t.Errorf("release of a lock whose key went back in time: %v; want lost", err)
	} else if lost := new(LostError); errors.As(err, &lost) && lost.Reason != EtcdRewound {
		t.Errorf("lost for %q, want etcd_rewound", lost.Reason)
	}
	if _, err := a.c.Extend(context.Background(), kept, "o1", time.Minute); err != nil {
		t.Errorf("a lock whose key is still there is held on: %v", err)
	}

	for _, wait := range []time.Duration{0, 300 * time.Millisecond} {
		k := key(t, uniq("refused"))
		_, err := a.acquire(t, k, "o3", wait)
		if !errors.Is(err, ErrRewound) || !errors.Is(err, ErrUnavailable) {
			t.Errorf("acquire (wait %v) below the floor: %v; want 503 etcd_rewound", wait, err)
		}
		if cs := a.contenders(t, k); len(cs) != 0 {
			t.Errorf("a refused acquire left keys: %v", cs)
		}
	}

	// Past etcd's revision the precheck passes, but a fence at or below
	// the floor is never granted.
	h.set(goneG.Fence+1000, false)
	k := key(t, uniq("repeat"))
	if _, err := a.acquire(t, k, "o4", 0); !errors.Is(err, ErrRewound) {
		t.Errorf("a grant whose fence is at the floor: %v; want refused", err)
	}
	waitFor(t, 5*time.Second, "the refused key to go", func() bool { return len(a.contenders(t, k)) == 0 })

	h.set(0, false) // etcd's revision bumped past the floor
	a.mustAcquire(t, k, "o4")
	a.mustRelease(t, k, "o4")
	a.mustRelease(t, kept, "o1")
	_ = keptG
}
