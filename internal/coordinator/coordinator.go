// Package coordinator implements Baton's lock semantics: try and blocking
// acquire, release, extend, status and list, local ordering of the callers
// of one sidecar, per-lock deadlines, fencing, and loss detection. It keeps
// the algorithm; the contender keys live in a lockstore.Store (etcd in a
// sidecar, memory in its fast tests), which it reaches only through that
// interface.
//
// Every lock follows the key layout of etcd's concurrency.Mutex (see package
// keyspace): one contender key per sidecar session per lock, the holder being
// the contender with the lowest create revision, which is also the fencing
// token. A sidecar runs at most one contender per lock; its local callers
// queue in a FIFO turn in front of it, because concurrency.Mutex is
// re-entrant per session and would otherwise let two local callers "hold"
// the same lock.
package coordinator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/jonboulle/clockwork"

	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/lockstore"
)

// Coordinator serves lock requests for one scope.
type Coordinator struct {
	cfg      Config
	store    stores        // the store, as each part of the engine uses it
	sessions *sessionWatch // the session, its end watched
	layout   keyspace.Layout
	log      *slog.Logger
	obs      observed
	delay    *lockDelay       // the lock delay's markers
	guard    *policyGuard     // who may lock and force release what (WithPolicy)
	floor    *fenceFloor      // etcd's past: the floor of the fences (WithHistory)
	clock    clockwork.Clock  // every time and timer of the engine (WithClock)
	now      func() time.Time // clock.Now
	hub      *hub
	access   *scopeAccess // whether etcd lets this sidecar have its scope
	runs     *runRecords  // the run-once records
	reads    *etcdReader  // the reads of refusals and statuses

	stop    context.Context // cancelled by Shutdown: ends every wait
	stopNow context.CancelFunc

	mu           engineMutex
	locks        map[string]*entry // by name: the key's, or a shared claim's slotName
	units        map[string]*entry // the shared claims held here, by contender key
	ended        endedLocks        // the locks that ended without their owners' release
	elsewhere    seenHeld          // the locks seen held by another sidecar; its own mutex
	heldKeys     *heldIndex        // the contender keys held here, counted; written under mu, read without it
	journal      journal           // changes of the held locks, for HeldChanges
	deadlines    deadlines         // when the held locks expire
	waiting      atomic.Int64      // blocking acquires in progress
	load         atomic.Int64      // len(locks), read without mu
	young        young             // held locks not watched yet, until their watch delay is up
	closed       atomic.Bool       // Shutdown was called; set under mu, read without it
	closedLosses []LostLock        // the locks Shutdown ended, for Losses
	draining     atomic.Bool       // Drain was called: nothing more is granted
	changes      chan struct{}     // poked when the set of held locks changes
	events       lockEvents        // for the observer, told by unlock
}

// stores are the store as each part of the engine uses it: the line
// (lines), the shared claims (shared), run-once (records), the lock delay
// (markers), the watches (watches), the leases beside the session's
// (leases) and etcd's permissions and alarms (access).
type stores struct {
	lines   lockstore.Lines
	shared  lockstore.SharedLines
	records lockstore.Records
	markers lockstore.Markers
	watches lockstore.Watches
	leases  lockstore.Leases
	access  lockstore.Access
}

// storesOf cuts s by its users.
func storesOf(s lockstore.Store) stores {
	return stores{lines: s, shared: s, records: s, markers: s, watches: s, leases: s, access: s}
}

