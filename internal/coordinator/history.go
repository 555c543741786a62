package coordinator

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/baton-dev/baton/internal/lockstore"
)

// ErrRewound is a grant refused because etcd went back in time (see
// History): a fence granted now could repeat one granted before.
var ErrRewound = lockstore.ErrRewound

// History is what the coordinator knows of etcd's past (etcdstore's
// History keeps it): fences only grow while etcd is the etcd that granted
// them, and no lock may be granted with a fence at or below Floor, the
// highest known to have been granted. Err says why, and what to do, while
// etcd's revision is below the floor.
type History interface {
	Floor() int64
	Err() error
}

// WithHistory makes the coordinator refuse every grant that etcd's history
// says could repeat a fence. Without it, etcd is trusted.
func WithHistory(h History) Option { return func(c *Coordinator) { c.floor.History = h } }

// noHistory is the history of a coordinator given none.
type noHistory struct{}

func (noHistory) Floor() int64 { return 0 }
func (noHistory) Err() error   { return nil }

// fenceFloor keeps grants above the highest fence granted, as History
// knows it.
type fenceFloor struct {
	History
	now      func() time.Time
	probe    func()       // reads etcd's floor key, which tells History etcd's revision
	probedAt atomic.Int64 // the last probe, in Unix nanoseconds
}

// rewound returns, for op, the error of a grant that could repeat a fence;
// nil while etcd's revision is past the floor.
func (f *fenceFloor) rewound(op string) error {
	if err := f.err(); err != nil {
		return fmt.Errorf("%s: %w: %w", op, ErrUnavailable, err)
	}
	return nil
}

// err is History.Err. While etcd is below the floor, nothing the sidecar
// does tells it etcd's revision (no grant is even tried): once a second at
// most, a read of the floor key asks etcd, so that grants resume by
// themselves once an operator bumped its revision.
func (f *fenceFloor) err() error {
	err := f.Err()
	if err == nil {
		return nil
	}
	now := f.now().UnixNano()
	last := f.probedAt.Load()
	if now-last < int64(time.Second) || !f.probedAt.CompareAndSwap(last, now) {
		return err
	}
	f.probe()
	return f.Err()
}

// Rewound is told that etcd went back in time (err says how). Every lock
// held here whose key is gone from etcd is lost, with reason EtcdRewound,
// before anyone can be granted it again: grants wait until etcd's revision
// passes the floor. A lock whose key is still there (granted before the
// snapshot etcd went back to) is held on, with its fence.
func (c *Coordinator) Rewound(err error) {
	c.log.Error("etcd went back in time: no lock is granted until its revision passes the highest fence granted", "err", err)
	c.mu.Lock()
	var hs []*held
	var es []*entry
	for _, e := range c.locks {
		if e.held != nil {
			hs, es = append(hs, e.held), append(es, e)
		}
	}
	c.unlock()
	for i, h := range hs {
		ctx, cancel := c.cfg.etcdCtx(context.Background())
		ok, herr := c.store.lines.Holds(ctx, h.etcdKey, h.fence)
		cancel()
		if herr == nil && ok {
			continue
		}
		// Gone, or etcd cannot say: the lock cannot be vouched for.
		c.mu.Lock()
		if es[i].held == h && h.ending == nil {
			h.loseLocked(EtcdRewound)
			es[i].passTurnLocked()
		}
		c.unlock()
	}
}

// aboveFloor checks, for a key just created at fence, that fence is above
// the highest fence known to have been granted; if not, the key is deleted
// and the turn passes on, and the caller is told why.
func (e *entry) aboveFloor(req AcquireRequest, key string, fence int64, sess lockstore.Session) error {
	c := e.co
	floor := c.floor.Floor()
	if fence > floor {
		return nil
	}
	e.retire(key, fence, sess)
	why := c.floor.Err()
	if why == nil {
		why = fmt.Errorf("%w: etcd created the lock's key at revision %d, and fences up to %d were granted before", ErrRewound, fence, floor)
	}
	c.log.Error("grant refused: its fence would repeat one granted before", "lock", req.Key.String(), "owner", req.Owner, "fence", fence, "floor", floor)
	return fmt.Errorf("acquire %q: %w: %w", req.Key, ErrUnavailable, why)
}
