// Package etcdstore is the lock engine's store on etcd: every etcd call of
// the coordinator goes through it. Writes go through a group committer
// (one etcd transaction carries the writes of many callers at once), reads
// are linearizable, and a sidecar watches each lock it holds or awaits.
package etcdstore

import (
	"context"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/lockstore"
)

// Store is lockstore.Store on an etcd client.
type Store struct {
	cli         *clientv3.Client
	commits     *committer
	user        string                // the etcd user, for errors (User)
	lastRefused atomic.Pointer[error] // for Refused
}

var _ lockstore.Store = (*Store)(nil)

// Option configures a Store.
type Option func(*Store)

// OnCommit makes f hear the number of writes each etcd transaction carried.
func OnCommit(f func(n int)) Option { return func(s *Store) { s.commits.committed = f } }

// New returns a Store on cli whose writes each take at most timeout.
func New(cli *clientv3.Client, timeout time.Duration, opts ...Option) *Store {
	s := &Store{cli: cli, commits: newCommitter(cli, timeout, func(int) {})}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Try implements lockstore.Store. A refused try costs a raft entry (a
// transaction with a write branch); the coordinator reads first when it
// expects a refusal.
func (s *Store) Try(lock string, p lockstore.Put) (lockstore.Outcome, error) {
	out, kvs, err := s.attempt(lock, p, clientv3.Compare(clientv3.CreateRevision(lock), "=", 0).WithPrefix(),
		clientv3.OpGet(lock, clientv3.WithFirstCreate()...))
	if err == nil && !out.OK {
		out.First = first(kvs)
	}
	return out, err
}

// attempt creates p.Key if cmp holds and p.Gate (when set) does not exist;
// else it reads with read, whose answer it returns, and the marker.
func (s *Store) attempt(lock string, p lockstore.Put, cmp clientv3.Cmp, read clientv3.Op) (lockstore.Outcome, []*mvccpb.KeyValue, error) {
	t := lockTxn{key: p.Key, lock: lock, cmp: []clientv3.Cmp{cmp}, then: []clientv3.Op{put(p)}, els: []clientv3.Op{read}, phase: beforeWrites}
	if p.Gate != "" {
		t.cmp = append(t.cmp, clientv3.Compare(clientv3.CreateRevision(p.Gate), "=", 0))
		t.els = append(t.els, clientv3.OpGet(p.Gate))
	}
	r, err := s.commits.do(t)
	err = s.refusal(err, p.Key)
	if err != nil || r.succeeded {
		return lockstore.Outcome{OK: r.succeeded, Rev: r.revision}, nil, err
	}
	out := lockstore.Outcome{Rev: r.revision}
	if p.Gate != "" {
		out.Gate = value(r.responses[1].GetResponseRange().Kvs)
	}
	return out, r.responses[0].GetResponseRange().Kvs, nil
}

// value is the value of a single-key read, nil when the key is absent.
func value(kvs []*mvccpb.KeyValue) []byte {
	if len(kvs) == 0 {
		return nil
	}
	return kvs[0].Value
}

// Queue implements lockstore.Store: the transaction that creates the key
// reads the names of the contenders, so a waiter knows its place without a
// second round trip.
func (s *Store) Queue(lock string, p lockstore.Put) (lockstore.Outcome, error) {
	out, kvs, err := s.enqueue(lock, p, clientv3.OpGet(lock, newestFirst()...))
	if out.OK {
		out.Ahead = namesBefore(kvs, out.Rev)
	}
	return out, err
}

// enqueue creates p.Key under lock unless it exists, reading in the same
// transaction with read, whose answer it returns, and the marker p.Gate.
func (s *Store) enqueue(lock string, p lockstore.Put, read clientv3.Op) (lockstore.Outcome, []*mvccpb.KeyValue, error) {
	t := lockTxn{key: p.Key, lock: lock,
		cmp:   []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(p.Key), "=", 0)},
		then:  []clientv3.Op{put(p), read},
		phase: afterWrites,
	}
	if p.Gate != "" {
		t.then = append(t.then, clientv3.OpGet(p.Gate))
	}
	r, err := s.commits.do(t)
	err = s.refusal(err, p.Key)
	if err != nil || !r.succeeded {
		return lockstore.Outcome{Rev: r.revision}, nil, err
	}
	out := lockstore.Outcome{OK: true, Rev: r.revision}
	if p.Gate != "" {
		out.Gate = value(r.responses[2].GetResponseRange().Kvs)
	}
	return out, r.responses[1].GetResponseRange().Kvs, nil
}

