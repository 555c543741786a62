package etcdstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/baton-dev/baton/internal/lockstore"
)

// A fence is the create revision of its holder's key, and etcd's revision
// only grows, so fences only grow: until etcd is not the etcd it was. An
// etcd restored from an older snapshot (a backup, a volume snapshot), or
// one whose data was lost, answers with a revision lower than one already
// seen, and the keys it creates next get create revisions that were
// fences before. History notices, from the header of every answer to a
// key-value call, and keeps a floor: no new grant may have a fence at or
// below it. The floor is the highest revision seen before etcd went back
// (or before this process started, as its state file keeps it, or as the
// scope's floor key in etcd says); grants resume once etcd's revision is
// past it, which an operator makes happen with a revision bump
// (etcdutl snapshot restore --bump-revision).

// History follows etcd's revision and cluster id in the answers of one
// client's key-value calls, and keeps the floor of the fences that may be
// granted.
type History struct {
	mu       sync.Mutex
	high     int64  // the highest revision seen
	last     int64  // the revision of the last answer
	cluster  uint64 // etcd's cluster id, once seen
	floor    int64  // no grant at or below it
	source   string // who raised the floor last
	why      string // how etcd came to be below the floor, when it went back under our eyes
	onRewind func(error)
}

// NewHistory returns a History that has seen nothing yet; onRewind, when
// not nil, is called (not under any lock of History's) each time etcd is
// found to be below the floor, having been above it or unseen.
func NewHistory(onRewind func(error)) *History { return &History{onRewind: onRewind} }

// UnaryClientInterceptor observes the header of every answer to a
// key-value call (Range, Txn, Put, DeleteRange): those are linearizable,
// so an answer's revision is never below one seen before its call was
// sent, while etcd is the same etcd. (Calls in flight together may be
// answered in any order: only what was seen before the call counts.)
func (h *History) UnaryClientInterceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		kv := strings.HasPrefix(method, "/etcdserverpb.KV/")
		var before int64
		if kv {
			before = h.seen()
		}
		err := invoker(ctx, method, req, reply, cc, opts...)
		if err == nil && kv {
			if r, ok := reply.(interface {
				GetHeader() *etcdserverpb.ResponseHeader
			}); ok {
				h.observe(r.GetHeader(), before)
			}
		}
		return err
	}
}

// seen is the highest revision seen so far.
func (h *History) seen() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.high
}

// Observe takes in the header of the answer to a key-value call made after
// every call observed before has been answered.
func (h *History) Observe(hd *etcdserverpb.ResponseHeader) { h.observe(hd, h.seen()) }

// observe takes in the header of an answer to a call sent when the highest
// revision seen was before.
func (h *History) observe(hd *etcdserverpb.ResponseHeader, before int64) {
	if hd == nil || hd.Revision == 0 {
		return
	}
	h.mu.Lock()
	wasBelow := h.belowLocked()
	changed := ""
	switch {
	case h.cluster != 0 && hd.ClusterId != 0 && hd.ClusterId != h.cluster:
		h.floor = max(h.floor, h.high)
		changed = fmt.Sprintf("etcd's cluster id changed from %x to %x at revision %d, having been at revision %d: another etcd answers, or this one was made anew", h.cluster, hd.ClusterId, hd.Revision, h.high)
	case hd.Revision < before:
		h.floor = max(h.floor, h.high)
		changed = fmt.Sprintf("etcd's revision went back from %d to %d: it was restored from an older snapshot or lost its data", h.high, hd.Revision)
	}
	if changed != "" {
		h.why = changed
	}
	if hd.ClusterId != 0 {
		h.cluster = hd.ClusterId
	}
	if hd.Revision >= h.last || changed != "" {
		h.last = hd.Revision // the latest answer: one sent earlier may come later
	}
	h.high = max(h.high, hd.Revision)
	if changed != "" {
		h.high = hd.Revision // the floor keeps the old etcd's; this one is followed from here
	}
	// Told once each time etcd is found another, or below the floor: the
	// locks held may be gone with what it forgot.
	var rewound error
	switch below := h.belowLocked(); {
	case below && !wasBelow:
		rewound = h.errLocked()
	case changed != "" && !wasBelow:
		rewound = fmt.Errorf("%w: %s; its revision is past the highest fence granted, %d, so grants go on", lockstore.ErrRewound, changed, h.floor)
	}
	if !h.belowLocked() {
		h.why = "" // past the floor: what happened is over
	}
	onRewind := h.onRewind
	h.mu.Unlock()
	if rewound != nil && onRewind != nil {
		onRewind(rewound)
	}
}

