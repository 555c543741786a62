package coordinator

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/lockstore"
)

// A run-once lock guards work that must succeed once: a migration, a
// webhook's side effect. Its caller takes the lock to run the work and
// reports how it went with Finish, which writes the run's record
// (keyspace.Run, at Layout.Once) and lets the lock go in one etcd
// transaction that compares the holder's fence. Whoever asks later reads
// the record, before taking the lock (a read, no write, for the common
// "already done") and again once it holds it (a run that finished while
// it waited is not run twice). A run that failed, or whose holder crashed
// (its lock went without a record), may be run again by the next caller.

// Once is the policy of a run-once call, as Temporal's workflow-id reuse
// policies say it.
type Once struct {
	// IfDone says what a call does when a run succeeded within the
	// retention: OnceSkip (the default) answers ErrDone, OnceRerun runs
	// again.
	IfDone string
	// IfFailed says what it does when the last run failed: OnceRetry (the
	// default) runs again, OnceSkip answers ErrDone.
	IfFailed string
}

// Values of Once's fields.
const (
	OnceSkip  = "skip"
	OnceRerun = "rerun"
	OnceRetry = "retry"
)

// DoneError tells a run-once caller that the work is not to run: its
// last run succeeded (or failed, with IfFailed skip).
type DoneError struct {
	Key keyspace.Key
	Run keyspace.Run
}

func (e *DoneError) Error() string {
	what, verb, again := "done", "ran it", "if_done rerun"
	if e.Run.Status == keyspace.RunFailed {
		what, verb, again = "failed", "failed", "if_failed retry"
	}
	by := e.Run.Owner
	if e.Run.Pod != "" {
		by += " (pod " + e.Run.Pod + ")"
	}
	msg := fmt.Sprintf("%q is already %s: %s %s at %s (fence %d)", e.Key.String(), what, by, verb, e.Run.FinishedAt.UTC().Format(time.RFC3339), e.Run.Fence)
	if e.Run.Result != "" {
		msg += fmt.Sprintf(", result %q", e.Run.Result)
	}
	return msg + "; ask with " + again + " to run it again"
}

// Is makes errors.Is(err, ErrDone) true.
func (e *DoneError) Is(target error) bool { return target == ErrDone }

// checkOnce validates a run-once call and fills in its defaults.
func checkOnce(req *AcquireRequest) error {
	o := req.Once
	switch {
	case req.Claim != (keyspace.Claim{}):
		return invalid("once", "a run-once lock runs one caller at a time: leave out mode, limit and weight")
	case o.IfDone == "":
		o.IfDone = OnceSkip
	case o.IfDone != OnceSkip && o.IfDone != OnceRerun:
		return invalid("once", "if_done %q: use skip (do not run what succeeded) or rerun", o.IfDone)
	}
	switch o.IfFailed {
	case "":
		o.IfFailed = OnceRetry
	case OnceRetry, OnceSkip:
	default:
		return invalid("once", "if_failed %q: use retry (run again after a failure) or skip", o.IfFailed)
	}
	return nil
}

// acquireOnce is Acquire of a run-once call: granted only when the work
// is to run.
func (c *Coordinator) acquireOnce(ctx context.Context, req AcquireRequest) (Grant, error) {
	if err := c.cfg.checkAcquire(&req); err != nil {
		return Grant{}, err
	}
	if err := checkOnce(&req); err != nil {
		return Grant{}, fmt.Errorf("acquire %q: %w", req.Key, err)
	}
	// A caller that runs the key cannot wait for its own outcome.
	c.mu.Lock()
	e := c.locks[req.Key.String()]
	running := e != nil && e.held != nil && e.held.owner == req.Owner && !e.held.hold && !req.Hold
	var fence int64
	if running {
		fence = e.held.fence
	}
	c.unlock()
	if running {
		return Grant{}, fmt.Errorf("acquire %q: %w", req.Key, invalid("once", "%s is running %q already (fence %d) and cannot wait for its own outcome: report it with POST /v1/locks/%s:done",
			req.Owner, req.Key.String(), fence, req.Key.String()))
	}
	wctx := ctx
	if req.Wait > 0 && req.Wait != WaitForever {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, req.Wait)
		defer cancel()
	}
	if err := c.guard.within(wctx, req); err != nil {
		return Grant{}, fmt.Errorf("acquire %q: %w", req.Key, err)
	}
	if err := c.runs.settled(ctx, req); err != nil {
		return Grant{}, err
	}
	g, err := c.acquire(ctx, req)
	if err != nil {
		return Grant{}, err
	}
	// Held: a run that finished while this caller waited is not run again.
	if err := c.runs.settled(ctx, req); err != nil {
		if _, rerr := c.Release(context.WithoutCancel(ctx), req.Key, req.Owner); rerr != nil {
			c.log.Warn("cannot let go of a run-once lock whose work is done", "lock", req.Key.String(), "owner", req.Owner, "err", rerr)
		}
		return Grant{}, err
	}
	return g, nil
}

