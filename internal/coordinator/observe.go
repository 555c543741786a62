package coordinator

import (
	"context"
	"fmt"
	"time"

	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/lockstore"
)

// EventKind says what a LockEvent reports.
type EventKind string

// The kinds of LockEvent.
const (
	// EventState is a lock's state when the watch starts.
	EventState EventKind = "state"
	// EventSynced closes a run of state events: the state above is etcd's
	// as of Rev, and every change after it follows.
	EventSynced EventKind = "synced"
	// EventGranted: a contender became a holder.
	EventGranted EventKind = "granted"
	// EventReleased: a holder's key was deleted while its lease lived and
	// before its deadline: its owner released it, or someone forced it.
	EventReleased EventKind = "released"
	// EventExpired: a holder's key was deleted at or after its deadline.
	EventExpired EventKind = "expired"
	// EventLost: a holder's key went with its lease: its sidecar stopped,
	// crashed or lost etcd.
	EventLost EventKind = "lost"
	// EventQueued: the number of callers waiting changed.
	EventQueued EventKind = "queued"
	// EventProclaimed: a holder's value changed (an election's leader
	// proclaimed a new one), its fence the same.
	EventProclaimed EventKind = "proclaimed"
)

// LockEvent is one change of a watched lock, or its state.
type LockEvent struct {
	Kind EventKind
	Key  keyspace.Key
	// Rev is the etcd revision of the change (of the read, for state and
	// synced events). Revisions never go back along a watch.
	Rev int64
	// Holder and Fence are the holder the event is about (granted,
	// released, expired, lost).
	Holder keyspace.Holder
	Fence  int64
	// Status is the lock's status after the change.
	Status Status
	// Resynced says the watch had a gap (a compaction, a lost
	// connection): the lock was read again and the event is the
	// difference, so changes within the gap may be merged, but none is
	// missed.
	Resynced bool
}

// Observe follows lock k, or when k is zero every lock whose key starts
// with prefix: first the state of each lock held or awaited (of k, even
// when free), then EventSynced, then every change, until ctx ends. It reads
// etcd once to start (an error then is returned) and reads again after
// any gap in its watch.
func (c *Coordinator) Observe(ctx context.Context, k keyspace.Key, prefix string) (<-chan LockEvent, error) {
	base := c.layout.LockPrefix(k)
	if k.IsZero() {
		if err := keyspace.ValidatePrefix(prefix); err != nil {
			return nil, fmt.Errorf("watch: %w", err)
		}
		base = c.layout.ListPrefix(prefix)
	}
	o := &observer{c: c, base: base, one: k, out: make(chan LockEvent, 64), lines: map[string]*obsLine{}}
	tctx, cancel := c.cfg.etcdCtx(ctx)
	cs, rev, err := c.store.watches.Snapshot(tctx, base)
	cancel()
	if err != nil {
		return nil, unavailable("watch", err)
	}
	go o.run(ctx, cs, rev)
	return o.out, nil
}

// observer is one Observe.
type observer struct {
	c     *Coordinator
	base  string       // the etcd prefix watched
	one   keyspace.Key // the one lock watched; zero for a prefix
	out   chan LockEvent
	lines map[string]*obsLine // by lock prefix
	rev   int64               // the last revision told
}

// obsLine is one lock as the observer has it.
type obsLine struct {
	key  keyspace.Key
	cs   map[string]lockstore.Contender // by contender key
	told Status                         // the status last told
}

