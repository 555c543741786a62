package etcdstore

import (
	"context"
	"errors"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// lockTxn is a transaction on one contender key: each write of the Store
// makes one.
type lockTxn struct {
	key string // the contender key it may write
	// lock is the prefix of the lock whose line it joins, when it may
	// create a key: two keys created in one etcd transaction would share a
	// create revision, so one lock's two new contenders would share a place
	// in line and a fence.
	lock  string
	cmp   []clientv3.Cmp
	then  []clientv3.Op
	els   []clientv3.Op
	phase txnPhase // where a batch carries it
}

// puts reports whether t may write data, which costs etcd space: etcd
// refuses it while its NOSPACE alarm is raised, and a batch with it.
func (t lockTxn) puts() bool {
	for _, ops := range [][]clientv3.Op{t.then, t.els} {
		for _, op := range ops {
			if op.IsPut() || op.IsTxn() {
				return true
			}
		}
	}
	return false
}

// txnPhase is where a lockTxn that reads its lock's line goes in a batch.
// Operations in one etcd transaction see the ones before them and all take
// its revision, but etcd evaluates every compare of the transaction, nested
// ones included, before any operation. A read must show the line its
// caller's logic expects at the transaction's revision: a read of a line
// before a delete in the same transaction would show a contender gone at
// the very revision the read reports, a delete that a watch from the next
// revision never delivers, and the waiter behind it would wait for it
// forever.
type txnPhase int

const (
	// amongWrites: a lockTxn that reads no line (a release, an update, a
	// mark).
	amongWrites txnPhase = iota
	// beforeWrites: a try, whose compare on its lock's line sees the line
	// before the transaction; its read on refusal comes before any write,
	// so it names the holder that compare saw.
	beforeWrites
	// afterWrites: a queueing, which creates its key and reads the line
	// ahead in the branch that writes; after every write, it sees the line
	// as of the end of the revision. Two lockTxns creating keys of one lock
	// never share a batch (takeLocked), so it sees no other's new key.
	afterWrites
)

// txnResult is the outcome of a lockTxn.
type txnResult struct {
	succeeded bool
	responses []*pb.ResponseOp
	// revision is that of the etcd transaction that carried the lockTxn: a
	// key it put was created at this revision.
	revision int64
}

// maxBatch is the most lockTxns one etcd transaction carries. Each is one
// operation of the outer transaction and takes at most two of its own;
// etcd's default --max-txn-ops, 128, allows 126.
const maxBatch = 64

// committer commits lockTxns, sharing etcd transactions between callers:
// group commit. A lockTxn that finds no transaction in flight is committed
// at once, alone, as a transaction of its own, so a lone caller waits for
// nothing. The lockTxns that arrive while one is in flight go together in
// the next, each as a nested transaction with its own compare, committed
// when the one in flight ends. Many callers at once then cost etcd one raft
// entry and one fsync per batch rather than one each, and the sidecar one
// gRPC call. A batch never holds two lockTxns on the same key (etcd refuses
// that); each lock's turn keeps a sidecar's lockTxns on a key one at a time
// anyway.
//
// Every lockTxn of a batch commits or none does: an error (etcd out of
// reach, a time-out) is each caller's error, as it would have been alone.
// But while etcd is out of space, the lockTxns that write nothing are
// committed again without those that do, since alone they would pass.
type committer struct {
	kv        clientv3.KV
	timeout   time.Duration
	committed func(n int) // told the size of each batch etcd took; never nil

	mu      sync.Mutex
	running bool // a transaction is in flight
	queue   []*pendingTxn
	max     int // the most lockTxns per transaction; lowered when etcd says too many
}

// pendingTxn is a lockTxn waiting for its outcome.
type pendingTxn struct {
	t    lockTxn
	res  txnResult
	err  error
	done chan struct{}
}

func newCommitter(kv clientv3.KV, timeout time.Duration, committed func(n int)) *committer {
	return &committer{kv: kv, timeout: timeout, max: maxBatch, committed: committed}
}

// do commits t, with whatever else is queued, and returns its outcome. It
// waits for the outcome whatever happens to the caller: the transaction's
// own time-out bounds the wait.
func (m *committer) do(t lockTxn) (txnResult, error) {
	p := &pendingTxn{t: t, done: make(chan struct{})}
	m.mu.Lock()
	m.queue = append(m.queue, p)
	lead := !m.running
	m.running = true
	m.mu.Unlock()
	if lead {
		m.run()
	}
	<-p.done
	return p.res, p.err
}

// run commits the queue's next batch, then hands the rest of the queue to
// a goroutine of its own, so that the caller that led the batch returns.
func (m *committer) run() {
	m.mu.Lock()
	batch := m.takeLocked()
	m.mu.Unlock()
	m.commit(batch)
	m.mu.Lock()
	if len(m.queue) == 0 {
		m.running = false
	} else {
		go m.run()
	}
	m.mu.Unlock()
}

// takeLocked removes the next batch from the queue: up to m.max lockTxns,
// in arrival order, no two on one key, no two creating keys of one lock.
func (m *committer) takeLocked() []*pendingTxn {
	if len(m.queue) == 1 {
		batch := m.queue
		m.queue = nil
		return batch
	}
	batch := make([]*pendingTxn, 0, min(len(m.queue), m.max))
	keys := make(map[string]bool, cap(batch))
	rest := m.queue[:0]
	for _, p := range m.queue {
		if len(batch) == m.max || keys[p.t.key] || (p.t.lock != "" && keys[p.t.lock]) {
			rest = append(rest, p)
			continue
		}
		keys[p.t.key] = true
		if p.t.lock != "" {
			keys[p.t.lock] = true // a prefix ends in "/", a key never does
		}
		batch = append(batch, p)
	}
	clear(m.queue[len(rest):])
	m.queue = rest
	return batch
}

// commit commits batch and closes each pendingTxn's done. A batch that
// etcd refuses as too large is committed again in halves: one with more
// operations than its --max-txn-ops allows (the halves' size is the most
// from then on), or more bytes than its --max-request-bytes.
func (m *committer) commit(batch []*pendingTxn) {
	ctx, cancel := context.WithTimeout(context.Background(), m.timeout)
	defer cancel()
	if len(batch) == 1 {
		p := batch[0]
		resp, err := m.kv.Txn(ctx).If(p.t.cmp...).Then(p.t.then...).Else(p.t.els...).Commit()
		if err == nil {
			m.committed(1)
			p.res = txnResult{succeeded: resp.Succeeded, responses: resp.Responses, revision: resp.Header.Revision}
		}
		p.err = err
		close(p.done)
		return
	}
	batch = ordered(batch)
	ops := make([]clientv3.Op, len(batch))
	for i, p := range batch {
		ops[i] = clientv3.OpTxn(p.t.cmp, p.t.then, p.t.els)
	}
	resp, err := m.kv.Txn(ctx).Then(ops...).Commit()
	tooMany, tooLarge := errors.Is(err, rpctypes.ErrTooManyOps), errors.Is(err, rpctypes.ErrRequestTooLarge)
	if tooMany || tooLarge {
		half := (len(batch) + 1) / 2
		if tooMany {
			m.mu.Lock()
			m.max = min(m.max, half)
			m.mu.Unlock()
		}
		cancel()
		m.commit(batch[:half])
		m.commit(batch[half:])
		return
	}
	if is(err, rpctypes.ErrNoSpace) && m.commitFree(batch, err) {
		return
	}
	if err == nil {
		m.committed(len(batch))
	}
	for i, p := range batch {
		switch {
		case err != nil:
			p.err = err
		case i >= len(resp.Responses) || resp.Responses[i].GetResponseTxn() == nil:
			p.err = errors.New("etcd answered a batch of transactions without the answer of each")
		default:
			r := resp.Responses[i].GetResponseTxn()
			p.res = txnResult{succeeded: r.Succeeded, responses: r.Responses, revision: resp.Header.Revision}
		}
		close(p.done)
	}
}

// commitFree answers a batch that etcd refused for want of space, applying
// none of it: the lockTxns that only read and delete (releases, which make
// room) are committed again without those that write, which fail with
// err. It reports false, answering none, when the batch has none of one
// or of the other.
func (m *committer) commitFree(batch []*pendingTxn, err error) bool {
	var free []*pendingTxn
	for _, p := range batch {
		if !p.t.puts() {
			free = append(free, p)
		}
	}
	if len(free) == 0 || len(free) == len(batch) {
		return false
	}
	for _, p := range batch {
		if p.t.puts() {
			p.err = err
			close(p.done)
		}
	}
	m.commit(free)
	return true
}

// ordered returns a batch in the order its etcd transaction carries it:
// the tries, then the writes, then the queueings (txnPhase).
func ordered(batch []*pendingTxn) []*pendingTxn {
	out := make([]*pendingTxn, 0, len(batch))
	for _, ph := range []txnPhase{beforeWrites, amongWrites, afterWrites} {
		for _, p := range batch {
			if p.t.phase == ph {
				out = append(out, p)
			}
		}
	}
	return out
}
