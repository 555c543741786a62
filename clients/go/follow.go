package baton

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/baton-dev/baton/clients/go/lockapi"
)

// FollowOptions tune Follow. The zero value is ready to use.
type FollowOptions struct {
	// Silence is how long Follow waits for a line (the sidecar sends a
	// heartbeat every 5 s) before it takes the watch for dead and
	// connects again. Default 20s.
	Silence time.Duration
	// MaxBackoff caps the pause between two attempts to connect again,
	// which starts at 100ms and doubles. Default 5s.
	MaxBackoff time.Duration
	// OnGap, if set, is told why the watch ended each time Follow starts
	// to connect again.
	OnGap func(err error)
	// OnRetry, if set, is told why each attempt to connect again failed.
	OnRetry func(err error)
	// OnResumed, if set, is told when the watch is back, before its
	// first event.
	OnResumed func()
}

func (o FollowOptions) withDefaults() FollowOptions {
	if o.Silence <= 0 {
		o.Silence = 20 * time.Second
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 5 * time.Second
	}
	return o
}

// Follow watches key (or, with key "", every lock under prefix) as Watch
// does and hands each event to emit, until ctx ends (nil), emit fails (its
// error) or the sidecar refuses the watch (a *lockapi.Error). Unlike
// Watch it outlives the sidecar: when the stream ends or falls silent (a
// restart, a new pod's sidecar on the same socket, a frozen sidecar),
// Follow connects again and reads the locks anew. The states of that read
// are marked Resynced, and a lock it knew held that the new read no longer
// shows gets a Resynced state of its own, free, before the synced line: an
// observer never keeps a holder that ended while it was away. Only the
// first connection's failure ends Follow at once, so that a wrong socket
// is told, not waited on.
func (c *Client) Follow(ctx context.Context, key, prefix string, opts FollowOptions, emit func(lockapi.WatchEvent) error) error {
	opts = opts.withDefaults()
	// A watch's answer starts at once: a sidecar that does not answer
	// within the silence is as dead as one that falls silent later.
	c = &Client{socket: c.socket, http: &http.Client{Transport: &http.Transport{
		DialContext:           c.http.Transport.(*http.Transport).DialContext,
		ResponseHeaderTimeout: opts.Silence,
	}}}
	w, err := c.Watch(ctx, key, prefix)
	if err != nil {
		return err
	}
	known := map[string]bool{} // keys whose last status was held or awaited
	resync := false
	for {
		err := c.pump(w, opts.Silence, resync, known, emit)
		w.Close()
		var emitted emitError
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.As(err, &emitted):
			return emitted.err
		}
		if opts.OnGap != nil {
			opts.OnGap(err)
		}
		if w, err = c.rewatch(ctx, key, prefix, opts); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if opts.OnResumed != nil {
			opts.OnResumed()
		}
		resync = true
	}
}

// emitError is emit's error, told apart from the stream's.
type emitError struct{ err error }

func (e emitError) Error() string { return e.err.Error() }

// pump hands w's events to emit until the stream ends or is silent for
// silence. With resync, the states up to synced are a fresh read after a
// gap: they are marked, and a key of known that the read does not show is
// told free.
func (c *Client) pump(w *Watcher, silence time.Duration, resync bool, known map[string]bool, emit func(lockapi.WatchEvent) error) error {
	// The timer runs while Next waits for the sidecar, not while emit
	// waits for the reader of the events (a paused pager).
	quiet := time.AfterFunc(silence, func() { w.Close() })
	defer quiet.Stop()
	seen := map[string]bool{}
	for {
		quiet.Reset(silence)
		ev, err := w.Next()
		if !quiet.Stop() {
			return fmt.Errorf("no line from the sidecar for %v", silence)
		}
		if err != nil {
			return err
		}
		if resync {
			switch ev.Event {
			case lockapi.WatchState:
				ev.Resynced = true
				seen[ev.Key] = true
			case lockapi.WatchSynced:
				for k := range known {
					if seen[k] {
						continue
					}
					free := lockapi.WatchEvent{Event: lockapi.WatchState, Key: k, Revision: ev.Revision,
						Lock: &lockapi.Status{Key: k}, Resynced: true, At: ev.At}
					delete(known, k)
					if err := emit(free); err != nil {
						return emitError{err}
					}
				}
				resync = false
			}
		}
		if l := ev.Lock; l != nil && ev.Key != "" {
			if l.Held || l.Waiters > 0 {
				known[ev.Key] = true
			} else {
				delete(known, ev.Key)
			}
		}
		if err := emit(ev); err != nil {
			return emitError{err}
		}
	}
}

// rewatch connects the watch again, pausing between attempts, for as long
// as the sidecar cannot be reached or answers 5xx (starting, no etcd); a
// refusal of any other kind ends it.
func (c *Client) rewatch(ctx context.Context, key, prefix string, opts FollowOptions) (*Watcher, error) {
	pause := 100 * time.Millisecond
	for {
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
		w, err := c.Watch(ctx, key, prefix)
		if err == nil {
			return w, nil
		}
		var ae *lockapi.Error
		if errors.As(err, &ae) && ae.Status < http.StatusInternalServerError && ae.Code != CodeUnexpected {
			return nil, err
		}
		if opts.OnRetry != nil && ctx.Err() == nil {
			opts.OnRetry(err)
		}
		pause = min(2*pause, opts.MaxBackoff)
	}
}
