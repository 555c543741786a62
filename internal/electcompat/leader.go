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
	election  keyspace.Key
	log       *slog.Logger
	candidate string // the pod's name, when it campaigns (self)
	self      *Self  // nil when the pod does not campaign

	mu    sync.Mutex
	name  string               // the leader etcd was last seen to have; "" when none
	fence int64                // its fence; 0 when none
	now   Answer               // the answer told
	told  int64                // the fence of the leader told
	subs  map[chan Answer]bool // the /sse streams
}

// NewLeader returns a Leader of election; Follow keeps it up to date.
// When the pod campaigns as candidate (Campaign, with self), the pod is
// named leader only while self says its leadership is certainly its own.
func NewLeader(election keyspace.Key, candidate string, self *Self, log *slog.Logger) *Leader {
	return &Leader{election: election, candidate: candidate, self: self, log: log, subs: map[chan Answer]bool{}}
}

// Follow follows the election in co until ctx ends, watching it again
// after a failure, and looks every 100 ms whether the pod's own
// leadership, if it is told, is still certain.
func (l *Leader) Follow(ctx context.Context, co *coordinator.Coordinator) {
	// Well within the shortest lease's margin (a quarter of 2s).
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for ctx.Err() == nil {
		events, err := co.Observe(ctx, l.election, "")
		if err != nil {
			l.log.Warn("cannot follow the election; trying again", "election", l.election.String(), "err", err)
			sleep(ctx, time.Second)
			continue
		}
		for open := true; open; {
			select {
			case ev, ok := <-events:
				if open = ok; ok && ev.Kind != coordinator.EventSynced {
					l.tell(ev.Status)
				}
			case <-tick.C:
				l.recheck()
			}
		}
	}
}

// tell takes in the election's status after a change.
func (l *Leader) tell(st coordinator.Status) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.name, l.fence = "", 0
	if st.Held {
		l.name, l.fence = st.Holder.LeaderName(), st.Fence
	}
	l.answerLocked(true)
}

// recheck tells the answer again if the pod's own leadership stopped (or
// started) being certain.
func (l *Leader) recheck() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.answerLocked(false)
}

// answerLocked makes the answer the leader seen, but for the pod itself
// while its leadership is not certain; it tells the streams when the
// answer changed, or when changed says the leader did (the same pod
// elected again).
func (l *Leader) answerLocked(changed bool) {
	name := l.name
	if l.self != nil && name == l.candidate && !l.self.leads(time.Now()) {
		name = ""
	}
	if l.now.LastUpdate != "" && name == l.now.Name && (!changed || l.fence == l.told) {
		return // the same leader: a renewal, a change of the waiters
	}
	l.now, l.told = Answer{Name: name, LastUpdate: time.Now().UTC().Format(time.RFC3339)}, l.fence
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