// TryIn implements lockstore.Store: one transaction, which reads the
// lock's line when its compare fails, so a refusal costs one round trip
// and writes nothing but the raft entry of a transaction with a write
// branch.
func (s *Store) TryIn(lock string, p lockstore.Put, seen int64) (lockstore.Outcome, error) {
	out, kvs, err := s.attempt(lock, p, clientv3.Compare(clientv3.CreateRevision(lock), "<", seen+1).WithPrefix(),
		clientv3.OpGet(lock, firstCreatedFirst()...))
	if err == nil && !out.OK {
		out.Line = contenders(kvs, out.Rev+1)
	}
	return out, err
}

// Join implements lockstore.Store: the transaction that creates the key
// reads the line ahead of it.
func (s *Store) Join(lock string, p lockstore.Put) (lockstore.Outcome, error) {
	out, kvs, err := s.enqueue(lock, p, clientv3.OpGet(lock, firstCreatedFirst()...))
	if out.OK {
		out.Line = contenders(kvs, out.Rev)
	}
	return out, err
}

// Update implements lockstore.Store.
func (s *Store) Update(p lockstore.Put, create, mod int64) (lockstore.Outcome, error) {
	cmp := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(p.Key), "=", create)}
	if mod != 0 {
		cmp = append(cmp, clientv3.Compare(clientv3.ModRevision(p.Key), "=", mod))
	}
	r, err := s.commits.do(lockTxn{key: p.Key, cmp: cmp, then: []clientv3.Op{put(p)}})
	return lockstore.Outcome{OK: r.succeeded, Rev: r.revision}, s.refusal(err, p.Key)
}

// Delete implements lockstore.Store. It compares the key's create revision,
// so it never removes a newer key of the same name (etcd #22082).
func (s *Store) Delete(key string, create int64) (lockstore.Outcome, error) {
	cmp := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", create)}
	if create == 0 {
		cmp[0] = clientv3.Compare(clientv3.CreateRevision(key), ">", 0)
	}
	r, err := s.commits.do(lockTxn{key: key, cmp: cmp, then: []clientv3.Op{clientv3.OpDelete(key)}})
	return lockstore.Outcome{OK: r.succeeded, Rev: r.revision}, s.refusal(err, key)
}

