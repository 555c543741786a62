// Package lockstore is the storage seam of the lock engine: the few
// operations on contender keys that the coordinator's algorithm needs,
// expressed in lock terms, and the sessions whose leases carry the keys.
//
// The coordinator decides (local turns, holders, deadlines, loss); a Store
// only reads and writes. Package etcdstore is the store a sidecar runs on;
// memstore is an in-memory store for fast tests of the coordinator's logic.
// Both pass the same conformance suite (package storetest), so a test that
// passes on memstore says something about etcd.
//
// A lock is a key prefix; each contender for it is one key under the
// prefix, named after the contender's session (keyspace.Layout). The
// contender created first holds the lock, and its create revision is the
// fencing token: the layout of etcd's concurrency.Mutex.
package lockstore

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/baton-dev/baton/internal/keyspace"
)

// ErrPermissionDenied is the error of an operation the store may not carry
// out: etcd's authentication is on and this sidecar's user may not read or
// write the keys asked for. Wrapped, it names the user and the keys.
var ErrPermissionDenied = errors.New("etcd denied permission")

// ErrRewound is the error of a grant refused because etcd is not the etcd
// that granted the locks before it: its revision is below the highest fence
// known to have been granted (it was restored from an older snapshot, or
// lost its data), so a key created now could get a fence given out
// before. Wrapped, it says what happened and what an operator does next.
var ErrRewound = errors.New("etcd went back in time")

// ErrNoSpace is the error of a write that etcd refused because its NOSPACE
// alarm is raised: its database reached its space quota, and until room is
// made (compaction, defragmentation) and the alarm disarmed it takes no
// write that adds data (a contender key, a lease) while it still serves
// reads, deletes and the keep-alives of leases granted before.
var ErrNoSpace = errors.New("etcd is out of space (its NOSPACE alarm is raised)")

// ErrLeaseGone is the error of a write refused because etcd no longer has
// the lease it was to carry: the lease expired or was revoked before the
// session heard of it (its next renewal would say so). The session is then
// over: Sessions.Gone ends it at once, so that the next write goes on the
// next session.
var ErrLeaseGone = errors.New("etcd no longer has the sidecar's lease (it expired or was revoked)")

// ErrCorrupt is the error of an operation that etcd refused because its
// CORRUPT alarm is raised: a member's data differs from the others', and
// the cluster serves nothing until an operator restores it.
var ErrCorrupt = errors.New("etcd found a member's data corrupt (its CORRUPT alarm is raised)")

// LeaseID names a lease: every key written with it goes when it ends.
type LeaseID int64

// Contender is one contender key as the store has it.
type Contender struct {
	// Key is the key's name (keyspace.Layout.ContenderKey).
	Key string
	// Create is its create revision: its place in line, and its fence
	// when it holds the lock.
	Create int64
	// Mod is the revision of its last write.
	Mod int64
	// Lease carries the key.
	Lease LeaseID
	// Holder is its record: who holds or awaits the lock.
	Holder keyspace.Holder
}

// Put is a write of one of this sidecar's contender keys.
type Put struct {
	Key    string          // the contender key
	Lease  LeaseID         // the lease that carries it
	Record keyspace.Holder // its value
	// Gate, for Try, TryIn, Queue and Join, is the lock's lock-delay
	// marker: a try is not applied while it exists, and all tell its value
	// (Outcome.Gate).
	Gate string
}

// Outcome is the outcome of a write.
type Outcome struct {
	// OK says the write's condition held and it was applied.
	OK bool
	// Rev is the revision of the write when OK (a key it created was
	// created at Rev), else the revision the store was at.
	Rev int64
	// First is, for a Try refused, the lock's first contender.
	First *Contender
	// Ahead is, for a Queue applied, the contenders created before the new
	// key, by name, the last created first.
	Ahead []string
	// Gate is, for a try refused or a queueing applied with Put.Gate, the
	// marker's value; nil when there is none.
	Gate []byte
	// Line is, for a Join applied, the contenders created before the new
	// key and, for a TryIn refused, every contender of the lock: first
	// created first, with their records.
	Line []Contender
}