// entry is the local state of one lock. All fields are guarded by
// Coordinator.mu, but for the atomics.
type entry struct {
	co  *Coordinator // the registry of lines and the session they share
	key keyspace.Key

	// slot is, for a shared claim's entry, its claim and name; nil for the
	// key's entry, whose claim is exclusive and whose turn the local
	// callers share (most locks: a pointer costs them 8 bytes).
	slot *slot

	// The turn: whoever has it owns this sidecar's contender slot.
	queue  []queued
	queued atomic.Int32 // blocking callers in queue (the record tells other sidecars); written under mu
	refs   int32        // callers and holders using the entry; 0 lets it go (beside queued: an entry is 112 bytes)

	held *held // the local holder, nil when none

	// trying is the last try of the lock here: while it is in flight, the
	// lock's other tries here wait for its outcome (inFlight). flights
	// counts the tries started here, numbering them (flight.seq).
	trying  *flight
	flights uint64

	rec *contenderRecord // the contender key of the turn's owner; nil when none
	// placing is a waiter's contender key, written to etcd and not yet
	// taken into rec: set without mu, taken in by whoever looks at rec
	// next under it (adoptPlacedLocked).
	placing atomic.Pointer[contenderRecord]

	// The flags last, together: a sidecar keeps an entry per held lock.
	busy       bool  // the turn is taken
	retiring   bool  // the turn's owner is deleting a key of ours: the lock is being let go
	publishDue bool  // a write of rec is scheduled
	pid        int32 // the local process of the held lock (AcquireRequest.Caller), the last to have it granted
}

// New returns a Coordinator of the locks in store, contending with the
// sessions of sessions; Run must be running for blocking acquires and loss
// detection.
func New(cfg Config, store lockstore.Store, sessions lockstore.Sessions, log *slog.Logger, opts ...Option) (*Coordinator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	layout, err := keyspace.NewLayout(cfg.Scope)
	if err != nil {
		return nil, err
	}
	layout = layout.In(cfg.Space)
	stop, cancel := context.WithCancel(context.Background())
	c := &Coordinator{
		cfg: cfg, store: storesOf(store), layout: layout, log: log, obs: observed{Observer: nopObserver{}, log: log}, guard: &policyGuard{Policy: allowAll{}}, floor: &fenceFloor{History: noHistory{}}, clock: clockwork.NewRealClock(),
		stop: stop, stopNow: cancel,
		locks:    map[string]*entry{},
		units:    map[string]*entry{},
		heldKeys: newHeldIndex(),
		ended:    endedLocks{m: map[endedKey]endedLock{}, retention: cfg.EndedRetention},
		changes:  make(chan struct{}, 1),
	}
	for _, o := range opts {
		o(c)
	}
	c.now = c.clock.Now
	c.sessions = &sessionWatch{sessions: sessions, timeout: cfg.RequestTimeout, stop: c.stop.Done(), ended: c.sessionEnded, began: c.heldKeys.began, watching: map[lockstore.Session]bool{}}
	c.floor.now = c.now
	c.reads = &etcdReader{lines: store, watches: store, layout: layout, timeout: cfg.RequestTimeout, now: c.now, inflight: map[string]*sharedRead{}}
	c.runs = &runRecords{records: c.store.records, layout: layout, timeout: cfg.RequestTimeout, now: c.now, log: log}
	c.access = &scopeAccess{store: c.store.access, layout: layout, timeout: cfg.RequestTimeout, clock: c.clock, log: log, held: func() int { return int(c.journal.held.Load()) }}
	c.delay = &lockDelay{layout: layout, markers: c.store.markers, pod: cfg.Identity.Pod, now: c.now, log: log}
	c.guard.connected, c.guard.stop, c.guard.clock = c.connected, c.stop.Done(), c.clock
	c.floor.probe = func() {
		ctx, cancel := c.cfg.etcdCtx(context.Background())
		defer cancel()
		_, _, _ = c.store.records.Read(ctx, c.layout.Floor()) // History learns etcd's revision from it
	}
	c.deadlines.clock, c.deadlines.fire = c.clock, c.fireDeadlines
	c.young.clock, c.young.mature = c.clock, c.matureYoung
	c.hub = newHub(store, layout, log, c.clock, cfg.WatchLinger, cfg.MaxLockWatches, c.onDelete, c.checkHeld)
	return c, nil
}

// Layout returns the key layout of the coordinator's scope.
func (c *Coordinator) Layout() keyspace.Layout { return c.layout }

// Run watches, until ctx ends, the locks held or awaited here: it wakes
// local waiters when the contender before them goes and notices holder
// keys deleted by someone else.
func (c *Coordinator) Run(ctx context.Context) error {
	actx, cancel := context.WithCancel(ctx)
	checked := make(chan struct{})
	go func() {
		defer close(checked)
		c.access.check(actx)
	}()
	err := c.hub.run(ctx)
	cancel()
	<-checked
	return err
}

