package server

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-dev/baton/clients/go/lockapi"
	"github.com/baton-dev/baton/internal/coordinator"
	"github.com/baton-dev/baton/internal/engine"
	"github.com/baton-dev/baton/internal/keyspace"
)

// holdStream is an open :hold connection.
type holdStream struct {
	t      testing.TB
	resp   *http.Response
	dec    *json.Decoder
	cancel context.CancelFunc
}

func (a *api) openHold(key, body string) *holdStream {
	a.t.Helper()
	return a.openStream("/v1/locks/"+key+":hold", body)
}

// openStream POSTs body to path and returns its stream of events: a hold's,
// a campaign's.
func (a *api) openStream(path, body string) *holdStream {
	a.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://baton"+path, strings.NewReader(body))
	client := &http.Client{Transport: a.client.Transport} // no overall timeout: streams are long
	resp, err := client.Do(req)
	if err != nil {
		cancel()
		a.t.Fatal(err)
	}
	a.t.Cleanup(func() { cancel(); resp.Body.Close() })
	return &holdStream{t: a.t, resp: resp, dec: json.NewDecoder(resp.Body), cancel: cancel}
}

// next returns the next event that is not a heartbeat.
func (h *holdStream) next() map[string]any {
	h.t.Helper()
	for {
		var ev map[string]any
		if err := h.dec.Decode(&ev); err != nil {
			h.t.Fatalf("reading the hold stream: %v", err)
		}
		if ev["event"] != lockapi.EventHeartbeat {
			return ev
		}
	}
}

func (h *holdStream) ended() bool {
	var ev map[string]any
	return h.dec.Decode(&ev) != nil
}

func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > d {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(start)
}

func TestHoldReleasesWhenTheCallerGoes(t *testing.T) {
	a := newAPI(t, "pod-a", func(_ *engine.Config, s *Config) { s.HeartbeatInterval = 50 * time.Millisecond })
	b := newAPI(t, "pod-b")
	h := a.openHold("job", `{"owner":"runner","ttl":"1m"}`)
	if h.resp.StatusCode != 200 || h.resp.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("hold answer %d %s", h.resp.StatusCode, h.resp.Header.Get("Content-Type"))
	}
	g := h.next()
	if g["event"] != lockapi.EventGranted || g["owner"] != "runner" || g["fence"].(float64) <= 0 || g["expires_at"] == nil {
		t.Fatalf("first event %v, want granted", g)
	}
	var hb map[string]any
	if err := h.dec.Decode(&hb); err != nil || hb["event"] != lockapi.EventHeartbeat {
		t.Fatalf("want a heartbeat, got %v %v", hb, err)
	}
	b.do("POST", "/v1/locks/job", `{"owner":"other"}`).expect(t, 409, "already_running")
	// extend works on a held stream's lock.
	a.do("POST", "/v1/locks/job:extend", `{"owner":"runner","ttl":"2m"}`).expect(t, 200, "")

	h.cancel()
	took := waitUntil(t, 5*time.Second, "the lock to be free", func() bool {
		st := b.do("GET", "/v1/locks/job", "")
		return st.body["held"] == false
	})
	t.Logf("lock free %v after the caller closed its hold stream", took)
	b.do("POST", "/v1/locks/job", `{"owner":"other"}`).expect(t, 200, "")
}

func TestHoldQueuesAndHearsRelease(t *testing.T) {
	a, b := newAPI(t, "pod-a"), newAPI(t, "pod-b")
	a.do("POST", "/v1/locks/turn", `{"owner":"first"}`).expect(t, 200, "")
	h := b.openHold("turn", `{"owner":"second","wait":"30s"}`)
	q := h.next()
	if q["event"] != lockapi.EventQueued || q["position"] != 1.0 || q["owner"] != "second" {
		t.Fatalf("first event %v, want queued at position 1", q)
	}
	a.do("DELETE", "/v1/locks/turn?owner=first", "").expect(t, 200, "")
	if g := h.next(); g["event"] != lockapi.EventGranted || g["owner"] != "second" {
		t.Fatalf("event %v, want granted", g)
	}
	b.do("DELETE", "/v1/locks/turn?owner=second", "").expect(t, 200, "")
	if ev := h.next(); ev["event"] != lockapi.EventReleased {
		t.Fatalf("event %v, want released", ev)
	}
	if !h.ended() {
		t.Error("the stream goes on after the release")
	}
}

