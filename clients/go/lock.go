package baton

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/baton-dev/baton/clients/go/lockapi"
)

// ErrReleased is the cause of a Lock's context once the lock is being
// released: by Release, because the context given to Client.Lock ended, or
// by another caller's DELETE with the same owner. The context ends before
// the lock is let go, so that no work runs on after it.
var ErrReleased = errors.New("the lock was released")

// Reasons of a LostError besides those of the API's lost event
// (lockapi.EventLost: expired, lease_lost, force_released, shutdown,
// max_hold, etcd_rewound).
const (
	// ReasonStreamEnded: the hold stream ended without a last line, the
	// sidecar having stopped or crashed or the connection broken. The
	// lock ended with it, or is about to.
	ReasonStreamEnded = "stream_ended"
	// ReasonSilent: nothing was heard from the sidecar past the last
	// line's valid_for_seconds (the sidecar froze, or lost etcd and
	// could not say so): the lock may be someone else's by now.
	ReasonSilent = "silent"
)

// LostError is the cause of a Lock's context when the lock ended without
// its holder's release: the work done under it must stop, for another
// holder may already have the lock.
type LostError struct {
	Key   string
	Fence int64
	// Reason is why: a reason of the API's lost event, ReasonStreamEnded
	// or ReasonSilent.
	Reason  string
	Message string
}

func (e *LostError) Error() string {
	return fmt.Sprintf("lock %q (fence %d) lost: %s: %s", e.Key, e.Fence, e.Reason, e.Message)
}

// Lock is a lock held through a hold stream (Client.Lock): the sidecar
// renews it for as long as the stream is open. Its Context is done as soon
// as the lock ends or may have ended, whichever way, so that work run under
// that context stops with it; Err then says why. Its methods may be called
// from any goroutine.
type Lock struct {
	client *Client
	space  space // the lock's, or an election's for a leadership (Client.Lead)
	stream *Stream
	grant  lockapi.Event
	ctx    context.Context
	cancel context.CancelCauseFunc
	// ended is closed once the stream is read no more and closed; stop
	// ends the reader then.
	ended chan struct{}
	stop  chan struct{}
	// byStream is set, before the context ends, when the stream ended the
	// lock: lost, or released by another caller with the lock's owner.
	byStream atomic.Bool
	// released sends the lock's one DELETE; released, releaseErr its
	// answer.
	releasing  sync.Once
	released   lockapi.Released
	releaseErr error
}

// Lock takes key and holds it until Release, until ctx ends (then it is
// released), or until it is lost. It waits for the lock as req.Wait says
// (lockapi.WaitForever for as long as it takes; none: a try). A refusal
// (already_running, wait_timeout, lock_delayed, already_done, an error
// event) is a *lockapi.Error whose Status is 0, as it came on a stream
// already answered 200; a refusal before the stream is the API's answer,
// with its status. If ctx ends while waiting, the wait is withdrawn and
// ctx's cause returned.
func (c *Client) Lock(ctx context.Context, key string, req lockapi.Request) (*Lock, error) {
	return c.lockOf(ctx, locks, key, req)
}

// lockOf is Lock of a line of sp: a lock, or an election (Lead).
func (c *Client) lockOf(ctx context.Context, sp space, key string, req lockapi.Request) (*Lock, error) {
	if err := ctx.Err(); err != nil {
		return nil, context.Cause(ctx)
	}
	// The stream outlives ctx by the release that ctx's end sets off, but
	// not while it waits: until the grant, ctx's end ends the stream.
	hctx, hangUp := context.WithCancel(context.WithoutCancel(ctx))
	stopWaiting := context.AfterFunc(ctx, hangUp)
	defer stopWaiting()
	st, err := c.streamOf(hctx, sp, key, req)
	if err != nil {
		hangUp()
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		return nil, err
	}
	for {
		ev, err := st.Next()
		switch {
		case err != nil:
			st.Close()
			if ctx.Err() != nil {
				return nil, context.Cause(ctx)
			}
			return nil, fmt.Errorf("lock %q: the sidecar's stream ended before a grant: %w", key, err)
		case ev.Event == lockapi.EventRefused || ev.Event == lockapi.EventError:
			st.Close()
			return nil, refusal(key, ev)
		case ev.Event != lockapi.EventGranted:
			continue // queued, heartbeat
		}
		if !stopWaiting() { // ctx ended at the grant: release, then hang up
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			_, _ = c.release(rctx, sp, key, ev.Owner)
			cancel()
			st.Close()
			return nil, context.Cause(ctx)
		}
		l := &Lock{client: c, space: sp, stream: st, grant: ev, ended: make(chan struct{}), stop: make(chan struct{})}
		l.ctx, l.cancel = context.WithCancelCause(context.WithoutCancel(ctx))
		go l.run(ctx)
		return l, nil
	}
}