// Finish implements lockstore.Store.
func (s *Store) Finish(key string, create int64, record, value string, lease lockstore.LeaseID, also string) (lockstore.Outcome, error) {
	var opts []clientv3.OpOption
	if lease != 0 {
		opts = append(opts, clientv3.WithLease(clientv3.LeaseID(lease)))
	}
	then := []clientv3.Op{clientv3.OpPut(record, value, opts...), clientv3.OpDelete(key)}
	if also != "" {
		then = append(then, clientv3.OpDelete(also))
	}
	r, err := s.commits.do(lockTxn{key: key, cmp: []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", create)}, then: then})
	return lockstore.Outcome{OK: r.succeeded, Rev: r.revision}, s.refusal(err, record)
}

// DeleteWith implements lockstore.Store.
func (s *Store) DeleteWith(key string, create int64, also string) (lockstore.Outcome, error) {
	r, err := s.commits.do(lockTxn{key: key,
		cmp:  []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", create)},
		then: []clientv3.Op{clientv3.OpDelete(key), clientv3.OpDelete(also)},
	})
	return lockstore.Outcome{OK: r.succeeded, Rev: r.revision}, s.refusal(err, key)
}

// Mark implements lockstore.Store.
func (s *Store) Mark(key string, create int64, marker, value string) (lockstore.Outcome, error) {
	r, err := s.commits.do(lockTxn{key: key,
		cmp:  []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", create)},
		then: []clientv3.Op{clientv3.OpPut(marker, value)},
	})
	return lockstore.Outcome{OK: r.succeeded, Rev: r.revision}, s.refusal(err, marker)
}

// Swap implements lockstore.Store.
func (s *Store) Swap(key, old, value string) (lockstore.Outcome, error) {
	op := clientv3.OpPut(key, value)
	if value == "" {
		op = clientv3.OpDelete(key)
	}
	r, err := s.commits.do(lockTxn{key: key, cmp: []clientv3.Cmp{clientv3.Compare(clientv3.Value(key), "=", old)}, then: []clientv3.Op{op}})
	return lockstore.Outcome{OK: r.succeeded, Rev: r.revision}, s.refusal(err, key)
}

// Read implements lockstore.Store.
func (s *Store) Read(ctx context.Context, key string) ([]byte, bool, error) {
	resp, err := s.cli.Get(ctx, key)
	if err != nil {
		return nil, false, s.refusal(err, key)
	}
	if len(resp.Kvs) == 0 {
		return nil, false, nil
	}
	return resp.Kvs[0].Value, true, nil
}

// GrantLease implements lockstore.Store.
func (s *Store) GrantLease(ctx context.Context, ttl time.Duration) (lockstore.LeaseID, error) {
	resp, err := s.cli.Grant(ctx, int64((ttl+time.Second-1)/time.Second))
	if err != nil {
		return 0, err
	}
	return lockstore.LeaseID(resp.ID), nil
}

// First implements lockstore.Store.
func (s *Store) First(ctx context.Context, lock string) (*lockstore.Contender, error) {
	resp, err := s.cli.Get(ctx, lock, clientv3.WithFirstCreate()...)
	if err != nil {
		return nil, s.refusal(err, lock)
	}
	return first(resp.Kvs), nil
}

// Ahead implements lockstore.Store in one read-only transaction: a
// linearizable read, no raft entry. etcd reads the whole prefix for a
// create-revision filter whatever the limit, so reading the keys without
// values costs no more.
func (s *Store) Ahead(ctx context.Context, lock, key string, create int64) ([]string, int64, bool, error) {
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", create)).
		Then(clientv3.OpGet(lock, append(newestFirst(), clientv3.WithMaxCreateRev(create-1))...)).
		Commit()
	if err != nil {
		return nil, 0, false, s.refusal(err, lock)
	}
	if !resp.Succeeded {
		return nil, resp.Header.Revision, false, nil
	}
	return namesBefore(resp.Responses[0].GetResponseRange().Kvs, create), resp.Header.Revision, true, nil
}

// Line implements lockstore.Store in one read-only transaction.
func (s *Store) Line(ctx context.Context, lock, key string, create int64) ([]lockstore.Contender, int64, bool, error) {
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", create)).
		Then(clientv3.OpGet(lock, append(firstCreatedFirst(), clientv3.WithMaxCreateRev(create-1))...)).
		Commit()
	if err != nil {
		return nil, 0, false, s.refusal(err, lock)
	}
	if !resp.Succeeded {
		return nil, resp.Header.Revision, false, nil
	}
	return contenders(resp.Responses[0].GetResponseRange().Kvs, create), resp.Header.Revision, true, nil
}

// Contenders implements lockstore.Store.
func (s *Store) Contenders(ctx context.Context, prefix string, limit int) ([]lockstore.Contender, bool, error) {
	resp, err := s.cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithLimit(int64(limit)))
	if err != nil {
		return nil, false, s.refusal(err, prefix)
	}
	cs := make([]lockstore.Contender, len(resp.Kvs))
	for i, kv := range resp.Kvs {
		cs[i] = contenderOf(kv)
	}
	return cs, resp.More, nil
}

// Holds implements lockstore.Store.
func (s *Store) Holds(ctx context.Context, key string, create int64) (bool, error) {
	resp, err := s.cli.Get(ctx, key, clientv3.WithKeysOnly())
	if err != nil {
		return false, s.refusal(err, key)
	}
	return len(resp.Kvs) == 1 && resp.Kvs[0].CreateRevision == create, nil
}

// LeaseGone implements lockstore.Store.
func (s *Store) LeaseGone(ctx context.Context, id lockstore.LeaseID) (bool, error) {
	ttl, err := s.cli.TimeToLive(ctx, clientv3.LeaseID(id))
	if err != nil {
		return false, err
	}
	return ttl.TTL == -1, nil
}

func put(p lockstore.Put) clientv3.Op {
	return clientv3.OpPut(p.Key, p.Record.Encode(), clientv3.WithLease(clientv3.LeaseID(p.Lease)))
}

// newestFirst reads the contender keys of a lock, names only, the last
// created first.
func newestFirst() []clientv3.OpOption {
	return []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend)}
}

// firstCreatedFirst reads the contender keys of a lock with their
// records, the first created first.
func firstCreatedFirst() []clientv3.OpOption {
	return []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend)}
}

// contenders returns the contenders of kvs created before rev, in their
// order.
func contenders(kvs []*mvccpb.KeyValue, rev int64) []lockstore.Contender {
	var cs []lockstore.Contender
	for _, kv := range kvs {
		if kv.CreateRevision < rev {
			cs = append(cs, contenderOf(kv))
		}
	}
	return cs
}

// namesBefore returns the names of the keys of kvs created before rev, in
// their order.
func namesBefore(kvs []*mvccpb.KeyValue, rev int64) []string {
	var names []string
	for _, kv := range kvs {
		if kv.CreateRevision < rev {
			names = append(names, string(kv.Key))
		}
	}
	return names
}

// first returns the contender of a range read with
// clientv3.WithFirstCreate, nil when it found none.
func first(kvs []*mvccpb.KeyValue) *lockstore.Contender {
	if len(kvs) == 0 {
		return nil
	}
	c := contenderOf(kvs[0])
	return &c
}

func contenderOf(kv *mvccpb.KeyValue) lockstore.Contender {
	return lockstore.Contender{Key: string(kv.Key), Create: kv.CreateRevision, Mod: kv.ModRevision,
		Lease: lockstore.LeaseID(kv.Lease), Holder: keyspace.DecodeHolder(kv.Value)}
}
