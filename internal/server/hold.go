package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/baton-dev/baton/clients/go/lockapi"
	"github.com/baton-dev/baton/internal/coordinator"
	"github.com/baton-dev/baton/internal/keyspace"
)

// stream writes events, sending the 200 and its headers with the first.
type stream struct {
	w       http.ResponseWriter
	flusher http.Flusher
	enc     *json.Encoder
	started bool
}

func (st *stream) send(ev lockapi.Event) error {
	if !st.started {
		h := st.w.Header()
		h.Set("Content-Type", "application/x-ndjson")
		h.Set("Cache-Control", "no-store")
		st.w.WriteHeader(http.StatusOK)
		st.started = true
	}
	if ev.At.IsZero() {
		ev.At = time.Now().UTC()
	}
	if err := st.enc.Encode(ev); err != nil {
		return err
	}
	st.flusher.Flush()
	return nil
}

type acquired struct {
	g   coordinator.Grant
	err error
}

// hold serves POST /v1/locks/{key}:hold: acquire, then keep the lock while
// the connection stays open, telling the caller what happens to it. The
// lock's ttl is a renewal window: while the stream is open, its deadline is
// moved on before it comes (coordinator.Hold), so the lock lasts as long as its
// caller, up to the max_hold the caller may have set. When the caller
// hangs up, the lock is released (or the waiter withdrawn).
func (s *Server) hold(w http.ResponseWriter, r *http.Request, k keyspace.Key) {
	b, err := s.body(w, r)
	if err != nil {
		writeError(w, err)
		return
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		writeError(w, errors.New("this connection cannot stream"))
		return
	}
	req := b.AcquireRequest
	req.Caller = callerOf(r.Context())
	if req.Owner == "" {
		req.Owner = coordinator.NewOwner() // known before the grant, for queued events
	}
	ctx := r.Context()
	st := &stream{w: w, flusher: flusher, enc: json.NewEncoder(w)}
	pos := coordinator.NewPosition()
	req.Key, req.Hold, req.Position = k, true, pos
	if !b.waitGiven && s.electionsServed() {
		req.Wait = coordinator.WaitForever // a campaign lasts as long as it takes
	}
	res := make(chan acquired, 1)
	go func() {
		g, err := s.co.Acquire(ctx, req)
		res <- acquired{g, err}
	}()
	tick := time.NewTicker(s.cfg.HeartbeatInterval)
	defer tick.Stop()

	var g coordinator.Grant
	for g.Fence == 0 {
		select {
		// A send fails when the caller hung up, which also ends the wait
		// (the request's context) and so comes back through res.
		case <-pos.Changed():
			_ = st.send(lockapi.Event{Event: lockapi.EventQueued, Key: k.String(), Owner: req.Owner, Position: pos.Ahead()})
		case <-tick.C:
			// A caller that waits hears heartbeats from the first tick,
			// queued or not yet (a wait riding out etcd or the policy
			// being unknown): its connection stays alive. A try's answer
			// comes before any tick, as a plain status when refused.
			if st.started || req.Wait > 0 {
				_ = st.send(lockapi.Event{Event: lockapi.EventHeartbeat, Key: k.String()})
			}
		case a := <-res:
			if a.err != nil {
				s.holdFailed(w, r, st, k, a.err)
				return
			}
			g = a.g
		}
	}
	draining, ok := s.drain.admit()
	if !ok {
		// The sidecar began to shut down while the grant was in flight:
		// nobody heard of it, so nothing was started under it.
		s.co.Keep(context.Background(), g).Release("the sidecar is shutting down")
		s.holdFailed(w, r, st, k, fmt.Errorf("acquire %q: %w: shutting down", k.String(), coordinator.ErrUnavailable))
		return
	}
	defer s.drain.leave()
	if err := st.send(grantEvent(g)); err != nil || ctx.Err() != nil {
		s.co.Keep(context.Background(), g).Release("the caller hung up before the grant reached it")
		return
	}
	s.log.Debug("hold stream granted", "lock", k.String(), "owner", g.Owner, "fence", g.Fence)
	s.keep(ctx, st, k, g, tick, draining)
}