func (o *observer) run(ctx context.Context, cs []lockstore.Contender, rev int64) {
	defer close(o.out)
	first := true
	retry := retryBackoff(2 * time.Second)
	for ctx.Err() == nil {
		if !o.sync(ctx, cs, rev, !first) {
			return
		}
		first = false
		gap := o.follow(ctx, o.c.store.watches.WatchAll(ctx, o.base, rev+1))
		if ctx.Err() != nil {
			return
		}
		o.c.log.Info("lock watch: reading every watched lock again", "prefix", o.base, "revision", o.rev, "why", gap)
		for {
			select {
			case <-ctx.Done():
				return
			case <-o.c.clock.After(retry.NextBackOff()):
			}
			tctx, cancel := o.c.cfg.etcdCtx(ctx)
			var err error
			cs, rev, err = o.c.store.watches.Snapshot(tctx, o.base)
			cancel()
			if err == nil {
				retry.Reset()
				break
			}
		}
	}
}

// sync makes the observer's lines those of cs, read at rev: the state of
// each lock at the start, the difference after a gap (resync). It reports
// false when ctx ended.
func (o *observer) sync(ctx context.Context, cs []lockstore.Contender, rev int64, resync bool) bool {
	fresh := map[string]*obsLine{}
	for _, ct := range cs {
		k, pfx, ok := o.c.layout.ParseContender(ct.Key)
		if !ok {
			continue
		}
		l := fresh[pfx]
		if l == nil {
			l = &obsLine{key: k, cs: map[string]lockstore.Contender{}}
			fresh[pfx] = l
		}
		l.cs[ct.Key] = ct
	}
	rev = max(rev, o.rev)
	if !resync {
		if len(fresh) == 0 && !o.one.IsZero() {
			fresh[o.base] = &obsLine{key: o.one, cs: map[string]lockstore.Contender{}}
		}
		for pfx, l := range fresh {
			l.told = l.status()
			if !o.send(ctx, LockEvent{Kind: EventState, Key: l.key, Rev: rev, Status: l.told}) {
				return false
			}
			o.lines[pfx] = l
		}
	} else {
		for pfx, old := range o.lines {
			if _, still := fresh[pfx]; !still {
				fresh[pfx] = &obsLine{key: old.key, cs: map[string]lockstore.Contender{}}
			}
		}
		for pfx, l := range fresh {
			old := o.lines[pfx]
			if old == nil {
				old = &obsLine{key: l.key, cs: map[string]lockstore.Contender{}}
				o.lines[pfx] = old
			}
			gone := map[string]lockstore.Contender{}
			for key, ct := range old.cs {
				if _, ok := l.cs[key]; !ok {
					gone[key] = ct
				}
			}
			old.cs = l.cs
			if !o.tell(ctx, pfx, old, rev, gone, true) {
				return false
			}
		}
	}
	o.rev = rev
	return o.send(ctx, LockEvent{Kind: EventSynced, Rev: rev})
}

// follow applies the watch's changes until it ends, and says why it did.
func (o *observer) follow(ctx context.Context, wch <-chan lockstore.WatchResponse) (gap string) {
	for resp := range wch {
		switch {
		case resp.Compacted:
			return "the watch fell behind a compaction"
		case resp.Err != nil:
			return "the watch failed: " + resp.Err.Error()
		}
		for i := 0; i < len(resp.Changes); {
			// The changes of one revision (one transaction) together.
			rev, j := resp.Changes[i].Rev, i
			touched := map[string]map[string]lockstore.Contender{} // lock prefix → deleted contenders
			var order []string
			for ; j < len(resp.Changes) && resp.Changes[j].Rev == rev; j++ {
				pfx, deleted, ok := o.apply(resp.Changes[j])
				if !ok {
					continue
				}
				if _, seen := touched[pfx]; !seen {
					touched[pfx] = map[string]lockstore.Contender{}
					order = append(order, pfx)
				}
				if deleted != nil {
					touched[pfx][deleted.Key] = *deleted
				}
			}
			i = j
			for _, pfx := range order {
				if !o.tell(ctx, pfx, o.lines[pfx], rev, touched[pfx], false) {
					return ""
				}
			}
			o.rev = max(o.rev, rev)
		}
	}
	return "the watch ended"
}

