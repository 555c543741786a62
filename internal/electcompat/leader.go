package electcompat

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/baton-dev/baton/internal/coordinator"
	"github.com/baton-dev/baton/internal/keyspace"
)

// Answer is who leads, as both sidecars tell it: Name is the leader's
// name (absent when nobody leads), LastUpdate when this sidecar last saw
// the leadership change (RFC 3339), as nais/elector has it; the retired
// election sidecar's clients read name alone.
type Answer struct {
	Name       string `json:"name,omitempty"`
	LastUpdate string `json:"last_update,omitempty"`
}

// Leader follows an election and answers who leads it.
type Leader struct {
	election keyspace.Key
	log      *slog.Logger

	mu    sync.Mutex
	now   Answer
	fence int64                // the leader told's; 0 when none
	subs  map[chan Answer]bool // the /sse streams
}

// NewLeader returns a Leader of election; Follow keeps it up to date.
func NewLeader(election keyspace.Key, log *slog.Logger) *Leader {
	return &Leader{election: election, log: log, subs: map[chan Answer]bool{}}
}

// Follow follows the election in co until ctx ends, watching it again
// after a failure.
func (l *Leader) Follow(ctx context.Context, co *coordinator.Coordinator) {
	for ctx.Err() == nil {
		events, err := co.Observe(ctx, l.election, "")
		if err != nil {
			l.log.Warn("cannot follow the election; trying again", "election", l.election.String(), "err", err)
			sleep(ctx, time.Second)
			continue
		}
		for ev := range events {
			if ev.Kind != coordinator.EventSynced {
				l.tell(ev.Status)
			}
		}
	}
}

// tell takes in the election's status after a change.
func (l *Leader) tell(st coordinator.Status) {
	name := ""
	if st.Held {
		name = nameOf(st.Holder)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	fence := st.Fence
	if !st.Held {
		fence = 0
	}
	if name == l.now.Name && fence == l.fence && l.now.LastUpdate != "" {
		return // the same leader: a renewal, a change of the waiters
	}
	l.now, l.fence = Answer{Name: name, LastUpdate: time.Now().UTC().Format(time.RFC3339)}, fence
	for ch := range l.subs {
		select {
		case ch <- l.now:
		default: // a stream that does not read: it gets the latest next
			select {
			case <-ch:
			default:
			}
			ch <- l.now
		}
	}
}

// nameOf is a leader's name: the value it announced, else its pod, else
// its owner.
func nameOf(h keyspace.Holder) string {
	switch {
	case h.Value != "":
		return h.Value
	case h.Pod != "":
		return h.Pod
	}
	return h.Owner
}

// Answer returns who leads now.
func (l *Leader) Answer() Answer {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.now
}

// Handler serves GET / (the answer) and GET /sse (the answer, then each
// change, as server-sent events: "data: {json}" and a blank line).
func (l *Leader) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-cache")
		_ = json.NewEncoder(w).Encode(l.Answer())
	})
	mux.HandleFunc("GET /sse", l.sse)
	return mux
}

// sse streams the answer and its changes until the caller goes.
func (l *Leader) sse(w http.ResponseWriter, r *http.Request) {
	ch := make(chan Answer, 1)
	l.mu.Lock()
	ch <- l.now
	l.subs[ch] = true
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		delete(l.subs, ch)
		l.mu.Unlock()
	}()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	rc := http.NewResponseController(w)
	for {
		select {
		case <-r.Context().Done():
			return
		case a := <-ch:
			b, _ := json.Marshal(a) // two strings: cannot fail
			if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil || rc.Flush() != nil {
				return
			}
		}
	}
}