// runRecords are the records of the runs of run-once locks, which say
// whether the work is to run again.
type runRecords struct {
	records lockstore.Records
	layout  keyspace.Layout
	timeout time.Duration // Config.RequestTimeout: bounds each read
	now     func() time.Time
	log     *slog.Logger
}

// settled returns a *DoneError when the last run's record says req's work
// is not to run, nil when it is.
func (r *runRecords) settled(ctx context.Context, req AcquireRequest) error {
	run, found, err := r.last(ctx, req.Key)
	switch {
	case err != nil:
		return unavailable(fmt.Sprintf("acquire %q: read its run-once record", req.Key), err)
	case !found:
		return nil
	case run.Status == keyspace.RunSucceeded && req.Once.IfDone == OnceSkip,
		run.Status == keyspace.RunFailed && req.Once.IfFailed == OnceSkip:
		return fmt.Errorf("acquire %q: %w", req.Key, &DoneError{Key: req.Key, Run: run})
	}
	return nil
}

// LastRun reads the record of k's last finished run; found is false when
// there is none within the retention.
func (c *Coordinator) LastRun(ctx context.Context, k keyspace.Key) (run keyspace.Run, found bool, err error) {
	run, found, err = c.runs.last(ctx, k)
	if err != nil {
		return keyspace.Run{}, false, unavailable(fmt.Sprintf("read the run-once record of %q", k), err)
	}
	return run, found, nil
}

// last reads the record of k's last finished run, if it is within its
// retention.
func (r *runRecords) last(ctx context.Context, k keyspace.Key) (keyspace.Run, bool, error) {
	tctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	v, found, err := r.records.Read(tctx, r.layout.Once(k))
	if err != nil || !found {
		return keyspace.Run{}, false, err
	}
	run, err := keyspace.DecodeRun(v)
	if err != nil {
		r.log.Warn("ignoring a run-once record that cannot be read", "lock", k.String(), "err", err)
		return keyspace.Run{}, false, nil
	}
	if !r.now().Before(run.ExpiresAt) {
		return keyspace.Run{}, false, nil // past its retention; etcd deletes it soon
	}
	return run, true, nil
}

// Finish records the outcome of owner's run of k (succeeded when ok) with
// result, and lets the lock go, in one etcd transaction that compares the
// lock's fence: a holder that lost the lock records nothing.
func (c *Coordinator) Finish(ctx context.Context, k keyspace.Key, owner string, ok bool, result string) (keyspace.Run, error) {
	op := fmt.Sprintf("finish %q", k)
	if len(result) > keyspace.MaxResult {
		return keyspace.Run{}, fmt.Errorf("%s: %w", op, invalid("result", "is %d bytes long, at most %d are kept", len(result), keyspace.MaxResult))
	}
	e, h, err := c.ownedBy(ctx, k, owner)
	if err != nil {
		return keyspace.Run{}, fmt.Errorf("%s: %w", op, err)
	}
	now := c.now().UTC()
	id := c.cfg.Identity
	run := keyspace.Run{Status: keyspace.RunFailed, Owner: owner, Pod: id.Pod, Namespace: id.Namespace, Node: id.Node, Cluster: id.Cluster, Fence: h.fence,
		StartedAt: h.acquiredAt.UTC(), FinishedAt: now, Result: result, ExpiresAt: now.Add(c.cfg.OnceRetention)}
	if ok {
		run.Status = keyspace.RunSucceeded
	}
	// The record goes with a lease of its own when its retention ends.
	tctx, cancel := c.cfg.etcdCtx(ctx)
	lease, err := c.store.leases.GrantLease(tctx, c.cfg.OnceRetention)
	cancel()
	var out lockstore.Outcome
	if err == nil {
		out, err = c.store.records.Finish(h.etcdKey, h.fence, c.layout.Once(k), run.Encode(), lease, h.markerOf())
	}
	c.mu.Lock()
	defer c.unlock()
	defer h.settleLocked()
	if err != nil {
		return keyspace.Run{}, unavailable(op, err)
	}
	if e.held != h {
		if lost := c.ended.lost(c.now(), k, owner); lost != nil {
			return keyspace.Run{}, fmt.Errorf("%s: %w", op, lost)
		}
		return keyspace.Run{}, fmt.Errorf("%s: %w", op, ErrNotHeld)
	}
	if !out.OK {
		h.loseLocked(goneReason(h.sess))
		e.passTurnLocked()
		return keyspace.Run{}, fmt.Errorf("%s: %w", op, c.ended.lost(c.now(), k, owner))
	}
	h.endLocked()
	e.passTurnLocked()
	c.log.Info("run finished", "lock", k.String(), "owner", owner, "fence", h.fence, "status", run.Status, "ranFor", now.Sub(h.acquiredAt))
	return run, nil
}