// apply applies one change to its lock's line; deleted is the contender a
// delete removed, as the line had it.
func (o *observer) apply(ch lockstore.Change) (pfx string, deleted *lockstore.Contender, ok bool) {
	k, pfx, ok := o.c.layout.ParseContender(ch.Key)
	if !ok {
		return "", nil, false
	}
	l := o.lines[pfx]
	if l == nil {
		l = &obsLine{key: k, cs: map[string]lockstore.Contender{}}
		o.lines[pfx] = l
	}
	if ch.Deleted {
		if ct, had := l.cs[ch.Key]; had {
			delete(l.cs, ch.Key)
			return pfx, &ct, true
		}
		return pfx, nil, true
	}
	l.cs[ch.Key] = ch.Contender
	return pfx, nil, true
}

// tell sends the events that take l from the status last told to its
// status now, at revision rev; gone are the contenders deleted since. A
// lock nobody contends for any more is forgotten once told (but the one
// lock of a single-lock watch).
func (o *observer) tell(ctx context.Context, pfx string, l *obsLine, rev int64, gone map[string]lockstore.Contender, resync bool) bool {
	now := l.status()
	was := map[int64]string{} // the holders told, by fence: the value each announced
	for _, h := range l.told.Holders {
		was[h.Fence] = h.Holder.Value
	}
	is := map[int64]bool{}
	for _, h := range now.Holders {
		is[h.Fence] = true
	}
	var evs []LockEvent
	for _, h := range l.told.Holders {
		if !is[h.Fence] {
			evs = append(evs, LockEvent{Kind: o.ending(ctx, h, gone), Key: l.key, Rev: rev, Holder: h.Holder, Fence: h.Fence, Status: now, Resynced: resync})
		}
	}
	for _, h := range now.Holders {
		if _, told := was[h.Fence]; !told {
			evs = append(evs, LockEvent{Kind: EventGranted, Key: l.key, Rev: rev, Holder: h.Holder, Fence: h.Fence, Status: now, Resynced: resync})
		}
	}
	for _, h := range now.Holders {
		if v, ok := was[h.Fence]; ok && v != h.Holder.Value {
			evs = append(evs, LockEvent{Kind: EventProclaimed, Key: l.key, Rev: rev, Holder: h.Holder, Fence: h.Fence, Status: now, Resynced: resync})
		}
	}
	if len(evs) == 0 && now.Waiters != l.told.Waiters {
		evs = append(evs, LockEvent{Kind: EventQueued, Key: l.key, Rev: rev, Status: now, Resynced: resync})
	}
	l.told = now
	if len(l.cs) == 0 && o.one.IsZero() {
		delete(o.lines, pfx)
	}
	for _, ev := range evs {
		if !o.send(ctx, ev) {
			return false
		}
	}
	return true
}

// ending says how holder h ended: expired when its key went at or after
// its deadline, lost when its lease is gone, released otherwise.
func (o *observer) ending(ctx context.Context, h Holding, gone map[string]lockstore.Contender) EventKind {
	if !h.Holder.ExpiresAt.IsZero() && !o.c.now().Before(h.Holder.ExpiresAt) {
		return EventExpired
	}
	for _, ct := range gone {
		if ct.Create != h.Fence {
			continue
		}
		tctx, cancel := o.c.cfg.etcdCtx(ctx)
		lost, err := o.c.store.leases.LeaseGone(tctx, ct.Lease)
		cancel()
		if err == nil && lost {
			return EventLost
		}
	}
	return EventReleased
}

func (o *observer) send(ctx context.Context, ev LockEvent) bool {
	select {
	case o.out <- ev:
		return true
	case <-ctx.Done():
		return false
	}
}

// status is the lock's status as the line has it.
func (l *obsLine) status() Status {
	line := make([]lockstore.Contender, 0, len(l.cs))
	for _, ct := range l.cs {
		line = append(line, ct)
	}
	if len(line) == 0 {
		return Status{Key: l.key}
	}
	return statusOf(l.key, line)
}