// A hold that names no owner is given one before it queues: its queued
// event names it, and its grant is that owner's.
func TestHoldWithoutOwnerIsNamedBeforeItQueues(t *testing.T) {
	a, b := newAPI(t, "pod-a"), newAPI(t, "pod-b")
	a.do("POST", "/v1/locks/named", `{"owner":"first"}`).expect(t, 200, "")
	h := b.openHold("named", `{"wait":"30s"}`)
	q := h.next()
	owner, _ := q["owner"].(string)
	if q["event"] != lockapi.EventQueued || !strings.HasPrefix(owner, "exec-") {
		t.Fatalf("first event %v, want queued with an owner made up for the caller", q)
	}
	a.do("DELETE", "/v1/locks/named?owner=first", "").expect(t, 200, "")
	if g := h.next(); g["event"] != lockapi.EventGranted || g["owner"] != owner {
		t.Fatalf("event %v, want granted to %s", g, owner)
	}
}

func TestHoldWaitRunsOut(t *testing.T) {
	a, b := newAPI(t, "pod-a"), newAPI(t, "pod-b")
	a.do("POST", "/v1/locks/busy", `{"owner":"holder"}`).expect(t, 200, "")
	// A try on a held lock is a plain 409.
	b.do("POST", "/v1/locks/busy:hold", `{"owner":"x"}`).expect(t, 409, "already_running")

	h := b.openHold("busy", `{"owner":"x","wait":"300ms"}`)
	if q := h.next(); q["event"] != lockapi.EventQueued {
		t.Fatalf("event %v, want queued", q)
	}
	r := h.next()
	holder, _ := r["holder"].(map[string]any)
	if r["event"] != lockapi.EventRefused || r["code"] != lockapi.CodeWaitTimeout || holder["owner"] != "holder" {
		t.Fatalf("event %v, want refused (wait_timeout) naming the holder", r)
	}
	if !h.ended() {
		t.Error("the stream goes on after the refusal")
	}
	st := a.do("GET", "/v1/locks/busy", "")
	if st.body["waiters"] != 0.0 {
		t.Errorf("waiters after the refusal: %s", st.raw)
	}
}

// A 20-minute job under a 5-minute ttl, in short: a hold stream keeps its
// lock for as long as it stays open, its deadline moved on by the sidecar
// (the ttl is the renewal window), and another sidecar sees it held and
// unexpired all along.
func TestHoldOutlivesItsTTL(t *testing.T) {
	a := newAPI(t, "pod-a", func(_ *engine.Config, s *Config) { s.HeartbeatInterval = 200 * time.Millisecond })
	b := newAPI(t, "pod-b")
	h := a.openHold("long-job", `{"owner":"o","ttl":"1s"}`)
	g := h.next()
	if g["event"] != lockapi.EventGranted || g["max_hold_at"] != nil {
		t.Fatalf("event %v, want granted with no max_hold_at", g)
	}
	events := make(chan map[string]any, 100)
	go func() {
		for {
			var ev map[string]any
			if h.dec.Decode(&ev) != nil {
				close(events)
				return
			}
			events <- ev
		}
	}()
	lastExpiry := g["expires_at"].(string)
	deadline := time.Now().Add(5500 * time.Millisecond) // 5.5 × the ttl
	for time.Now().Before(deadline) {
		select {
		case ev, ok := <-events:
			if !ok || ev["event"] != lockapi.EventHeartbeat {
				t.Fatalf("event %v (open %v) while the stream is open, want heartbeats only", ev, ok)
			}
			if exp, _ := ev["expires_at"].(string); exp < lastExpiry {
				t.Fatalf("heartbeat expires_at %v went back from %v", exp, lastExpiry)
			} else {
				lastExpiry = exp
			}
		case <-time.After(100 * time.Millisecond):
		}
		st := b.do("GET", "/v1/locks/long-job", "").expect(t, 200, "")
		exp, err := time.Parse(time.RFC3339Nano, st.str("expires_at"))
		if !st.body["held"].(bool) || st.holder()["owner"] != "o" || err != nil || !exp.After(time.Now()) {
			t.Fatalf("status from another sidecar %s: want held by o, expiring later", st.raw)
		}
	}
	if lastExpiry == g["expires_at"] {
		t.Errorf("the heartbeats' expires_at never moved from %v", lastExpiry)
	}
	h.cancel()
	waitUntil(t, 5*time.Second, "the closed stream's lock to be released", func() bool {
		return b.do("GET", "/v1/locks/long-job", "").body["held"] == false
	})
}

