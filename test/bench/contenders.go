package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-dev/baton/internal/keyspace"
)

// contender is one way of taking and giving back a lock.
type contender struct {
	name string
	// setup prepares for c clients and returns one acquire + release cycle
	// of client i, and what to do after the run.
	setup func(ctx context.Context, c int) (cycle func(ctx context.Context, i int) error, done func(), err error)
}

// rawTxn is the physical limit: one Txn to take the key under a lease, one
// to delete it if it is still ours.
func (w *world) rawTxn() contender {
	return w.leased(raw, func(ctx context.Context, l clientv3.LeaseID, i int) (string, *clientv3.TxnResponse, error) {
		k := fmt.Sprintf("/bench/raw/k%d", i)
		r, err := w.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
			Then(clientv3.OpPut(k, "", clientv3.WithLease(l))).Commit()
		return k, r, err
	})
}

// rawShaped is rawTxn with Baton's transactions: the acquire compares the
// lock's whole prefix (no contender of any sidecar, nor etcdctl lock's) and
// puts a holder record; the release is the same. What it costs over
// rawTxn is the price of the concurrency.Mutex key layout at etcd.
func (w *world) rawShaped() contender {
	layout, err := keyspace.NewLayout("bench-raw")
	if err != nil {
		panic(err) // a constant, valid scope
	}
	return w.leased(rawShapedName, func(ctx context.Context, l clientv3.LeaseID, i int) (string, *clientv3.TxnResponse, error) {
		k, err := keyspace.ParseKey(fmt.Sprintf("k%d", i))
		if err != nil {
			return "", nil, err
		}
		txn, key := batonTry(w.cli.Txn(ctx), layout, k, fmt.Sprintf("c%d", i), l)
		r, err := txn.Commit()
		return key, r, err
	})
}

// batonTry makes txn Baton's try of lock k under lease l: put the
// contender key with a holder record if the lock's prefix has none, else
// read the first contender (the holder). It returns the key it puts.
func batonTry(txn clientv3.Txn, layout keyspace.Layout, k keyspace.Key, owner string, l clientv3.LeaseID) (clientv3.Txn, string) {
	pfx, key := layout.LockPrefix(k), layout.ContenderKey(k, int64(l))
	now := time.Now()
	rec := keyspace.Holder{Owner: owner, Pod: "bench", Node: "bench", AcquiredAt: now, ExpiresAt: now.Add(time.Minute)}
	return txn.If(clientv3.Compare(clientv3.CreateRevision(pfx), "=", 0).WithPrefix()).
		Then(clientv3.OpPut(key, rec.Encode(), clientv3.WithLease(l))).
		Else(clientv3.OpGet(pfx, clientv3.WithFirstCreate()...)), key
}

// leased is a contender whose clients take a key under one lease with
// acquire and delete it with a Txn that compares its create revision; the
// lease is revoked after the run.
func (w *world) leased(name string, acquire func(ctx context.Context, l clientv3.LeaseID, i int) (string, *clientv3.TxnResponse, error)) contender {
	return contender{name: name, setup: func(ctx context.Context, c int) (func(context.Context, int) error, func(), error) {
		l, err := w.cli.Grant(ctx, 60)
		if err != nil {
			return nil, nil, err
		}
		return func(ctx context.Context, i int) error {
				k, r, err := acquire(ctx, l.ID, i)
				if err != nil {
					return err
				}
				if !r.Succeeded {
					return fmt.Errorf("%s: key %s taken", name, k)
				}
				_, err = w.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(k), "=", r.Header.Revision)).
					Then(clientv3.OpDelete(k)).Commit()
				return err
			}, func() {
				w.cli.Revoke(context.Background(), l.ID)
			}, nil
	}}
}

// mutexTry is etcd's concurrency.Mutex, TryLock and Unlock, one session.
func (w *world) mutexTry() contender { return mutexTryOn(w.cli, mutex) }

// baton takes and releases the lock through a sidecar's socket.
func (w *world) baton(s *sidecar) contender { return w.batonNamed(s, baton) }

// batonNamed is baton on sidecar s, under another name.
func (w *world) batonNamed(s *sidecar, name string) contender {
	return w.batonSpread([]*sidecar{s}, name)
}

// batonSpread is baton with client i on sidecar i mod len(scs).
func (w *world) batonSpread(scs []*sidecar, name string) contender {
	return contender{name: name, setup: func(ctx context.Context, c int) (func(context.Context, int) error, func(), error) {
		return func(ctx context.Context, i int) error {
				s := scs[i%len(scs)]
				k := fmt.Sprintf("k%d", i)
				if err := s.call(ctx, "POST", "/v1/locks/"+k, fmt.Sprintf(`{"owner":"c%d","ttl":"1m"}`, i), 200); err != nil {
					return err
				}
				return s.call(context.WithoutCancel(ctx), "DELETE", fmt.Sprintf("/v1/locks/%s?owner=c%d", k, i), "", 200)
			}, func() {
				// A grant answered just as its run ended may have been dropped
				// by the client; held on, it would be watched past the watch
				// delay and skew the next runs on these sidecars.
				for i := range c {
					s := scs[i%len(scs)]
					s.send(context.WithoutCancel(ctx), "DELETE", fmt.Sprintf("/v1/locks/k%d?owner=c%d", i, i), "", 200)
				}
			}, nil
	}}
}

// call sends one request and wants status want.
func (s *sidecar) call(ctx context.Context, method, path, body string, want int) error {
	_, err := s.send(ctx, method, path, body, want)
	return err
}

// callJSON sends one request, wants 200 and decodes the answer into v.
func (s *sidecar) callJSON(ctx context.Context, method, path, body string, v any) error {
	raw, err := s.send(ctx, method, path, body, http.StatusOK)
	if err != nil {
		return err
	}
	return json.Unmarshal(raw, v)
}

// send sends one request, wants status want and returns the answer's body.
func (s *sidecar) send(ctx context.Context, method, path, body string, want int) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://baton"+path, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return nil, err
	}
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != want {
		return nil, fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, raw)
	}
	return raw, err
}

// roundTrips is the floor a sidecar adds: the two HTTP round trips of a
// cycle over the unix socket, answered without etcd.
func (w *world) roundTrips(s *sidecar) contender {
	return contender{name: "2 × GET /healthz (no etcd)", setup: func(ctx context.Context, c int) (func(context.Context, int) error, func(), error) {
		return func(ctx context.Context, i int) error {
			if err := s.call(ctx, "GET", "/healthz", "", 200); err != nil {
				return err
			}
			return s.call(ctx, "GET", "/healthz", "", 200)
		}, func() {}, nil
	}}
}
