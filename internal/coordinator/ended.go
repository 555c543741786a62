package coordinator

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/baton-dev/baton/internal/keyspace"
)

// A lock that ends without its owner's release (expired, its lease lost,
// forced free, the sidecar shut down) is remembered, so that its owner's
// next call about it is answered 410 lock_lost with the reason, not 404:
// for Config.EndedRetention, and at least until the lock's own deadline,
// while its owner could still believe it holds it. A sidecar that shuts
// down keeps what it remembers in its state file (Losses), and the next
// process of it takes it in (Remember): a restart loses no lock in
// silence.

// endedKey names an owner's lock of one key.
type endedKey struct{ lock, owner string }

// endedLock remembers a lock that ended without its owner's release.
type endedLock struct {
	owner     string
	fence     int64
	reason    LostReason
	at        time.Time
	expiresAt time.Time // the lock's deadline when it ended; zero when not known
}

// until is when l is forgotten.
func (l endedLock) until(retention time.Duration) time.Time {
	if end := l.at.Add(retention); end.After(l.expiresAt) {
		return end
	}
	return l.expiresAt
}

// LostLock is a lock that ended without its owner's release, as a
// restarted sidecar needs to know it to tell its owner.
type LostLock struct {
	Key    string
	Owner  string
	Fence  int64
	Reason LostReason
	At     time.Time
	// ExpiresAt is the lock's deadline when it ended: until then its owner
	// could still believe it holds it.
	ExpiresAt time.Time
}

// endedLocks are the locks remembered as ended without their owners'
// release. Its mutex is a leaf: taken under Coordinator.mu or alone, it is
// never held while another is taken.
type endedLocks struct {
	mu        sync.Mutex
	m         map[endedKey]endedLock
	n         atomic.Int32  // len(m): a grant finds none to forget without the mutex
	retention time.Duration // Config.EndedRetention
	sweptAt   time.Time     // last pruning of m
}

// remember remembers l, and forgets what is past its time at now.
func (d *endedLocks) remember(now time.Time, k keyspace.Key, l endedLock) {
	d.mu.Lock()
	defer d.mu.Unlock()
	defer func() { d.n.Store(int32(len(d.m))) }()
	if now.Sub(d.sweptAt) > d.retention/8 {
		d.sweptAt = now
		for name, old := range d.m {
			if now.After(old.until(d.retention)) {
				delete(d.m, name)
			}
		}
	}
	d.m[endedKey{k.String(), l.owner}] = l
}

// remembers reports whether owner's lock of k is remembered as ended,
// whether or not past its time.
func (d *endedLocks) remembers(k, owner string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, ok := d.m[endedKey{k, owner}]
	return ok
}

// forget forgets owner's lock of k: granted to it again.
func (d *endedLocks) forget(k keyspace.Key, owner string) {
	if d.n.Load() == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.m, endedKey{k.String(), owner})
	d.n.Store(int32(len(d.m)))
}

// list returns the losses remembered and not past their time at now.
func (d *endedLocks) list(now time.Time) []LostLock {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]LostLock, 0, len(d.m))
	for k, l := range d.m {
		if !now.After(l.until(d.retention)) {
			out = append(out, LostLock{Key: k.lock, Owner: l.owner, Fence: l.fence, Reason: l.reason, At: l.at, ExpiresAt: l.expiresAt})
		}
	}
	return out
}

// lost returns the LostError for owner if its lock of k ended without its
// release and is still remembered at now.
func (d *endedLocks) lost(now time.Time, k keyspace.Key, owner string) error {
	d.mu.Lock()
	l, ok := d.m[endedKey{k.String(), owner}]
	d.mu.Unlock()
	if !ok || now.After(l.until(d.retention)) {
		return nil
	}
	return &LostError{Key: k, Owner: owner, Fence: l.fence, Reason: l.reason, At: l.at}
}

// Losses returns the locks remembered as ended without their owners'
// release, and those Shutdown ended; of one owner's lock of one key, the
// last listed is the latest.
func (c *Coordinator) Losses() []LostLock {
	out := c.ended.list(c.now())
	c.mu.Lock()
	defer c.unlock()
	return append(out, c.closedLosses...)
}

// Remember takes in the losses an earlier process of this sidecar
// remembered (Losses, kept in its state file), so that their owners are
// answered 410 lock_lost with the reason. A lock held now by the same
// owner is not a loss any more.
func (c *Coordinator) Remember(ls []LostLock) {
	c.mu.Lock()
	defer c.unlock()
	for _, l := range ls {
		k, err := keyspace.ParseKey(l.Key)
		if err != nil || l.Owner == "" {
			continue
		}
		if e := c.locks[k.String()]; e != nil && e.held != nil && e.held.owner == l.Owner {
			continue
		}
		if c.ended.remembers(l.Key, l.Owner) {
			continue
		}
		c.ended.remember(c.now(), k, endedLock{owner: l.Owner, fence: l.Fence, reason: l.Reason, at: l.At, expiresAt: l.ExpiresAt})
	}
}