// max_hold caps a hold stream whatever its renewals: it ends lost, reason
// max_hold, and the lock is free for the next caller.
func TestHoldMaxHold(t *testing.T) {
	a, b := newAPI(t, "pod-a"), newAPI(t, "pod-b")
	start := time.Now()
	h := a.openHold("capped", `{"owner":"o","ttl":"1s","max_hold":"2.5s"}`)
	g := h.next()
	acquired, _ := time.Parse(time.RFC3339Nano, g["acquired_at"].(string))
	capAt, err := time.Parse(time.RFC3339Nano, g["max_hold_at"].(string))
	if g["event"] != lockapi.EventGranted || err != nil || capAt.Sub(acquired) != 2500*time.Millisecond {
		t.Fatalf("event %v, want granted with max_hold_at 2.5s after acquired_at", g)
	}
	ev := h.next()
	if ev["event"] != lockapi.EventLost || ev["reason"] != "max_hold" || ev["code"] != lockapi.CodeLockLost || !strings.Contains(ev["message"].(string), "max_hold") {
		t.Fatalf("event %v, want lost (max_hold)", ev)
	}
	if took := time.Since(start); took < 2500*time.Millisecond {
		t.Fatalf("ended after %v, before its max_hold of 2.5s", took)
	}
	if !h.ended() {
		t.Error("the stream goes on after the loss")
	}
	// The sidecar deletes the key right after it tells the stream.
	waitUntil(t, 5*time.Second, "the capped lock to be free", func() bool {
		return b.do("POST", "/v1/locks/capped", `{"owner":"next"}`).status == 200
	})
	// The owner's later calls hear why it ended.
	a.do("POST", "/v1/locks/capped:extend", `{"owner":"o"}`).expect(t, 410, lockapi.CodeLockLost)

	// An extend cannot pass the cap: the deadline stops at max_hold_at.
	h2 := a.openHold("capped2", `{"owner":"o2","ttl":"1s","max_hold":"3s"}`)
	g2 := h2.next()
	ext := a.do("POST", "/v1/locks/capped2:extend", `{"owner":"o2","ttl":"1h"}`).expect(t, 200, "")
	if ext.str("expires_at") != g2["max_hold_at"] {
		t.Errorf("extend past the cap: expires_at %s, max_hold_at %v", ext.str("expires_at"), g2["max_hold_at"])
	}
}