// keep keeps g for a hold stream until it ends or the caller goes (a
// coordinator.Hold: it renews the lock, and lets it go as abandoned when
// the caller hangs up or the stream cannot be written), sending heartbeats
// and how the lock ended. When the sidecar drains (Drain), the caller is
// told its lock ends (lost, reason shutdown), and the lock is kept until
// the caller hangs up: what it started must be stopped before anyone else
// can have the lock.
func (s *Server) keep(ctx context.Context, st *stream, k keyspace.Key, g coordinator.Grant, tick *time.Ticker, draining <-chan struct{}) {
	ctx, gone := context.WithCancelCause(ctx)
	defer gone(nil)
	hold := s.co.Keep(ctx, g)
	renewed := g.Renewed()
	beat := func() {
		now := time.Now()
		ev := lockapi.Event{Event: lockapi.EventHeartbeat, Key: k.String(), Owner: g.Owner, Fence: g.Fence, ExpiresAt: hold.Grant().ExpiresAt.UTC(),
			ValidFor: g.ValidFor(now).Seconds(), At: now.UTC()}
		if err := st.send(ev); err != nil {
			gone(errors.New("the hold stream could not be written"))
		}
	}
	for {
		select {
		case <-hold.Done():
			if ctx.Err() != nil {
				return // the caller went, and the lock with it: nobody to tell
			}
			ev := lockapi.Event{Event: lockapi.EventReleased, Key: k.String(), Owner: g.Owner, Fence: g.Fence}
			var lost *coordinator.LostError
			if errors.As(hold.Err(), &lost) {
				ev.Event, ev.Reason, ev.Code, ev.Message = lockapi.EventLost, string(lost.Reason), lockapi.CodeLockLost, lost.Error()
			}
			_ = st.send(ev) // the last event: a caller gone meanwhile changes nothing
			return
		case <-draining:
			draining = nil
			_ = st.send(lockapi.Event{Event: lockapi.EventLost, Key: k.String(), Owner: g.Owner, Fence: g.Fence, Reason: string(coordinator.Shutdown), Code: lockapi.CodeLockLost,
				Message: fmt.Sprintf("%s %q (fence %d) held by %s: the sidecar is shutting down; stop the work and hang up: it is kept until then, for the sidecar's --shutdown-grace at most", s.kind(), k.String(), g.Fence, g.Owner)})
		case <-renewed:
			// The lease was renewed: the holder hears at once how much
			// longer its lock is certainly its own.
			renewed = g.Renewed()
			beat()
		case <-tick.C:
			beat()
		}
	}
}

// holdFailed answers an acquire that failed: as a plain HTTP error when
// nothing was streamed yet, else as the stream's last event.
func (s *Server) holdFailed(w http.ResponseWriter, r *http.Request, st *stream, k keyspace.Key, err error) {
	if !st.started {
		s.fail(w, r, err)
		return
	}
	if errors.Is(err, coordinator.ErrForbidden) {
		s.auditDenied(r.Context(), err) // a waiter refused at its grant
	}
	_, body := classify(err)
	ev := lockapi.Event{Event: lockapi.EventError, Key: k.String(), Code: body.Code, Message: body.Message, Holder: body.Holder, Fence: body.Fence, Run: body.Run, RetryAt: body.RetryAt}
	if body.Code == lockapi.CodeWaitTimeout || body.Code == lockapi.CodeAlreadyRunning || body.Code == lockapi.CodeAlreadyDone || body.Code == lockapi.CodeLockDelayed {
		ev.Event = lockapi.EventRefused
	}
	_ = st.send(ev) // the last event: a caller gone meanwhile changes nothing
}

func grantEvent(g coordinator.Grant) lockapi.Event {
	now := time.Now()
	return lockapi.Event{Event: lockapi.EventGranted, Key: g.Key.String(), Owner: g.Owner, Fence: g.Fence,
		AcquiredAt: g.AcquiredAt.UTC(), ExpiresAt: g.ExpiresAt.UTC(), MaxHoldAt: g.MaxHoldAt.UTC(), ValidFor: g.ValidFor(now).Seconds(),
		LeaseTTL: g.LeaseTTL().Seconds(), Value: g.Value, At: now.UTC()}
}