// Heard takes in a revision heard other than in the answer to a key-value
// call (a lease renewal's, from whichever member answered it): it may lag
// behind revisions seen, so it only raises the highest seen, and so the
// floor a rewind would set. A sidecar that makes no key-value call for a
// while still knows how far etcd went.
func (h *History) Heard(rev int64) {
	h.mu.Lock()
	h.high = max(h.high, rev)
	h.mu.Unlock()
}

// Raise puts the floor at least at floor, as source says (this sidecar's
// state file, the scope's floor key), and reports whether etcd, as last
// seen, is now below it.
func (h *History) Raise(floor int64, source string) bool {
	h.mu.Lock()
	wasBelow := h.belowLocked()
	if floor > h.floor {
		h.floor, h.source = floor, source
	}
	below := h.belowLocked()
	rewound := below && !wasBelow
	var err error
	if rewound {
		err = h.errLocked()
	}
	onRewind := h.onRewind
	h.mu.Unlock()
	if rewound && onRewind != nil {
		onRewind(err)
	}
	return below
}

// belowLocked reports whether a key created now could get a fence at or
// below the floor: etcd's last revision is below it.
func (h *History) belowLocked() bool { return h.last != 0 && h.last < h.floor }

// Floor is the highest fence known to have been granted: no new grant may
// have a fence at or below it.
func (h *History) Floor() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.floor
}

// High is the highest revision seen, and the floor if higher: what the
// next process of this sidecar must not grant at or below.
func (h *History) High() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return max(h.high, h.floor)
}

// Err returns, while etcd's revision is below the floor, an error wrapping
// ErrRewound that says what happened and what an operator does next; nil
// otherwise.
func (h *History) Err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.belowLocked() {
		return nil
	}
	return h.errLocked()
}

func (h *History) errLocked() error {
	why := h.why
	if why == "" {
		why = fmt.Sprintf("%s says fences up to %d were granted, but etcd's revision is %d: it was restored from an older snapshot or lost its data", h.source, h.floor, h.last)
	}
	return fmt.Errorf("%w: %s. A lock granted now could repeat the fence of one granted before, so none is granted until etcd's revision passes %d: take a snapshot of etcd (etcdctl snapshot save SNAPSHOT) and restore it with a revision bump (etcdutl snapshot restore SNAPSHOT --bump-revision %d --mark-compacted); Baton grants again by itself once the revision is past %d",
		lockstore.ErrRewound, why, h.floor, bump(h.floor, h.last), h.floor)
}

// bump is a revision bump that takes etcd at last well past floor.
func bump(floor, last int64) int64 {
	gap := floor - last
	return max(gap+gap/10, gap+1000)
}

// RaiseFloor writes floor into the fence-floor key (keyspace.Layout.Floor)
// unless it holds a floor as high already, so that every sidecar of the
// scope, and the next one to start, refuses the fences at or below it.
func (s *Store) RaiseFloor(ctx context.Context, key string, floor int64) error {
	return s.refusal(RaiseFloorKey(ctx, s.cli, key, floor, s.commits.timeout), key)
}

// RaiseFloorKey writes floor into the fence-floor key through cli, each
// request bounded by timeout, unless the key holds a floor as high
// already: the key only ever grows. The controller writes it too.
func RaiseFloorKey(ctx context.Context, cli *clientv3.Client, key string, floor int64, timeout time.Duration) error {
	for range 8 {
		gctx, cancel := context.WithTimeout(ctx, timeout)
		resp, err := cli.Get(gctx, key)
		cancel()
		if err != nil {
			return err
		}
		cmp := clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
		if len(resp.Kvs) > 0 {
			if have, err := strconv.ParseInt(string(resp.Kvs[0].Value), 10, 64); err == nil && have >= floor {
				return nil
			}
			cmp = clientv3.Compare(clientv3.ModRevision(key), "=", resp.Kvs[0].ModRevision)
		}
		tctx, cancel := context.WithTimeout(ctx, timeout)
		r, err := cli.Txn(tctx).If(cmp).Then(clientv3.OpPut(key, strconv.FormatInt(floor, 10))).Commit()
		cancel()
		if err != nil {
			return err
		}
		if r.Succeeded {
			return nil
		}
	}
	return fmt.Errorf("raise the fence floor %s to %d: it keeps changing", key, floor)
}

// ParseFloor reads the value of the fence-floor key; 0 when there is none.
func ParseFloor(v []byte) (int64, error) {
	if len(v) == 0 {
		return 0, nil
	}
	f, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil || f < 0 {
		return 0, fmt.Errorf("the fence floor %q is not a revision", v)
	}
	return f, nil
}