// refusal is the error of a stream's refused or error event.
func refusal(key string, ev lockapi.Event) *lockapi.Error {
	e := &lockapi.Error{Code: ev.Code, Message: ev.Message, Key: key, Holder: ev.Holder,
		Fence: ev.Fence, Run: ev.Run, RetryAt: ev.RetryAt}
	if ev.Event == lockapi.EventRefused {
		e.Granted = new(bool)
	}
	if e.Message == "" {
		e.Message = fmt.Sprintf("lock %q not granted: %s", key, ev.Code)
	}
	return e
}

// run reads the stream until the lock ends, and ends the lock's context
// with the reason.
func (l *Lock) run(parent context.Context) {
	defer close(l.ended)
	defer l.stream.Close()
	defer close(l.stop)
	events := make(chan streamed, 1)
	go l.read(events)
	silence := time.NewTimer(time.Hour)
	defer silence.Stop()
	l.arm(silence)
	for {
		select {
		case r := <-events:
			if cause := l.ends(r); cause != nil {
				l.byStream.Store(true)
				l.cancel(cause)
				return
			}
			l.arm(silence)
		case <-silence.C:
			l.byStream.Store(true)
			l.cancel(l.lost(ReasonSilent, fmt.Sprintf("nothing heard from the sidecar since the lock was valid until %s", l.stream.ValidUntil().Format(time.RFC3339Nano))))
			return
		case <-parent.Done():
			parent = context.Background() // heard once
			l.cancel(ErrReleased)         // the work stops before the lock goes
			go l.letGo()
		}
	}
}

// streamed is one read of the stream.
type streamed struct {
	ev  lockapi.Event
	err error
}

// read passes the stream's events to run until the stream ends or run
// stops.
func (l *Lock) read(events chan<- streamed) {
	for {
		ev, err := l.stream.Next()
		select {
		case events <- streamed{ev, err}:
		case <-l.stop:
			return
		}
		if err != nil {
			return
		}
	}
}

// ends returns the cause of the lock's end that r says, or nil while the
// lock is held.
func (l *Lock) ends(r streamed) error {
	switch {
	case r.err != nil:
		return l.lost(ReasonStreamEnded, "the sidecar's stream ended without a last line: "+r.err.Error())
	case r.ev.Event == lockapi.EventReleased:
		return ErrReleased
	case r.ev.Event == lockapi.EventLost:
		return l.lost(r.ev.Reason, r.ev.Message)
	}
	return nil
}

func (l *Lock) lost(reason, message string) *LostError {
	return &LostError{Key: l.grant.Key, Fence: l.grant.Fence, Reason: reason, Message: message}
}

// arm sets silence to fire when the lock stops being certainly the
// caller's without a later line (never when the sidecar says nothing of
// it).
func (l *Lock) arm(silence *time.Timer) {
	until := l.stream.ValidUntil()
	if until.IsZero() {
		silence.Reset(time.Duration(1<<63 - 1))
		return
	}
	silence.Reset(time.Until(until))
}

