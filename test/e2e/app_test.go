//go:build e2e

package e2e

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"

	"github.com/baton-dev/baton/clients/go/lockapi"
)

// Operation kinds of a history.
const (
	opAcquire = "acquire"
	opRelease = "release"
	opLoss    = "loss" // the holder learned it lost the lock
)

// Results of an operation.
const (
	resOK      = "ok"
	resFail    = "fail"    // definitely not done
	resUnknown = "unknown" // maybe done: the answer was lost
	resLost    = "lost"
)

// never is the return time of an operation whose effect may land at any
// later time (porcupine reads it as "still pending").
const never = time.Duration(math.MaxInt64 / 4)

// histOp is one operation of one sequential app client.
type histOp struct {
	Client int
	Owner  string
	Lock   string
	Kind   string
	Result string
	Detail string // error code or loss reason
	Fence  int64
	// Limit is, for an acquisition of a semaphore, its units (each taken
	// one at a time); 0 for a lock.
	Limit int
	// Mode is "read" for a reader of a read/write lock.
	Mode   string
	Call   time.Duration
	Return time.Duration
	// Told is when a holder stopped believing it held the lock: it asked to
	// release, or heard it was lost (release and loss operations).
	Told time.Duration
}

// history records the operations of every app client against one clock.
type history struct {
	base time.Time
	mu   sync.Mutex
	ops  []histOp
}

func newHistory(base time.Time) *history { return &history{base: base} }

func (h *history) now() time.Duration { return time.Since(h.base) }

func (h *history) add(op histOp) {
	h.mu.Lock()
	h.ops = append(h.ops, op)
	h.mu.Unlock()
}

func (h *history) snapshot() []histOp {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]histOp(nil), h.ops...)
}

// app is one sequential app client: it asks its sidecar for a lock over a
// hold stream, works on the store with the fence while it holds it, and
// releases it, recording every operation.
type app struct {
	id    int
	owner string
	sc    *sidecar
	store *storeClient
	h     *history
}

// holdPlan says what an app does with each acquisition.
type holdPlan struct {
	wait       time.Duration // how long to wait for the lock; 0 is a try
	increments int           // fenced increments per hold, at least
	holdFor    time.Duration // keep incrementing this long, unless told lost
	pause      time.Duration // think time between acquisitions, up to
	// limit makes the lock a semaphore of limit units, one per holder.
	// Its holders overlap by design, so they do not touch the store
	// (whose fence and lost-update checks assume one holder at a time).
	limit int
	// mode "read" makes the holder a reader of a read/write lock; readers
	// overlap by design and do not touch the store either.
	mode string
}

