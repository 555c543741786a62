//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

// store is the checker store: the resource the locks protect, as Jepsen's
// lock-set is. It keeps, per lock, a counter that holders increment by
// read, sleep, write, and the highest fencing token seen. In fenced mode it
// accepts a read or write iff its token is at least that highest token; in
// no-fence mode (the negative control) it accepts everything, still noting
// what it would have refused. It is served over a unix socket, as a real
// downstream service would be.
type store struct {
	fenced bool
	base   time.Time
	socket string

	mu    sync.Mutex
	locks map[string]*storeLock
	log   []storeOp
}

type storeLock struct {
	maxSeen int64
	value   int64
	acked   int64 // writes accepted: increments the store acknowledged
}

// storeOp is one entry of the store's append-only log.
type storeOp struct {
	Lock     string
	Token    int64
	Holder   string
	Op       string // "read" or "write"
	Accepted bool
	Stale    bool // token below the highest seen: the fence refuses it
	At       time.Duration
}

func newStore(t *testing.T, dir string, fenced bool, base time.Time) *store {
	t.Helper()
	s := &store{fenced: fenced, base: base, socket: filepath.Join(dir, "store.sock"), locks: map[string]*storeLock{}}
	ln, err := net.Listen("unix", s.socket)
	must(t, err)
	srv := &http.Server{Handler: s}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return s
}

// check decides on one operation and logs it.
func (s *store) check(lock string, token int64, holder, op string) (*storeLock, bool) {
	l := s.locks[lock]
	if l == nil {
		l = &storeLock{}
		s.locks[lock] = l
	}
	stale := token < l.maxSeen
	ok := !stale || !s.fenced
	if token > l.maxSeen {
		l.maxSeen = token
	}
	s.log = append(s.log, storeOp{Lock: lock, Token: token, Holder: holder, Op: op, Accepted: ok, Stale: stale, At: time.Since(s.base)})
	return l, ok
}

func (s *store) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	lock, holder := q.Get("lock"), q.Get("holder")
	token, err := strconv.ParseInt(q.Get("token"), 10, 64)
	if err != nil || lock == "" || holder == "" {
		http.Error(w, "lock, token and holder required", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch r.URL.Path {
	case "/read":
		l, ok := s.check(lock, token, holder, "read")
		if !ok {
			w.WriteHeader(http.StatusConflict)
			return
		}
		json.NewEncoder(w).Encode(l.value)
	case "/write":
		v, err := strconv.ParseInt(q.Get("value"), 10, 64)
		if err != nil {
			http.Error(w, "value required", http.StatusBadRequest)
			return
		}
		l, ok := s.check(lock, token, holder, "write")
		if !ok {
			w.WriteHeader(http.StatusConflict)
			return
		}
		l.value = v
		l.acked++
		w.WriteHeader(http.StatusNoContent)
	default:
		http.NotFound(w, r)
	}
}

// storeTotals sums the store's verdicts.
type storeTotals struct {
	writesAccepted, staleAccepted, staleRejected, lostUpdates int64
	final, acked                                              int64
}

func (s *store) totals() storeTotals {
	s.mu.Lock()
	defer s.mu.Unlock()
	var t storeTotals
	for _, op := range s.log {
		switch {
		case op.Stale && op.Accepted:
			t.staleAccepted++
		case op.Stale:
			t.staleRejected++
		}
		if op.Op == "write" && op.Accepted {
			t.writesAccepted++
		}
	}
	for _, l := range s.locks {
		t.final += l.value
		t.acked += l.acked
		t.lostUpdates += l.acked - l.value
	}
	return t
}

// snapshot returns a copy of the log.
func (s *store) snapshot() []storeOp {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]storeOp(nil), s.log...)
}

// errFenced is the store refusing a stale token: the holder has lost the
// lock and must stop.
var errFenced = errors.New("store refused a stale fencing token")

// storeClient is an app's connection to the store.
type storeClient struct {
	http     *http.Client
	maxSleep time.Duration
}

func newStoreClient(s *store, maxSleep time.Duration) *storeClient {
	return &storeClient{maxSleep: maxSleep, http: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", s.socket)
		},
	}}}
}

// increment reads the counter, sleeps 0..maxSleep, writes it plus one.
func (c *storeClient) increment(lock string, token int64, holder string) error {
	v, err := c.call("read", lock, token, holder, "")
	if err != nil {
		return err
	}
	if c.maxSleep > 0 {
		time.Sleep(rand.N(c.maxSleep))
	}
	_, err = c.call("write", lock, token, holder, strconv.FormatInt(v+1, 10))
	return err
}

func (c *storeClient) call(op, lock string, token int64, holder, value string) (int64, error) {
	q := url.Values{"lock": {lock}, "token": {strconv.FormatInt(token, 10)}, "holder": {holder}}
	if value != "" {
		q.Set("value", value)
	}
	resp, err := c.http.Post("http://store/"+op+"?"+q.Encode(), "", nil)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		var v int64
		err := json.NewDecoder(resp.Body).Decode(&v)
		return v, err
	case http.StatusNoContent:
		return 0, nil
	case http.StatusConflict:
		return 0, errFenced
	default:
		return 0, fmt.Errorf("store %s: status %d", op, resp.StatusCode)
	}
}