// letGo releases the lock once the context given to Lock ends. If the
// sidecar cannot be asked, closing the stream lets the lock go (held back
// by its lock delay, if it has one).
func (l *Lock) letGo() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := l.Release(ctx); err != nil {
		if _, answered := errors.AsType[*lockapi.Error](err); !answered {
			l.stream.Close()
		}
	}
}

// Release releases the lock and returns once its stream says so. The
// lock's context ends first (ErrReleased), then one DELETE is sent, by the
// first call of Release or by the end of the context given to Lock; later
// calls return its answer. A lock that ended before (lost, or released by
// another caller) is not asked for: Release then returns the loss (a
// *LostError), or nil. A lock found lost as it is released (the sidecar
// answered 410 lock_lost) is a *LostError too, with the API's reason.
func (l *Lock) Release(ctx context.Context) (lockapi.Released, error) {
	l.releasing.Do(func() {
		// Ended by the stream, even if its reader has not closed it yet
		// (a caller that saw Done may get here first): nothing of the
		// caller's is left to release, and a DELETE could free a later
		// lock of the same owner.
		if l.byStream.Load() {
			if cause := context.Cause(l.ctx); !errors.Is(cause, ErrReleased) {
				l.releaseErr = cause
			}
			return
		}
		l.cancel(ErrReleased)
		l.released, l.releaseErr = l.client.release(ctx, l.space, l.grant.Key, l.grant.Owner)
		if e, ok := errors.AsType[*lockapi.Error](l.releaseErr); ok && e.Code == lockapi.CodeLockLost {
			l.releaseErr = l.lost(e.Reason, e.Message)
		}
	})
	if l.releaseErr != nil {
		return l.released, l.releaseErr
	}
	select {
	case <-l.ended:
		return l.released, nil
	case <-ctx.Done():
		return l.released, context.Cause(ctx)
	}
}

// Context is done once the lock ended or may have ended; its cause
// (context.Cause, or Err) says why.
func (l *Lock) Context() context.Context { return l.ctx }

// Done is closed once the lock ended or may have ended.
func (l *Lock) Done() <-chan struct{} { return l.ctx.Done() }

// Err is nil while the lock is held; then ErrReleased after a release,
// or a *LostError saying why the lock was lost.
func (l *Lock) Err() error {
	if l.ctx.Err() == nil {
		return nil
	}
	return context.Cause(l.ctx)
}

// Fence is the lock's fencing token: pass it to whatever the work writes,
// which refuses a write with a lower fence than it has seen.
func (l *Lock) Fence() int64 { return l.grant.Fence }

// Key is the lock's key.
func (l *Lock) Key() string { return l.grant.Key }

// Owner is the owner the lock is held by (the request's, or the one the
// sidecar chose).
func (l *Lock) Owner() string { return l.grant.Owner }

// Grant is the stream's granted event.
func (l *Lock) Grant() lockapi.Event { return l.grant }

// ValidUntil is until when the lock is certainly still the caller's if
// nothing more is heard from the sidecar (Stream.ValidUntil).
func (l *Lock) ValidUntil() time.Time { return l.stream.ValidUntil() }

// WithLock takes key as Lock does, runs work with a context that is done
// as soon as the lock ends, and releases the lock when work returns. It
// returns work's error, and a *LostError too when the lock was lost
// before work returned, whatever work returned.
func (c *Client) WithLock(ctx context.Context, key string, req lockapi.Request, work func(context.Context, *Lock) error) error {
	l, err := c.Lock(ctx, key, req)
	if err != nil {
		return err
	}
	werr := work(l.Context(), l)
	if lost, ok := errors.AsType[*LostError](l.Err()); ok {
		return joinLoss(werr, lost)
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if _, err := l.Release(rctx); err != nil {
		if lost, ok := errors.AsType[*LostError](err); ok {
			return joinLoss(werr, lost)
		}
		return errors.Join(werr, fmt.Errorf("release lock %q: %w", key, err))
	}
	return werr
}

// joinLoss is work's error with the loss, once.
func joinLoss(werr error, lost *LostError) error {
	if errors.Is(werr, lost) {
		return werr
	}
	return errors.Join(werr, lost)
}