// Store reads and writes the contender keys of one etcd (or an image of
// one): what a backend implements, every interface below. Each part of the
// engine holds only the one it uses, each small (resourcelock.Interface of
// client-go's leader election is six methods): a lock's line (Lines), the
// shared claims' (SharedLines), run-once's records (Records), the lock
// delay's markers (Markers), the watches (Watches), leases of records
// (Leases) and the check of etcd's permissions and alarms (Access).
//
// Writes take no context: once asked, a write is carried out or fails
// within the store's own time-out whatever happens to the caller, so that
// its outcome is known. Reads are linearizable. Any error means the store
// could not be asked or did not answer (the caller's context ended, etcd
// out of reach): the outcome of a write that failed is unknown.
type Store interface {
	Lines
	SharedLines
	Records
	Markers
	Watches
	Leases
	Access
}

// Lines are the writes and reads of a lock's line of contenders, the
// layout of etcd's concurrency.Mutex: what an exclusive claim needs.
type Lines interface {
	// Try creates p.Key if the lock (the key prefix lock) has no contender
	// and p.Gate (when set) does not exist: the lock is granted, fenced at
	// Outcome.Rev. Else it writes nothing; Outcome.First is the holder and
	// Outcome.Gate the marker.
	Try(lock string, p Put) (Outcome, error)
	// Queue creates p.Key under lock unless it exists (then !OK) and
	// reports in the same step the contenders created before it.
	Queue(lock string, p Put) (Outcome, error)
	// Update writes p.Record into p.Key if the key is still the one
	// created at create and, when mod is not 0, last written at mod.
	Update(p Put, create, mod int64) (Outcome, error)
	// Delete deletes key if it is the one created at create; with create
	// 0, whatever its revision. OK is false when the key was not there.
	Delete(key string, create int64) (Outcome, error)
	// First reads the lock's first contender: its holder, nil when free.
	First(ctx context.Context, lock string) (*Contender, error)
	// Ahead reads the contenders of lock created before create, by name,
	// the last created first, and whether key is still the one created at
	// create (mine). rev is the revision the read saw.
	Ahead(ctx context.Context, lock, key string, create int64) (ahead []string, rev int64, mine bool, err error)
	// Holds reads whether key is the one created at create.
	Holds(ctx context.Context, key string, create int64) (bool, error)
}

// SharedLines are the writes and reads of a line whose contenders may
// hold together: readers, and the units of a semaphore.
type SharedLines interface {
	// TryIn creates p.Key if no contender of lock was created after seen
	// (seen 0: if lock has none), the caller having read at seen that the
	// key's claim fits among them: contenders that left since only make
	// more room. Else it writes nothing and Outcome.Line is the lock's
	// contenders now. The shared claims' try (readers, semaphores).
	TryIn(lock string, p Put, seen int64) (Outcome, error)
	// Join is Queue for a shared claim: it creates p.Key under lock unless
	// it exists (then !OK) and reports in the same step the contenders
	// created before it with their records (Outcome.Line), since whether
	// it holds the lock depends on their claims.
	Join(lock string, p Put) (Outcome, error)
	// Line reads the contenders of lock created before create, first
	// created first, with their records, and whether key is still the one
	// created at create (mine). rev is the revision the read saw.
	Line(ctx context.Context, lock, key string, create int64) (line []Contender, rev int64, mine bool, err error)
}

// Records are the keys beside the lines: a run-once lock's record of its
// last run.
type Records interface {
	// Read reads a key that is not a contender key (a run-once record);
	// found is false when it does not exist.
	Read(ctx context.Context, key string) (value []byte, found bool, err error)
	// Finish deletes key if it is the one created at create and in the
	// same step writes value at record, carried by lease (0: none), and
	// deletes also (when set): how a run-once holder records its outcome
	// as it lets go of the lock.
	Finish(key string, create int64, record, value string, lease LeaseID, also string) (Outcome, error)
}

// Markers are the lock delay's markers, which hold a lock back after a
// holder was lost.
type Markers interface {
	// Mark writes value at marker if key is the one created at create: a
	// holder granted with a lock delay leaves its marker.
	Mark(key string, create int64, marker, value string) (Outcome, error)
	// DeleteWith is Delete that deletes also in the same step: a holder's
	// clean release with its lock-delay marker.
	DeleteWith(key string, create int64, also string) (Outcome, error)
	// Swap replaces the value of key if it is old: with value, or deleting
	// it when value is empty.
	Swap(key, old, value string) (Outcome, error)
}

