package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/lockstore"
)

// etcdReader reads etcd for what the engine tells without deciding it: who
// holds a lock that refused a caller, the line of a shared lock, the
// status of locks. Its mutex guards only the reads in flight, so a refusal
// reads without the coordinator's.
type etcdReader struct {
	lines    lockstore.Lines
	watches  lockstore.Watches
	layout   keyspace.Layout
	timeout  time.Duration // Config.RequestTimeout: bounds each read
	now      func() time.Time
	mu       engineMutex            // guards inflight
	inflight map[string]*sharedRead // by lock: the read of its first contender in flight
}

// sharedRead is one linearizable read of the first contender of a lock,
// shared by every caller that asked for it before it started. Callers that
// ask while it is in flight share the next one, which starts when it ends:
// a read never answers a caller that arrived after it began, so each
// answer is etcd's as of a moment after the caller asked. A burst of tries
// on one held lock (a webhook delivered many times, a resume button
// clicked repeatedly) then costs etcd a read or two, not one per caller.
type sharedRead struct {
	done  chan struct{}        // closed when first and err are set
	first *lockstore.Contender // nil when the lock is free
	err   error
	next  *sharedRead // joined by the callers arriving while this one is in flight
}

// first reads the first contender of k, nil when k is free, sharing the
// read as sharedRead says.
func (r *etcdReader) first(ctx context.Context, k keyspace.Key) (*lockstore.Contender, error) {
	name := k.String()
	r.mu.Lock()
	sr := r.inflight[name]
	if sr == nil {
		sr = &sharedRead{done: make(chan struct{})}
		r.inflight[name] = sr
		r.mu.Unlock()
		r.read(k, sr)
		return sr.first, sr.err
	}
	if sr.next == nil {
		sr.next = &sharedRead{done: make(chan struct{})}
	}
	n := sr.next
	r.mu.Unlock()
	select {
	case <-n.done:
		return n.first, n.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// firstNow reads the first contender of k, nil when k is free, for one
// caller: a try with the turn, whose outcome the lock's other tries here
// wait for and share (entry.trying), so that its read is not shared. A
// caller that hangs up ends it.
func (r *etcdReader) firstNow(ctx context.Context, k keyspace.Key) (*lockstore.Contender, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	return r.lines.First(ctx, r.layout.LockPrefix(k))
}

// read performs sr, then starts the read its latecomers joined, if any.
func (r *etcdReader) read(k keyspace.Key, sr *sharedRead) {
	sr.first, sr.err = r.firstNow(context.Background(), k)
	r.mu.Lock()
	if sr.next != nil {
		r.inflight[k.String()] = sr.next
		go r.read(k, sr.next)
	} else {
		delete(r.inflight, k.String())
	}
	r.mu.Unlock()
	close(sr.done)
}

// refusal reads who holds k (a read, no write) for a refused caller.
func (r *etcdReader) refusal(ctx context.Context, k keyspace.Key, waited bool, wait time.Duration) error {
	first, err := r.first(ctx, k)
	if err != nil {
		return unavailable(fmt.Sprintf("acquire %q", k), err)
	}
	return r.holders(ctx, k, first, waited, wait)
}

// refusedBy is the refusal of an exclusive try by first, the lock's first
// contender: a semaphore's tells the caller that it asks for the wrong
// kind of lock; readers' are named all, which one more read finds.
func (r *etcdReader) refusedBy(ctx context.Context, k keyspace.Key, first *lockstore.Contender) error {
	if first != nil && !first.Holder.Foreign && first.Holder.Limit > 0 {
		return fmt.Errorf("acquire %q: %w", k, &MismatchError{Key: k, InForce: first.Holder.Claim, Holder: first.Holder, Fence: first.Create})
	}
	return r.holders(ctx, k, first, false, 0)
}

// holders is the refusal naming first, and with it every holder when
// first shares the lock (a read more; if it fails, first alone).
func (r *etcdReader) holders(ctx context.Context, k keyspace.Key, first *lockstore.Contender, waited bool, wait time.Duration) error {
	if first != nil && !first.Holder.Foreign && !keyspace.ClaimOf(first.Holder).IsExclusive() {
		if line, err := r.lineOf(ctx, k); err == nil && len(line) > 0 {
			return sharedHeld(k, line, waited, wait)
		}
	}
	return heldFrom(k, first, waited, wait)
}

// lineOf reads the line of k: its contenders, first created first.
func (r *etcdReader) lineOf(ctx context.Context, k keyspace.Key) ([]lockstore.Contender, error) {
	tctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	cs, _, err := r.watches.Contenders(tctx, r.layout.LockPrefix(k), 0)
	if err != nil {
		return nil, err
	}
	sortLine(cs)
	return cs, nil
}

// ahead reads the contenders created before myRev, the last created
// first (none when key is first in line), the revision the read saw, and
// whether key (created at myRev) still exists.
func (r *etcdReader) ahead(ctx context.Context, key, pfx string, myRev int64) (ahead []string, rev int64, mine bool, err error) {
	tctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	return r.lines.Ahead(tctx, pfx, key, myRev)
}

// summarize returns the status of each lock of the contenders cs, in the
// order the locks first appear. A lock's holders are the front of its
// line that keyspace.Holders says; its waiters are the callers of every
// contender (each counts those queued behind it in its sidecar) but the
// holders.
func (r *etcdReader) summarize(cs []lockstore.Contender) []Status {
	var order []string
	lines := map[string][]lockstore.Contender{}
	keys := map[string]keyspace.Key{}
	for _, ct := range cs {
		k, pfx, ok := r.layout.ParseContender(ct.Key)
		if !ok {
			continue
		}
		if _, seen := lines[pfx]; !seen {
			order = append(order, pfx)
			keys[pfx] = k
		}
		lines[pfx] = append(lines[pfx], ct)
	}
	locks := make([]Status, 0, len(order))
	for _, pfx := range order {
		locks = append(locks, statusOf(keys[pfx], lines[pfx]))
	}
	return locks
}

// waitFailed turns the end of a wait into the caller's error: a wait that
// ran out is a refusal naming the holder.
func (r *etcdReader) waitFailed(ctx context.Context, k keyspace.Key, start time.Time, err error) error {
	if errors.Is(context.Cause(ctx), errWaitOver) {
		return r.refusal(context.WithoutCancel(ctx), k, true, r.now().Sub(start))
	}
	return fmt.Errorf("acquire %q: %w", k, err)
}