// once makes one acquisition and reports whether it was granted.
func (a *app) once(ctx context.Context, lock string, p holdPlan) bool {
	call := a.h.now()
	acq := histOp{Client: a.id, Owner: a.owner, Lock: lock, Kind: opAcquire, Call: call, Limit: p.limit, Mode: p.mode}
	req := lockapi.Request{Owner: a.owner, Limit: p.limit, Mode: p.mode}
	if p.wait > 0 {
		req.Wait = p.wait.String()
	}
	// The stream outlives ctx once granted: a holder stopped by the
	// scenario ends its hold by releasing, as an app does.
	hctx, cancelHold := context.WithCancel(context.Background())
	defer cancelHold()
	detach := context.AfterFunc(ctx, cancelHold)
	st, err := a.sc.client.Hold(hctx, lock, req)
	if err != nil {
		acq.Result, acq.Detail = classify(err)
		acq.Return = a.h.now()
		if acq.Result == resUnknown {
			acq.Return = never
		}
		a.h.add(acq)
		return false
	}
	var granted lockapi.Event
	for {
		ev, err := st.Next()
		if err != nil {
			acq.Result, acq.Detail, acq.Return = resUnknown, "stream: "+err.Error(), never
			a.h.add(acq)
			st.Close()
			return false
		}
		if ev.Event == "queued" || ev.Event == "heartbeat" {
			continue
		}
		if ev.Event != "granted" {
			acq.Result, acq.Detail, acq.Return = resFail, ev.Event+" "+ev.Code, a.h.now()
			a.h.add(acq)
			st.Close()
			return false
		}
		granted = ev
		break
	}
	detach()
	acq.Result, acq.Fence, acq.Return = resOK, granted.Fence, a.h.now()
	a.h.add(acq)

	// Watch the stream for a loss while working.
	type ending struct {
		at     time.Duration
		reason string
		eof    bool
	}
	ended := make(chan ending, 1)
	go func() {
		for {
			ev, err := st.Next()
			if err != nil {
				ended <- ending{at: a.h.now(), reason: "stream ended", eof: true}
				return
			}
			if ev.Event == "lost" {
				ended <- ending{at: a.h.now(), reason: ev.Reason}
				return
			}
		}
	}()
	start := time.Now()
	var end *ending
work:
	for i := 0; i < p.increments || time.Since(start) < p.holdFor; i++ {
		select {
		case e := <-ended:
			end = &e
			break work
		case <-ctx.Done():
			break work
		default:
		}
		if p.limit > 1 || p.mode == "read" {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		if err := a.store.increment(lock, granted.Fence, a.owner); errors.Is(err, errFenced) {
			break // the resource has seen a newer holder: stop working
		}
	}
	loss := histOp{Client: a.id, Owner: a.owner, Lock: lock, Kind: opLoss, Result: resLost, Fence: granted.Fence}
	stoppedAt := never // when the app asked to release
	if end == nil {
		rel := histOp{Client: a.id, Owner: a.owner, Lock: lock, Kind: opRelease, Fence: granted.Fence, Call: a.h.now()}
		rel.Told = rel.Call
		stoppedAt = rel.Call
		rctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		_, err := a.sc.client.Release(rctx, lock, a.owner)
		cancel()
		rel.Return = a.h.now()
		var apiErr *lockapi.Error
		switch {
		case err == nil:
			rel.Result = resOK
			a.h.add(rel)
		case errors.As(err, &apiErr) && apiErr.Status == http.StatusGone:
			// Lost before the release: the stream says when, or else it
			// happened at some point of the hold.
			select {
			case e := <-ended:
				end = &e
			case <-time.After(time.Second):
				loss.Call, loss.Return, loss.Told, loss.Detail = acq.Return, rel.Return, rel.Call, "release answered lost"
				a.h.add(loss)
			}
		default:
			rel.Result, rel.Detail = resUnknown, err.Error()
			rel.Return = never
			a.h.add(rel)
		}
	}
	if end != nil {
		loss.Call, loss.Return, loss.Told, loss.Detail = end.at, end.at, min(end.at, stoppedAt), end.reason
		if end.eof {
			// The sidecar died or hung up: the lock is freed when etcd
			// expires its lease, at some later time.
			loss.Return = never
		}
		a.h.add(loss)
	}
	st.Close()
	return true
}

// loop acquires until ctx ends or n acquisitions were granted (n = 0: no
// bound).
func (a *app) loop(ctx context.Context, lock string, n int, p holdPlan) {
	for got := 0; ctx.Err() == nil && (n == 0 || got < n); {
		pause := p.pause
		if a.once(ctx, lock, p) {
			got++
		} else {
			pause = max(pause, 200*time.Millisecond) // e.g. the sidecar is down
		}
		if pause > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(rand.N(pause)):
			}
		}
	}
}

// classify turns an error of the sidecar client into a result.
func classify(err error) (result, detail string) {
	var apiErr *lockapi.Error
	switch {
	case errors.As(err, &apiErr):
		if apiErr.Status == http.StatusServiceUnavailable {
			return resUnknown, apiErr.Code
		}
		return resFail, apiErr.Code
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ENOENT):
		return resFail, "sidecar down"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return resUnknown, err.Error()
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "dial" {
		return resFail, "sidecar down"
	}
	return resUnknown, err.Error()
}

// stopContext is a context cancelled when stop is closed.
func stopContext(stop <-chan struct{}) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}
