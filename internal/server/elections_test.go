package server

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/baton-dev/baton/clients/go/lockapi"
	"github.com/baton-dev/baton/internal/coordinator"
	"github.com/baton-dev/baton/internal/keyspace"
)

// nextChange returns the next watch event that is not about waiters.
func nextChange(next func() lockapi.WatchEvent) lockapi.WatchEvent {
	for {
		if ev := next(); ev.Event != lockapi.WatchQueued {
			return ev
		}
	}
}

// TestElection: candidates campaign from two sidecars, the first leads
// with the value it announced, proclaims another, resigns, and the
// second leads with a larger fence; an observer hears each change, and
// either sidecar answers who leads. A lock of the same name is a line of
// its own.
func TestElection(t *testing.T) {
	a, b := newAPI(t, "pod-a"), newAPI(t, "pod-b")
	obs := watchLines(t, b, "/v1/elections/scheduler:observe")
	if ev := obs(); ev.Event != lockapi.WatchState || ev.Lock.Held {
		t.Fatalf("first line %+v; want the state of a free election", ev)
	}
	if ev := obs(); ev.Event != lockapi.WatchSynced {
		t.Fatalf("second line %+v; want synced", ev)
	}

	one := a.openStream("/v1/elections/scheduler:campaign", `{"owner":"replica-1","value":"10.0.0.1:8080"}`)
	g := one.next()
	if g["event"] != lockapi.EventGranted || g["value"] != "10.0.0.1:8080" || g["valid_for_seconds"] == nil {
		t.Fatalf("the first candidate heard %v; want granted with its value and how long it is valid", g)
	}
	f1 := int64(g["fence"].(float64))
	if ev := nextChange(obs); ev.Event != lockapi.WatchGranted || ev.Fence != f1 || ev.Holder.Value != "10.0.0.1:8080" || ev.Holder.Owner != "replica-1" {
		t.Fatalf("the observer heard %+v; want replica-1 granted at fence %d with its value", ev, f1)
	}
	// The second campaigns without a wait: as long as it takes.
	two := b.openStream("/v1/elections/scheduler:campaign", `{"owner":"replica-2","value":"10.0.0.2:8080"}`)
	if q := two.next(); q["event"] != lockapi.EventQueued || q["position"] != 1.0 {
		t.Fatalf("the second candidate heard %v; want queued at position 1", q)
	}
	for _, via := range []*api{a, b} {
		st := via.do("GET", "/v1/elections/scheduler", "").expect(t, 200, "")
		if !st.body["held"].(bool) || st.num("fence") != f1 || st.holder()["owner"] != "replica-1" || st.holder()["value"] != "10.0.0.1:8080" || st.holder()["pod"] != "pod-a" {
			t.Fatalf("the leader as %s's sidecar tells it: %s", via.srv.co.Layout().Scope(), st.raw)
		}
	}
	// Only the leader proclaims; the others are told who leads.
	no := b.do("POST", "/v1/elections/scheduler:proclaim", `{"owner":"replica-2","value":"me"}`).expect(t, 403, lockapi.CodeNotOwner)
	if no.holder()["owner"] != "replica-1" {
		t.Errorf("a proclaim by a follower: %s; want the leader named", no.raw)
	}
	p := a.do("POST", "/v1/elections/scheduler:proclaim", `{"owner":"replica-1","value":"10.0.0.1:9090"}`).expect(t, 200, "")
	if p.str("value") != "10.0.0.1:9090" || p.num("fence") != f1 {
		t.Fatalf("proclaim answered %s; want the new value, the same fence", p.raw)
	}
	if ev := nextChange(obs); ev.Event != lockapi.WatchProclaimed || ev.Fence != f1 || ev.Holder.Value != "10.0.0.1:9090" {
		t.Fatalf("after the proclaim the observer heard %+v; want proclaimed with the new value", ev)
	}
	if st := b.do("GET", "/v1/elections/scheduler", ""); st.holder()["value"] != "10.0.0.1:9090" {
		t.Fatalf("the other sidecar tells the leader's value as %v; want the proclaimed one", st.holder()["value"])
	}

	// Resigning hands over at once.
	a.do("DELETE", "/v1/elections/scheduler?owner=replica-1", "").expect(t, 200, "")
	if ev := one.next(); ev["event"] != lockapi.EventReleased {
		t.Fatalf("the resigned leader heard %v; want released", ev)
	}
	g2 := two.next()
	f2 := int64(g2["fence"].(float64))
	if g2["event"] != lockapi.EventGranted || f2 <= f1 || g2["value"] != "10.0.0.2:8080" {
		t.Fatalf("the second candidate heard %v; want granted with a fence above %d", g2, f1)
	}
	if ev := nextChange(obs); ev.Event != lockapi.WatchReleased || ev.Fence != f1 {
		t.Fatalf("the observer heard %+v; want replica-1's release", ev)
	}
	if ev := nextChange(obs); ev.Event != lockapi.WatchGranted || ev.Fence != f2 || ev.Holder.Owner != "replica-2" {
		t.Fatalf("the observer heard %+v; want replica-2 granted at %d", ev, f2)
	}
	// The lock "scheduler" is another line: free, whoever leads the election.
	a.do("POST", "/v1/locks/scheduler", `{"owner":"job-1"}`).expect(t, 200, "")
	if l := a.do("GET", "/v1/elections", ""); !strings.Contains(l.raw, `"replica-2"`) || strings.Contains(l.raw, "job-1") {
		t.Errorf("the list of elections: %s; want replica-2's and no lock", l.raw)
	}
	// A candidate that hangs up resigns.
	two.cancel()
	waitUntil(t, 5*time.Second, "the election free", func() bool {
		return !b.do("GET", "/v1/elections/scheduler", "").body["held"].(bool)
	})
}

