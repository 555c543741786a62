package server

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/baton-dev/baton/clients/go/lockapi"
	"github.com/baton-dev/baton/internal/coordinator"
	"github.com/baton-dev/baton/internal/keyspace"
)

// watch serves GET /v1/locks/{key}:watch (k set) and
// GET /v1/locks:watch?prefix=P: a stream of JSON lines, the state of the
// locks first, then every change, with a heartbeat when nothing happens,
// until the caller hangs up.
func (s *Server) watch(w http.ResponseWriter, r *http.Request, k keyspace.Key) {
	if r.Method != http.MethodGet {
		notAllowed(w, r, "GET")
		return
	}
	allowed := []string{"prefix"}
	if !k.IsZero() {
		allowed = nil
	}
	q, err := query(r, allowed...)
	if err != nil {
		writeError(w, err)
		return
	}
	events, err := s.co.Observe(r.Context(), k, q.Get("prefix"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/x-ndjson")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	enc := json.NewEncoder(w)
	send := func(ev lockapi.WatchEvent) bool {
		ev.At = time.Now().UTC()
		return enc.Encode(ev) == nil && rc.Flush() == nil
	}
	tick := time.NewTicker(s.cfg.HeartbeatInterval)
	defer tick.Stop()
	var rev int64
	var leaders map[string]int64 // an election's newest leader told, by name
	if s.electionsServed() {
		leaders = map[string]int64{}
	}
	for {
		select {
		case <-r.Context().Done():
			return
		case <-tick.C:
			if !send(lockapi.WatchEvent{Event: lockapi.WatchHeartbeat, Revision: rev}) {
				return
			}
		case ev, ok := <-events:
			if !ok {
				return
			}
			rev = ev.Rev
			if olderLeader(leaders, ev) {
				continue
			}
			if !send(watchEventOf(ev)) {
				return
			}
		}
	}
}

// olderLeader says whether ev is about an election's leader older than one
// told before on the stream, and notes the leader it tells otherwise
// (leaders, by name, is nil for locks). Fences grow along etcd's history,
// so only an etcd restored from an older snapshot brings an older leader
// back: an observer is told neither its leadership (granted, proclaimed,
// a state) nor its end, but the end of the leader it was told, and the
// next leader, which is newer.
func olderLeader(leaders map[string]int64, ev coordinator.LockEvent) bool {
	if leaders == nil {
		return false
	}
	fence := ev.Fence
	if ev.Kind == coordinator.EventState || ev.Kind == coordinator.EventQueued {
		fence = ev.Status.Fence // 0 when nobody leads
	}
	name := ev.Key.String()
	if fence < leaders[name] && fence != 0 {
		return true
	}
	if ev.Kind == coordinator.EventGranted || ev.Kind == coordinator.EventProclaimed || ev.Kind == coordinator.EventState {
		leaders[name] = max(leaders[name], fence)
	}
	return false
}

// watchEventOf is ev as the stream shows it.
func watchEventOf(ev coordinator.LockEvent) lockapi.WatchEvent {
	out := lockapi.WatchEvent{Event: string(ev.Kind), Revision: ev.Rev, Fence: ev.Fence, Resynced: ev.Resynced}
	if ev.Kind == coordinator.EventSynced {
		return out
	}
	out.Key = ev.Key.String()
	if ev.Fence != 0 {
		out.Holder = holderOf(ev.Holder)
	}
	st := statusOf(ev.Status, nil)
	out.Lock = &st
	return out
}