func TestHoldHearsLoss(t *testing.T) {
	a := newAPI(t, "pod-a")
	h2 := a.openHold("forced", `{"owner":"o"}`)
	if g := h2.next(); g["event"] != lockapi.EventGranted {
		t.Fatalf("event %v", g)
	}
	cli, _ := testEtcd.Client(t)
	k, _ := keyspace.ParseKey("forced")
	if _, err := cli.Delete(context.Background(), a.coord.Layout().LockPrefix(k), clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	if ev := h2.next(); ev["event"] != lockapi.EventLost || ev["reason"] != "force_released" {
		t.Fatalf("event %v, want lost (force_released)", ev)
	}
	if !h2.ended() {
		t.Error("the stream goes on after the loss")
	}
}

func TestHoldWithdrawsAQueuedCallerThatGoes(t *testing.T) {
	a, b := newAPI(t, "pod-a"), newAPI(t, "pod-b")
	a.do("POST", "/v1/locks/q", `{"owner":"holder"}`).expect(t, 200, "")
	h := b.openHold("q", `{"owner":"waiter","wait":"1m"}`)
	if ev := h.next(); ev["event"] != lockapi.EventQueued {
		t.Fatalf("event %v, want queued", ev)
	}
	if st := a.do("GET", "/v1/locks/q", ""); st.body["waiters"] != 1.0 {
		t.Fatalf("status %s, want 1 waiter", st.raw)
	}
	h.cancel()
	took := waitUntil(t, 5*time.Second, "the waiter to go", func() bool {
		return a.do("GET", "/v1/locks/q", "").body["waiters"] == 0.0
	})
	t.Logf("waiter withdrawn %v after its caller closed the stream", took)
}

// TestHoldSaysHowLongItIsValid: the grant and every heartbeat say how long
// the lock is certainly the holder's if the sidecar stopped at once (its
// lease, plus its lock delay), and the grant the lease's TTL.
func TestHoldSaysHowLongItIsValid(t *testing.T) {
	a := newAPI(t, "pod-a", func(_ *engine.Config, s *Config) { s.HeartbeatInterval = 50 * time.Millisecond })
	h := a.openHold("valid", `{"owner":"runner","lock_delay":"3s"}`)
	g := h.next()
	ttl, _ := g["lease_ttl_seconds"].(float64)
	valid, _ := g["valid_for_seconds"].(float64)
	if g["event"] != lockapi.EventGranted || ttl <= 0 || valid <= 3 || valid > ttl+3 {
		t.Fatalf("granted %v; want valid_for_seconds past the lock delay of 3s, within the lease TTL more", g)
	}
	for range 3 {
		var hb map[string]any
		if err := h.dec.Decode(&hb); err != nil || hb["event"] != lockapi.EventHeartbeat {
			t.Fatalf("want a heartbeat, got %v %v", hb, err)
		}
		if v, _ := hb["valid_for_seconds"].(float64); v <= 3 || v > ttl+3 {
			t.Errorf("heartbeat %v; want valid_for_seconds within (3, %v]", hb, ttl+3)
		}
	}
	a.do("DELETE", "/v1/locks/valid?owner=runner", "").expect(t, 200, "")
}

// TestHoldHangUpKeepsTheLockDelay: a hold stream whose caller hangs up
// without releasing its lock lets the lock go held back by its lock delay,
// since what the caller started may still run; a DELETE first lets it go
// at once.
func TestHoldHangUpKeepsTheLockDelay(t *testing.T) {
	a, b := newAPI(t, "pod-a"), newAPI(t, "pod-b")
	h := a.openHold("hangup", `{"owner":"runner","lock_delay":"1s"}`)
	if g := h.next(); g["event"] != lockapi.EventGranted {
		t.Fatalf("first event %v", g)
	}
	h.cancel()
	gone := time.Now()
	waitUntil(t, 5*time.Second, "the holder's key to go", func() bool {
		return b.do("GET", "/v1/locks/hangup", "").body["held"] == false
	})
	b.do("POST", "/v1/locks/hangup", `{"owner":"next"}`).expect(t, 409, lockapi.CodeLockDelayed)
	b.do("POST", "/v1/locks/hangup", `{"owner":"next","wait":"10s"}`).expect(t, 200, "")
	if d := time.Since(gone); d < time.Second {
		t.Errorf("granted %v after the hang-up, within the lock delay", d)
	}
	b.do("DELETE", "/v1/locks/hangup?owner=next", "").expect(t, 200, "")

	clean := a.openHold("clean", `{"owner":"runner","lock_delay":"1s"}`)
	clean.next()
	a.do("DELETE", "/v1/locks/clean?owner=runner", "").expect(t, 200, "")
	clean.cancel()
	b.do("POST", "/v1/locks/clean", `{"owner":"next"}`).expect(t, 200, "")
}

// TestDrainWaitsForHolds: a sidecar that shuts down first tells each hold
// stream its lock ends (lost, reason shutdown) and keeps the lock, granting
// nothing, until the caller has hung up: a semaphore's units, which have no
// lock delay, are not taken while what their holder started still runs.
func TestDrainWaitsForHolds(t *testing.T) {
	a, b := newAPI(t, "pod-a"), newAPI(t, "pod-b")
	h := a.openHold("drain", `{"owner":"runner","limit":2,"weight":2}`)
	if g := h.next(); g["event"] != lockapi.EventGranted {
		t.Fatalf("first event %v", g)
	}
	w := b.openHold("drain", `{"owner":"next","limit":2,"weight":2,"wait":"30s"}`)
	if ev := w.next(); ev["event"] != lockapi.EventQueued {
		t.Fatalf("waiter's event %v, want queued", ev)
	}
	a.coord.Drain()
	drained := make(chan struct{})
	go func() {
		a.srv.Drain(context.Background())
		close(drained)
	}()
	if ev := h.next(); ev["event"] != lockapi.EventLost || ev["reason"] != string(coordinator.Shutdown) || ev["code"] != lockapi.CodeLockLost {
		t.Fatalf("event %v, want lost (shutdown)", ev)
	}
	a.do("POST", "/v1/locks/other", `{"owner":"x"}`).expect(t, 503, lockapi.CodeUnavailable)
	time.Sleep(300 * time.Millisecond) // the caller still stops its work
	select {
	case <-drained:
		t.Fatal("Drain returned while a hold's caller was still connected")
	default:
	}
	if st := b.do("GET", "/v1/locks/drain", ""); st.body["held"] != true {
		t.Fatalf("the units were let go before the caller hung up: %s", st.raw)
	}
	h.cancel()
	select {
	case <-drained:
	case <-time.After(10 * time.Second):
		t.Fatal("Drain did not return after the caller hung up")
	}
	if ev := w.next(); ev["event"] != lockapi.EventGranted {
		t.Fatalf("waiter's event %v, want granted once the drained holder hung up", ev)
	}

	// A grace that runs out returns with the stream still open.
	c := newAPI(t, "pod-c")
	stuck := c.openHold("stuck", `{"owner":"runner"}`)
	stuck.next()
	c.coord.Drain()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	c.srv.Drain(ctx)
	if ctx.Err() == nil {
		t.Error("Drain returned before its grace with a stream open")
	}
	if ev := stuck.next(); ev["event"] != lockapi.EventLost || ev["reason"] != string(coordinator.Shutdown) {
		t.Errorf("the stream still open heard %v, want lost (shutdown)", ev)
	}
}

// TestDrainCountsBeforeTheGrantIsTold: a hold stream is counted before its
// caller hears the grant, so Drain waits for it; one whose grant comes
// once draining began is refused, so that nothing starts under a lock the
// sidecar is about to let go.
func TestDrainCountsBeforeTheGrantIsTold(t *testing.T) {
	d := newDrain()
	started, ok := d.admit()
	if !ok {
		t.Fatal("a stream refused before draining")
	}
	waited := make(chan bool)
	go func() { waited <- d.wait(context.Background()) }()
	<-started // draining began
	if _, ok := d.admit(); ok {
		t.Error("a grant told after draining began")
	}
	select {
	case <-waited:
		t.Fatal("Drain returned with a stream counted")
	case <-time.After(50 * time.Millisecond):
	}
	d.leave()
	if !<-waited {
		t.Error("Drain reports streams left after the last one ended")
	}
}