// TestElectionWithEtcdElection: the key layout is etcd's
// concurrency.Election's (what etcdctl elect runs): etcd's election sees
// Baton's leader and its value, campaigns behind it and leads once it
// resigns; Baton tells that leader as a client that is not Baton, with its
// value, and leads after it.
func TestElectionWithEtcdElection(t *testing.T) {
	a := newAPI(t, "pod-a")
	cli, _ := testEtcd.Client(t)
	sess, err := concurrency.NewSession(cli, concurrency.WithTTL(5))
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	prefix := a.srv.elections.co.Layout().LockPrefix(mustKey(t, "leader"))
	etcd := concurrency.NewElection(sess, strings.TrimSuffix(prefix, "/"))

	baton := a.openStream("/v1/elections/leader:campaign", `{"owner":"baton-1","value":"baton-addr"}`)
	if g := baton.next(); g["event"] != lockapi.EventGranted {
		t.Fatalf("Baton's candidate heard %v", g)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := etcd.Leader(ctx)
	if err != nil || len(l.Kvs) != 1 || !strings.Contains(string(l.Kvs[0].Value), `"value":"baton-addr"`) {
		t.Fatalf("etcd's Election sees the leader as %v (%v); want Baton's record with its value", l, err)
	}
	won := make(chan error, 1)
	go func() { won <- etcd.Campaign(ctx, "etcd-addr") }()
	select {
	case err := <-won:
		t.Fatalf("etcd's Election campaigned to the end (%v) while Baton leads", err)
	case <-time.After(500 * time.Millisecond):
	}
	a.do("DELETE", "/v1/elections/leader?owner=baton-1", "").expect(t, 200, "")
	if err := <-won; err != nil {
		t.Fatalf("etcd's Election after Baton resigned: %v", err)
	}
	st := a.do("GET", "/v1/elections/leader", "")
	if h := st.holder(); h["foreign"] != true || h["value"] != "etcd-addr" || st.num("fence") != etcd.Rev() {
		t.Fatalf("Baton tells etcd's leader as %s; want a foreign leader with value etcd-addr at fence %d", st.raw, etcd.Rev())
	}
	next := a.openStream("/v1/elections/leader:campaign", `{"owner":"baton-2","value":"baton-addr-2"}`)
	if q := next.next(); q["event"] != lockapi.EventQueued {
		t.Fatalf("Baton's candidate behind etcd's leader heard %v; want queued", q)
	}
	if err := etcd.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if g := next.next(); g["event"] != lockapi.EventGranted || int64(g["fence"].(float64)) <= etcd.Rev() {
		t.Fatalf("Baton's candidate after etcd's leader resigned heard %v; want granted above fence %d", g, etcd.Rev())
	}
}

// TestElectionBadInput: each mistake gets its code and changes nothing.
func TestElectionBadInput(t *testing.T) {
	a := newAPI(t, "pod-a")
	cases := []struct {
		method, path, body string
		status             int
		code               string
	}{
		{"POST", "/v1/locks/k", `{"value":"x"}`, 400, lockapi.CodeInvalidValue},
		{"POST", "/v1/elections/k:campaign", `{"once":true}`, 400, lockapi.CodeInvalidRequest},
		{"POST", "/v1/elections/k:campaign", `{"limit":2}`, 400, lockapi.CodeInvalidMode},
		{"POST", "/v1/elections/k:campaign", `{"mode":"read"}`, 400, lockapi.CodeInvalidMode},
		{"POST", "/v1/elections/k:campaign", `{"value":5}`, 400, lockapi.CodeInvalidValue},
		{"POST", "/v1/elections/k:campaign", fmt.Sprintf(`{"value":%q}`, strings.Repeat("v", 4097)), 400, lockapi.CodeInvalidValue},
		{"POST", "/v1/elections/k:proclaim", `{"owner":"o","value":"v"}`, 404, lockapi.CodeNotHeld},
		{"POST", "/v1/elections/k:proclaim", `{"value":"v"}`, 400, lockapi.CodeInvalidOwner},
		{"POST", "/v1/elections/k:proclaim", `{"owner":"o","value":"v","ttl":"1m"}`, 400, lockapi.CodeInvalidRequest},
		{"GET", "/v1/elections/k:campaign", "", 405, lockapi.CodeMethodNotAllowed},
		{"POST", "/v1/elections/k", "", 405, lockapi.CodeMethodNotAllowed},
		{"POST", "/v1/elections/k:hold", "", 404, lockapi.CodeNotFound},
		{"GET", "/v1/electionsx", "", 404, lockapi.CodeNotFound},
		{"GET", "/v1/elections/a/../b", "", 400, lockapi.CodeInvalidKey},
		{"DELETE", "/v1/elections/k", "", 400, lockapi.CodeInvalidOwner},
		{"POST", "/v1/elections/k:proclaim", `{"owner":"o"}`, 400, lockapi.CodeInvalidValue},
		{"POST", "/v1/locks/k:extend", `{"owner":"o","value":"v"}`, 400, lockapi.CodeInvalidRequest},
	}
	for _, c := range cases {
		r := a.do(c.method, c.path, c.body)
		if r.status != c.status || r.body["code"] != c.code || r.str("message") == "" {
			t.Errorf("%s %s %s: %d %s; want %d %s", c.method, c.path, c.body, r.status, r.raw, c.status, c.code)
		}
	}
	if st := a.do("GET", "/v1/elections/k", ""); st.status != http.StatusOK || st.body["held"] != false {
		t.Errorf("after the refusals the election is %s; want free", st.raw)
	}
	if st := a.do("GET", "/v1/locks/k", ""); st.body["held"] != false {
		t.Errorf("after the refusals the lock is %s; want free", st.raw)
	}
}

func mustKey(t *testing.T, s string) keyspace.Key {
	t.Helper()
	k, err := keyspace.ParseKey(s)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestElectionLeaderHearsLoss: a leader whose key goes (its lease revoked,
// as when etcd expires it) hears lost with the reason, its stream ends, and
// the next candidate leads with a larger fence.
func TestElectionLeaderHearsLoss(t *testing.T) {
	a, b := newAPI(t, "pod-a"), newAPI(t, "pod-b")
	one := a.openStream("/v1/elections/loss:campaign", `{"owner":"replica-1"}`)
	g := one.next()
	if g["event"] != lockapi.EventGranted {
		t.Fatalf("the first candidate heard %v", g)
	}
	two := b.openStream("/v1/elections/loss:campaign", `{"owner":"replica-2"}`)
	if q := two.next(); q["event"] != lockapi.EventQueued {
		t.Fatalf("the second candidate heard %v", q)
	}
	cli, _ := testEtcd.Client(t)
	ctx := context.Background()
	resp, err := cli.Get(ctx, a.srv.elections.co.Layout().LockPrefix(mustKey(t, "loss")), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil || len(resp.Kvs) != 2 {
		t.Fatalf("the election's keys: %v %v", resp, err)
	}
	if _, err := cli.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	if ev := one.next(); ev["event"] != lockapi.EventLost || ev["reason"] != "lease_lost" {
		t.Fatalf("the leader heard %v; want lost (lease_lost)", ev)
	}
	if !one.ended() {
		t.Error("the leader's stream goes on after its loss")
	}
	if g2 := two.next(); g2["event"] != lockapi.EventGranted || g2["fence"].(float64) <= g["fence"].(float64) {
		t.Fatalf("the second candidate heard %v; want granted above fence %v", g2, g["fence"])
	}
}

// TestObserverNeverGoesBack: after an etcd restore brings back an older
// leader (80, after 100 was told), the observer is told 100's end, neither
// 80's leadership nor its end, and then the next, newer leader.
func TestObserverNeverGoesBack(t *testing.T) {
	k := mustKey(t, "e")
	held := func(f int64) coordinator.Status { return coordinator.Status{Key: k, Held: f != 0, Fence: f} }
	leaders := map[string]int64{}
	for i, c := range []struct {
		ev   coordinator.LockEvent
		told bool
	}{
		{coordinator.LockEvent{Kind: coordinator.EventState, Key: k, Status: held(90)}, true},
		{coordinator.LockEvent{Kind: coordinator.EventReleased, Key: k, Fence: 90, Status: held(0)}, true},
		{coordinator.LockEvent{Kind: coordinator.EventGranted, Key: k, Fence: 100, Status: held(100)}, true},
		{coordinator.LockEvent{Kind: coordinator.EventProclaimed, Key: k, Fence: 100, Status: held(100)}, true},
		// etcd restored: 100's key is gone, 80's is back.
		{coordinator.LockEvent{Kind: coordinator.EventLost, Key: k, Fence: 100, Status: held(80), Resynced: true}, true},
		{coordinator.LockEvent{Kind: coordinator.EventGranted, Key: k, Fence: 80, Status: held(80), Resynced: true}, false},
		{coordinator.LockEvent{Kind: coordinator.EventQueued, Key: k, Status: held(80)}, false},
		{coordinator.LockEvent{Kind: coordinator.EventReleased, Key: k, Fence: 80, Status: held(0)}, false},
		{coordinator.LockEvent{Kind: coordinator.EventGranted, Key: k, Fence: 120, Status: held(120)}, true},
		{coordinator.LockEvent{Kind: coordinator.EventQueued, Key: k, Status: held(120)}, true},
	} {
		if told := !olderLeader(leaders, c.ev); told != c.told {
			t.Errorf("event %d (%s of fence %d): told %v, want %v", i, c.ev.Kind, c.ev.Fence, told, c.told)
		}
	}
	if olderLeader(nil, coordinator.LockEvent{Kind: coordinator.EventGranted, Key: k, Fence: 1}) {
		t.Error("a lock's watch skipped an event")
	}
}
