package coordinator

import (
	"time"

	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/lockstore"
)

// The value of this sidecar's contender key for a lock is a keyspace.Holder
// record: who holds or awaits the lock, until when, and how many more local
// callers queue behind it (Queued), so that every sidecar and the mirror
// count the callers waiting for a lock, not its contender keys. The record
// is written with the key, and again when it no longer says what is true
// here: a waiter granted the lock (its record carries the queueing time),
// a change of the local queue, an extend. Changes of the queue are written
// at most once per recordDelay, and a record that became true again
// meanwhile (a caller came and went, a lock handed on) costs no write.

// recordDelay is how long a change of a contender's record waits before it
// is written: a waiter granted the lock and gone within it, or a burst of
// callers queueing behind one contender, costs no write or one.
const recordDelay = 100 * time.Millisecond

// recordRetry is how long a record that etcd could not take waits before
// it is written again.
const recordRetry = time.Second

// contenderRecord is this sidecar's contender key of a lock, as etcd has
// it. Guarded by Coordinator.mu. A held lock keeps none while etcd's
// record is its holder's with nobody queued, as most are: the held lock's
// mod revision is then all there is to remember (held.mod).
type contenderRecord struct {
	key    string
	create int64             // the key's create revision: its identity
	mod    int64             // the revision of the last write of ours that etcd took
	lease  lockstore.LeaseID // the lease that carries the key
	wrote  keyspace.Holder   // the value written at mod
	pid    int32             // the waiter's process (AcquireRequest.Caller)
}

// holder returns the record of owner's lock, granted or queued at at, by
// the sidecar id.
func (id Identity) holder(owner string, at, expires time.Time) keyspace.Holder {
	return keyspace.Holder{Owner: owner, Pod: id.Pod, Namespace: id.Namespace, Node: id.Node, Cluster: id.Cluster, AcquiredAt: at.UTC(), ExpiresAt: expires.UTC()}
}

// recordFor returns the record of req's contender key, written at at.
func (cfg *Config) recordFor(req AcquireRequest, at time.Time) keyspace.Holder {
	r := cfg.Identity.holder(req.Owner, at, at.Add(req.TTL))
	r.Claim, r.Hold, r.Value = req.Claim, req.Hold, req.Value
	return r
}

// recordOf returns the record of h in etcd as it should be now.
func (h *held) recordOf() keyspace.Holder {
	c := h.entry.co
	r := c.cfg.Identity.holder(h.owner, h.acquiredAt, h.expiresAt)
	r.Claim = h.claim()
	r.Hold = h.hold
	r.Value = h.value()
	return r
}

// adoptPlacedLocked takes in, as e's contender record, the key noted
// without the mutex (entry.placing: a waiter's, once queued; a lock's kept
// across a restart), unless that key is noted already. Every look at e.rec
// under the mutex starts here.
func (e *entry) adoptPlacedLocked() {
	r := e.placing.Swap(nil)
	if r == nil {
		return
	}
	if was := e.rec; was == nil || was.key != r.key || was.create != r.create {
		e.rec = r
	}
}

// recLocked returns e's contender record, made from its holder when it
// keeps none (etcd then has the holder's record with nobody queued).
func (e *entry) recLocked() *contenderRecord {
	e.adoptPlacedLocked()
	if h := e.held; e.rec == nil && h != nil {
		e.rec = &contenderRecord{key: h.etcdKey, create: h.fence, mod: h.mod, lease: h.lease, wrote: h.recordOf()}
	}
	return e.rec
}

// wantLocked returns what e's contender record should say now.
func (e *entry) wantLocked() keyspace.Holder {
	want := e.rec.wrote
	if h := e.held; h != nil && h.etcdKey == e.rec.key && h.fence == e.rec.create {
		want = h.recordOf()
	}
	want.Queued = int(e.queued.Load())
	return want
}

// wroteLocked notes that etcd took rec as the value of e's contender key
// (created at create) at revision rev, and writes it again later if the
// lock's state here has moved on meanwhile.
func (e *entry) wroteLocked(key string, create, rev int64, rec keyspace.Holder) {
	e.adoptPlacedLocked()
	switch r := e.rec; {
	case r == nil:
		h := e.held
		if h == nil || h.etcdKey != key || h.fence != create || rev <= h.mod {
			return // writes may report back out of order
		}
		e.rec = &contenderRecord{key: key, create: create, mod: rev, lease: h.lease, wrote: rec}
	case r.key != key || r.create != create:
		return
	case rev > r.mod:
		r.mod, r.wrote = rev, rec
	}
	e.publishLaterLocked()
}

// queueChangedLocked adds delta to the callers queued behind e's turn.
func (e *entry) queueChangedLocked(delta int) {
	e.queued.Add(int32(delta))
	e.publishLaterLocked()
}

// publishLaterLocked writes e's contender record in recordDelay if it does
// not say what is true here.
func (e *entry) publishLaterLocked() {
	e.publishAfterLocked(recordDelay)
}

func (e *entry) publishAfterLocked(d time.Duration) {
	c := e.co
	e.adoptPlacedLocked()
	if e.rec == nil && e.queued.Load() == 0 {
		return // nothing to write, and nothing to keep
	}
	r := e.recLocked()
	if r == nil || e.publishDue || c.closed.Load() {
		return
	}
	if sameRecord(e.wantLocked(), r.wrote) {
		if h := e.held; h != nil && e.queued.Load() == 0 && h.etcdKey == r.key && h.fence == r.create {
			h.mod, e.rec = r.mod, nil // in step: the holder alone says it all
		}
		return
	}
	e.publishDue = true
	e.refs++ // the timer's: e stays the lock's entry until it fires
	c.clock.AfterFunc(d, func() { e.publish() })
}

// publish writes e's contender record if it still does not say what is
// true here. The write compares the key's create revision (a key deleted
// or taken anew is left alone) and its mod revision (an extend of ours that
// committed meanwhile wrote a newer deadline, which this write must not
// undo; that extend's own report writes again if the queue moved).
func (e *entry) publish() {
	c := e.co
	c.mu.Lock()
	defer c.unlock()
	defer e.unrefLocked() // the timer's reference
	e.publishDue = false
	e.adoptPlacedLocked()
	r := e.rec
	if r == nil || c.closed.Load() || e.retiring || (e.held != nil && e.held.ending != nil) {
		// The key is being deleted, or an extend in flight reports back.
		return
	}
	want := e.wantLocked()
	if sameRecord(want, r.wrote) {
		return
	}
	key, create, mod, id := r.key, r.create, r.mod, r.lease
	c.unlock()
	out, err := c.store.lines.Update(lockstore.Put{Key: key, Lease: id, Record: want}, create, mod)
	c.mu.Lock()
	switch {
	case err != nil:
		c.log.Debug("cannot update a contender record", "key", key, "err", err)
		if e.rec == r {
			e.publishAfterLocked(recordRetry)
		}
	case out.OK:
		e.wroteLocked(key, create, out.Rev, want)
	}
	// A compare that failed: the key is gone (its turn passes) or an
	// extend of ours landed first and reports back itself.
}

// sameRecord reports whether a and b say the same (times compared as
// instants).
func sameRecord(a, b keyspace.Holder) bool {
	return a.Owner == b.Owner && a.Pod == b.Pod && a.Namespace == b.Namespace && a.Node == b.Node && a.Cluster == b.Cluster &&
		a.AcquiredAt.Equal(b.AcquiredAt) && a.ExpiresAt.Equal(b.ExpiresAt) && a.Queued == b.Queued && a.Foreign == b.Foreign && a.Claim == b.Claim && a.Value == b.Value
}