// Ready reports nil when the sidecar can grant locks: it has a live etcd
// session, its scope and its lock policy, and is not shutting down.
func (c *Coordinator) Ready() error {
	if err := c.connected(); err != nil {
		return err
	}
	if err := c.guard.Ready(); err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return nil
}

// connected is Ready but for the policy: the sidecar can reach etcd, which
// grants it its scope. A policy not known is most often a consequence.
func (c *Coordinator) connected() error {
	closed := c.closed.Load() || c.draining.Load()
	refused := c.access.get()
	if closed {
		return fmt.Errorf("%w: shutting down", ErrUnavailable)
	}
	if errors.Is(refused, ErrNoSpace) {
		return fmt.Errorf("%w: %w; %s", ErrUnavailable, refused, noSpaceHint)
	}
	if refused != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, refused)
	}
	if _, err := c.sessions.sessions.Current(); err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if c.hub.broken() {
		return fmt.Errorf("%w: the watch on etcd failed and is not established again", ErrUnavailable)
	}
	if err := c.floor.err(); err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return nil
}

// Drain stops granting locks, as a sidecar does before it shuts down:
// acquires are answered unavailable (shutting down) and no waiter is
// granted, while holders may still release, extend and renew theirs.
func (c *Coordinator) Drain() { c.draining.Store(true) }

// Shutdown stops accepting requests, ends every wait and forgets every held
// lock. The caller then revokes the session, which frees them in etcd at once.
func (c *Coordinator) Shutdown() {
	c.mu.Lock()
	defer c.unlock()
	if c.closed.Load() {
		return
	}
	// Set under the mutex: a grant, which looks under it, either sees it
	// or is done before the locks below are ended.
	c.closed.Store(true)
	c.stopNow()
	// Nothing asks about ended locks any more (every call is refused as
	// shutting down): they are listed for Losses, not remembered one by
	// one, which would cost a sidecar with many locks its time to exit.
	at := c.now()
	// Room made at once for every lock's loss and end: grown one lock at
	// a time, copying them was most of the time a sidecar with 100 000
	// locks took to shut down.
	c.closedLosses = slices.Grow(c.closedLosses, len(c.locks))
	c.events = slices.Grow(c.events, len(c.locks))
	// Every deadline goes at once, not lock by lock from a heap; and the
	// state file, about to be left for good, is told to read the held
	// locks whole (none) rather than every lock's end.
	c.deadlines.clear()
	c.journal.drop()
	for _, e := range c.locks {
		if h := e.held; h != nil {
			h.endOf().lost = &LostError{Key: e.key, Owner: h.owner, Fence: h.fence, Reason: Shutdown, At: at}
			h.endLocked()
			c.closedLosses = append(c.closedLosses, LostLock{Key: e.key.String(), Owner: h.owner, Fence: h.fence, Reason: Shutdown, At: at, ExpiresAt: h.expiresAt})
		}
	}
}

// signal pokes ch, a channel of one: a poke already pending stands for
// this one.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// etcdCtx bounds one etcd call: RequestTimeout.
func (cfg *Config) etcdCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, cfg.RequestTimeout)
}

// NewOwner returns a fresh execution id for callers that gave none.
func NewOwner() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails on Linux
	return "exec-" + hex.EncodeToString(b[:])
}

// retryBackoff is the back-off between tries of an etcd request that
// failed for want of etcd: from 50ms, doubling up to maxDelay, each delay
// varied by ±20% so that the callers of a sidecar, and sidecars, that lost
// etcd together do not retry in step.
func retryBackoff(maxDelay time.Duration) *backoff.ExponentialBackOff {
	return &backoff.ExponentialBackOff{InitialInterval: 50 * time.Millisecond, RandomizationFactor: 0.2, Multiplier: 2, MaxInterval: maxDelay}
}

// isContextErr reports whether err is the caller's own cancellation.
func isContextErr(ctx context.Context, err error) bool {
	return ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded))
}
