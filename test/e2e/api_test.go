//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	baton "github.com/baton-dev/baton/clients/go"
	"github.com/baton-dev/baton/clients/go/lockapi"
)

// httpClient talks plain HTTP to a sidecar's socket.
func httpClient(s *sidecar) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", s.socket)
	}}}
}

// call sends one request and decodes the JSON answer.
func call(ctx context.Context, c *http.Client, method, path, body string) (int, map[string]any, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://baton"+path, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	var out map[string]any
	raw, _ := io.ReadAll(resp.Body)
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &out); err != nil {
			return resp.StatusCode, nil, fmt.Errorf("answer is not JSON: %q", raw)
		}
	}
	return resp.StatusCode, out, nil
}

// TestS11AppDisconnect: an app that goes away while holding or waiting.
// A hold stream's lock is released when its connection closes; a queued
// stream or plain wait withdraws its contender key; a plain acquire's lock
// is kept until its ttl, as the API says.
func TestS11AppDisconnect(t *testing.T) {
	e := newEnv(t, envOptions{})
	scs := e.addSidecars(2, sidecarOptions{})
	a, b := scs[0], scs[1]
	ctx := context.Background()
	var releases []time.Duration

	for i := range scale(5, 20) {
		lock := fmt.Sprintf("s11-%d", i)
		holder, err := a.client.Hold(ctx, lock, lockapi.Request{Owner: "holder"})
		must(t, err)
		if ev, err := holder.Next(); err != nil || ev.Event != "granted" {
			t.Fatalf("holder: %+v %v", ev, err)
		}
		waiter, err := b.client.Hold(ctx, lock, lockapi.Request{Owner: "waiter", Wait: "30s"})
		must(t, err)
		if ev, err := waiter.Next(); err != nil || ev.Event != "queued" {
			t.Fatalf("waiter: %+v %v", ev, err)
		}
		closed := time.Now()
		holder.Close() // the app crashes: its connection closes
		for {
			ev, err := waiter.Next()
			must(t, err)
			if ev.Event == "granted" {
				break
			}
		}
		releases = append(releases, time.Since(closed))
		waiter.Close()
	}

	// A queued stream that hangs up leaves no key behind.
	holder, err := a.client.Hold(ctx, "s11-q", lockapi.Request{Owner: "holder"})
	must(t, err)
	holder.Next()
	waiter, err := b.client.Hold(ctx, "s11-q", lockapi.Request{Owner: "waiter", Wait: "30s"})
	must(t, err)
	waiter.Next()
	e.waitQueued("s11-q", 2)
	waiter.Close()
	e.waitQueued("s11-q", 1)

	// So does a plain waiting acquire whose caller gives up.
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	if _, _, err := call(wctx, httpClient(b), "POST", "/v1/locks/s11-q", `{"owner":"w2","wait":"30s"}`); err == nil {
		t.Fatal("a plain wait on a held lock answered within 300ms")
	}
	cancel()
	e.waitQueued("s11-q", 1)
	holder.Close()
	e.waitQueued("s11-q", 0)

	// A plain acquire outlives its connection, until its ttl.
	hc := httpClient(a)
	code, _, err := call(ctx, hc, "POST", "/v1/locks/s11-plain", `{"owner":"p","ttl":"2s"}`)
	if err != nil || code != 200 {
		t.Fatalf("plain acquire: %d %v", code, err)
	}
	hc.CloseIdleConnections()
	time.Sleep(200 * time.Millisecond)
	if n := e.contenders("s11-plain"); n != 1 {
		t.Errorf("a plain acquire's lock was dropped with its connection (%d keys)", n)
	}
	deadline := time.Now().Add(5 * time.Second)
	for e.contenders("s11-plain") != 0 {
		if time.Now().After(deadline) {
			t.Fatal("a plain acquire's lock outlived its 2s ttl by 3s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	e.finish("S11 app crash / disconnect", requirements{}, func(o *outcome) {
		o.gaps = releases
		o.note("gap column: hold stream closed by a crashed app → waiter on another sidecar granted (%d times); queued stream and plain wait withdrawn, 0 stray keys; plain acquire kept until its ttl", len(releases))
	})
}

// TestS12ReentrancyAndNames: two local callers of one sidecar on one lock
// never both hold it; the same owner asking again gets its own grant back;
// `x` and `x/y` are different locks (the bare etcd mutex's prefix hazard),
// and etcd's own Mutex contends with Baton on the same name.
func TestS12ReentrancyAndNames(t *testing.T) {
	e := newEnv(t, envOptions{})
	sc := e.addSidecars(1, sidecarOptions{})[0]
	runApps(e.apps(sc, 2, 5*time.Millisecond), nil, "s12", scale(50, 200), holdPlan{wait: 30 * time.Second, increments: 1}).Wait()

	ctx := context.Background()
	hc := httpClient(sc)
	_, first, err := call(ctx, hc, "POST", "/v1/locks/x", `{"owner":"o1","ttl":"1m"}`)
	must(t, err)
	code, again, err := call(ctx, hc, "POST", "/v1/locks/x", `{"owner":"o1","ttl":"1m"}`)
	must(t, err)
	if code != 200 || again["fence"] != first["fence"] {
		t.Errorf("the same owner acquiring again: %d %v, want 200 with fence %v", code, again, first["fence"])
	}
	if code, body, _ := call(ctx, hc, "POST", "/v1/locks/x", `{"owner":"o2"}`); code != 409 {
		t.Errorf("another local owner got %d %v while o1 holds x", code, body)
	}
	if code, body, _ := call(ctx, hc, "POST", "/v1/locks/x/y", `{"owner":"o2","ttl":"1m"}`); code != 200 {
		t.Errorf("x/y while x is held: %d %v, want 200: names must not collide by prefix", code, body)
	}
	// etcd's Mutex (what `etcdctl lock` uses) under the same name sees
	// Baton's holder, and its x is not x/y.
	sess, err := concurrency.NewSession(e.cli, concurrency.WithTTL(2))
	must(t, err)
	m := concurrency.NewMutex(sess, "/baton/v1/e2e/locks/x")
	if err := m.TryLock(ctx); !errors.Is(err, concurrency.ErrLocked) {
		t.Errorf("etcd Mutex on x while Baton holds it: %v, want ErrLocked", err)
	}
	for _, k := range []string{"x", "x/y"} {
		if code, body, _ := call(ctx, hc, "DELETE", "/v1/locks/"+k+"?owner="+map[string]string{"x": "o1", "x/y": "o2"}[k], ""); code != 200 {
			t.Errorf("release %s: %d %v", k, code, body)
		}
	}
	if err := m.TryLock(ctx); err != nil {
		t.Errorf("etcd Mutex on x once Baton released it: %v", err)
	} else if code, body, _ := call(ctx, hc, "POST", "/v1/locks/x", `{"owner":"o3"}`); code != 409 || body["holder"].(map[string]any)["foreign"] != true {
		t.Errorf("Baton on x while etcd's Mutex holds it: %d %v, want 409 with a foreign holder", code, body)
	}
	must(t, m.Unlock(ctx))
	must(t, sess.Close())
	e.finish("S12 local re-entrancy, names", requirements{linearizable: true, noOverlap: true, minOK: 2 * scale(50, 200)}, func(o *outcome) {
		o.note("2 callers of one sidecar on one lock; same owner gets its grant back; x and x/y held at once; etcd Mutex and Baton exclude each other")
	})
}

// rawExchange writes raw bytes to a sidecar's socket and reads what comes
// back until the server closes or timeout passes.
func rawExchange(t *testing.T, s *sidecar, raw string, closeWrite bool, timeout time.Duration) (string, time.Duration, bool) {
	t.Helper()
	conn, err := net.Dial("unix", s.socket)
	must(t, err)
	defer conn.Close()
	start := time.Now()
	conn.SetDeadline(start.Add(timeout))
	io.WriteString(conn, raw)
	if closeWrite {
		conn.(*net.UnixConn).CloseWrite()
	}
	out, err := io.ReadAll(conn)
	closed := err == nil // EOF: the server closed the connection
	return string(out), time.Since(start), closed
}

// TestS13BadInput: malformed requests against a real sidecar get a 4xx
// with a JSON error, never a 5xx, never an etcd write; slow or broken
// connections are cut; 1000 waiters on one name cost one key.
func TestS13BadInput(t *testing.T) {
	e := newEnv(t, envOptions{})
	sc := e.addSidecars(1, sidecarOptions{extra: []string{"--max-waiters", "1000"}})[0]
	other := e.addSidecars(1, sidecarOptions{})[0]
	ctx := context.Background()
	rev := func() int64 {
		r, err := e.cli.Get(ctx, "/", clientv3.WithCountOnly())
		must(t, err)
		return r.Header.Revision
	}
	before := rev()
	long := strings.Repeat("k", 2000)
	cases := []struct{ method, path, body string }{
		{"POST", "/v1/locks/a", `{"owner":`},
		{"POST", "/v1/locks/a", `{"ttl":"5"}`},
		{"POST", "/v1/locks/a", `{"ttl":5,"ttl":6}`},
		{"POST", "/v1/locks/a", `null`},
		{"POST", "/v1/locks/a", `[]`},
		{"POST", "/v1/locks/a", `{"owner":"a","nope":1}`},
		{"POST", "/v1/locks/a", `{"ttl":1e400}`},
		{"POST", "/v1/locks/a", `{"ttl":"0s"}`},
		{"POST", "/v1/locks/a", `{"ttl":"-5s"}`},
		{"POST", "/v1/locks/a", `{"ttl":"1ms"}`},
		{"POST", "/v1/locks/a", `{"ttl":"9000000001s"}`},
		{"POST", "/v1/locks/a", `{"wait":"-1s"}`},
		{"POST", "/v1/locks/a", `{"owner":"has space"}`},
		{"POST", "/v1/locks/a", `{"owner":"` + long + `"}`},
		{"POST", "/v1/locks/a", strings.Repeat(" ", 70<<10) + "{}"},
		{"POST", "/v1/locks/", `{}`},
		{"POST", "/v1/locks/" + long, `{}`},
		{"POST", "/v1/locks/a%00b", `{}`},
		{"POST", "/v1/locks/%ff%fe", `{}`},
		{"POST", "/v1/locks/..", `{}`},
		{"POST", "/v1/locks/a/../b", `{}`},
		{"POST", "/v1/locks/%20a", `{}`},
		{"POST", "/v1/locks/a//b", `{}`},
		{"POST", "/v1/locks/a:frobnicate", `{}`},
		{"POST", "/v1/locks/a?x=1", `{}`},
		{"PUT", "/v1/locks/a", `{}`},
		{"GET", "/v2/locks/a", ``},
		{"DELETE", "/v1/locks/a", ``},
		{"DELETE", "/v1/locks/a?owner=", ``},
		{"DELETE", "/v1/locks/a?force=yes", ``},
		{"DELETE", "/v1/locks/a?force=true&fence=abc", ``},
		{"GET", "/v1/locks?prefix=%zz", ``},
	}
	hc := httpClient(sc)
	for _, c := range cases {
		code, body, err := call(ctx, hc, c.method, c.path, c.body)
		if err != nil {
			t.Errorf("%s %.60s: %v", c.method, c.path, err)
			continue
		}
		if code < 400 || code >= 500 || body["code"] == nil || body["message"] == nil {
			t.Errorf("%s %.60s %.60q: %d %v, want a 4xx with a code and a message", c.method, c.path, c.body, code, body)
		}
	}
	if after := rev(); after != before {
		t.Errorf("bad input wrote to etcd: revision %d → %d", before, after)
	}

	// Broken connections: each must be answered or cut, never left hanging.
	type exchange struct {
		name, raw  string
		closeWrite bool
		within     time.Duration
		want       string // in the answer; "" for a cut without answer
	}
	exchanges := []exchange{
		{"non-HTTP bytes", "\x00\x01\x02hello\r\n\r\n", false, 3 * time.Second, "400"},
		{"HTTP/2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", false, 3 * time.Second, ""},
		{"half-close after a request", "GET /healthz HTTP/1.1\r\nHost: b\r\n\r\n", true, 3 * time.Second, "200"},
		{"nothing sent", "", false, 8 * time.Second, ""},
		{"slowloris headers", "POST /v1/locks/a HTTP/1.1\r\nHost: b\r\nX-A: ", false, 8 * time.Second, ""},
		{"Content-Length longer than the body", "POST /v1/locks/a HTTP/1.1\r\nHost: b\r\nContent-Length: 100\r\n\r\n{\"owner\":", false, 15 * time.Second, ""},
		{"chunked body without terminator", "POST /v1/locks/a HTTP/1.1\r\nHost: b\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"own\r\n", false, 15 * time.Second, ""},
	}
	var wg sync.WaitGroup
	for _, x := range exchanges {
		wg.Go(func() {
			out, took, closed := rawExchange(t, sc, x.raw, x.closeWrite, x.within)
			if !closed && !strings.Contains(out, x.want+" ") {
				t.Errorf("%s: connection still open after %v; got %q", x.name, took, out)
			}
			if x.want != "" && !strings.Contains(out, " "+x.want+" ") {
				t.Errorf("%s: got %q, want status %s", x.name, out, x.want)
			}
		})
	}
	wg.Wait()
	if after := rev(); after != before {
		t.Errorf("broken connections wrote to etcd: revision %d → %d", before, after)
	}

	// 1000 waiters on one name: one contender key for all of them; the
	// 1001st is told the sidecar is full; all withdraw without a trace.
	holder, err := other.client.Hold(ctx, "s13-hot", lockapi.Request{Owner: "holder"})
	must(t, err)
	holder.Next()
	wctx, cancel := context.WithCancel(ctx)
	var streams []*baton.Stream
	var mu sync.Mutex
	var wg2 sync.WaitGroup
	queueStart := time.Now()
	for i := range 1000 {
		wg2.Go(func() {
			st, err := sc.client.Hold(wctx, "s13-hot", lockapi.Request{Owner: fmt.Sprintf("w%d", i), Wait: "5m"})
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			ev, err := st.Next()
			for err == nil && ev.Event == lockapi.EventHeartbeat { // a wait's stream may start with heartbeats
				ev, err = st.Next()
			}
			if err != nil || ev.Event != "queued" {
				t.Errorf("waiter %d: %+v %v", i, ev, err)
			}
			mu.Lock()
			streams = append(streams, st)
			mu.Unlock()
		})
	}
	wg2.Wait()
	queued := time.Since(queueStart)
	// Exactly the holder's key and one for all the waiters. A cold CI run
	// once saw 1 key here: on a loaded machine the waiters' key may be
	// briefly absent (a queuing request that timed out withdraws its key
	// before it is retried), so the count is given 5 s to settle; a dump
	// says why if it does not.
	n := e.contenders("s13-hot")
	for deadline := time.Now().Add(5 * time.Second); n != 2 && n <= 2 && time.Now().Before(deadline); n = e.contenders("s13-hot") {
		time.Sleep(50 * time.Millisecond)
	}
	if n != 2 {
		e.dump()
		t.Errorf("1000 waiters of one sidecar and a holder: %d keys, want 2", n)
	}
	_, err = sc.client.Hold(ctx, "s13-hot", lockapi.Request{Owner: "w1001", Wait: "5m"})
	if apiErr := (*lockapi.Error)(nil); !errors.As(err, &apiErr) || apiErr.Status != http.StatusTooManyRequests {
		t.Errorf("the 1001st waiter: %v, want 429", err)
	}
	cancel()
	for _, st := range streams {
		st.Close()
	}
	e.waitQueued("s13-hot", 1)
	holder.Close()
	e.waitQueued("s13-hot", 0)
	e.finish("S13 bad input", requirements{}, func(o *outcome) {
		o.note("%d malformed requests → 4xx with a JSON code, 0 etcd writes; %d broken connections answered or cut; 1000 waiters on one name queued in %v = 1 key, the 1001st 429, all withdrawn", len(cases), len(exchanges), queued.Round(time.Millisecond))
	})
}