// Watches follow the contender keys: the deletes that wake the waiters
// and tell a holder its loss, and everything an observer of locks sees.
type Watches interface {
	// Watch reports the keys deleted under prefix from revision from (0:
	// from now on), until ctx ends or the watch fails; then the channel is
	// closed. Its first response is Established.
	Watch(ctx context.Context, prefix string, from int64) <-chan WatchResponse
	// WatchAll is Watch reporting the keys written too (Puts), with their
	// values: what an observer of locks follows.
	WatchAll(ctx context.Context, prefix string, from int64) <-chan WatchResponse
	// Snapshot reads the contender keys under prefix, in key order, and
	// the revision of the read, from which a WatchAll misses nothing.
	Snapshot(ctx context.Context, prefix string) (cs []Contender, rev int64, err error)
	// Contenders reads the contender keys under prefix in key order, at
	// most limit of them (0: all); more says there were more.
	Contenders(ctx context.Context, prefix string, limit int) (cs []Contender, more bool, err error)
}

// Leases are the leases beside the session's: a record's, and a holder's
// elsewhere, whose end tells its keys' fate.
type Leases interface {
	// GrantLease grants a lease of ttl that nobody keeps alive, for a
	// record that must go after a retention.
	GrantLease(ctx context.Context, ttl time.Duration) (LeaseID, error)
	// LeaseGone reads whether lease id has expired or was revoked.
	LeaseGone(ctx context.Context, id LeaseID) (bool, error)
}

// Access tells whether etcd lets this sidecar do its work.
type Access interface {
	// CheckAccess reports whether this store may read and write every key
	// under the prefixes, at least one, writing nothing:
	// ErrPermissionDenied when etcd refuses them, ErrNoSpace or ErrCorrupt
	// while its alarm refuses every write.
	CheckAccess(ctx context.Context, prefixes ...string) error
	// Refused returns the last ErrPermissionDenied, ErrNoSpace or
	// ErrCorrupt an operation met since CheckAccess last succeeded, or nil:
	// a cheap, local check.
	Refused() error
}

// WatchResponse is one response of a Watch.
type WatchResponse struct {
	// Established: the watch is open; Rev is the store's revision then.
	Established bool
	// Rev is a revision up to which every delete has been reported (0:
	// none new).
	Rev int64
	// Deleted are the keys deleted, in revision order.
	Deleted []Deletion
	// Changes are, for WatchAll, the keys written and deleted, in
	// revision order (Deleted has the deletes too).
	Changes []Change
	// Compacted: deletes from the revision asked for are no longer known;
	// the watch ends, and its owner must read everything again.
	Compacted bool
	// Err ends the watch.
	Err error
}

// Change is a write or a delete of one key, as WatchAll reports it.
type Change struct {
	// Rev is the revision of the change.
	Rev int64
	// Deleted says the key went; else it was written, with the value and
	// revisions in Contender.
	Deleted bool
	Contender
}

// Deletion is the delete of one key.
type Deletion struct {
	Key string
	Rev int64
}

// Session is a sidecar's session: the leases that carry its keys, all of
// which go when it ends.
type Session interface {
	// ID is the session's first lease: it names the session's keys.
	ID() LeaseID
	// LeaseFor returns the lease the next key should carry, given that the
	// session carries about load keys already.
	LeaseFor(load int) LeaseID
	// IDs returns every lease of the session.
	IDs() []LeaseID
	// Resumed reports whether the session continues the leases of an
	// earlier process.
	Resumed() bool
	// Done is closed when the session ends.
	Done() <-chan struct{}
	// ValidUntil is when the session gives itself up unless a renewal of
	// its leases is heard first: until then, none of its keys can have
	// gone with a lease expired in etcd. Zero once it ended.
	ValidUntil() time.Time
	// Renewed returns a channel closed at the next renewal of one of its
	// leases, which moves ValidUntil on.
	Renewed() <-chan struct{}
	// TTL is the TTL of its leases: how long its keys outlive it if it
	// stops renewing them.
	TTL() time.Duration
}

// Alive reports whether s has not ended.
func Alive(s Session) bool {
	select {
	case <-s.Done():
		return false
	default:
		return true
	}
}

// Owns reports whether id is one of the leases of s.
func Owns(s Session, id LeaseID) bool { return slices.Contains(s.IDs(), id) }

// Sessions gives the sidecar's current session.
type Sessions interface {
	// Current returns the live session or an error at once.
	Current() (Session, error)
	// Wait returns the live session, waiting for one until ctx ends.
	Wait(ctx context.Context) (Session, error)
	// Gone ends s at once: a write carrying one of its leases was refused
	// with ErrLeaseGone. The next session is then opened.
	Gone(s Session)
}
