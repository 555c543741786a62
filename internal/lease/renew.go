package lease

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// renewal is etcd's answer to a renewal of one lease, and when it was
// heard.
type renewal struct {
	ttl time.Duration // 0 or less: etcd says the lease is gone
	rev int64         // the answering member's revision
	at  time.Time
}

// renewer renews the leases of one session over one keep-alive stream. It
// asks for a renewal of every lease at a steady pace, whether or not the
// last ask was answered, rather than a third of the TTL after the last
// answer as clientv3's KeepAlive does.
//
// The difference is etcd's gRPC proxy (the chart's etcd.proxy). The proxy
// renews each lease on a schedule of its own, a third of the TTL after its
// last answer, and answers a client's ask only when its next renewal is
// answered. An ask that reaches it a moment after one of its renewals
// waits for the one after: a client that asks a third of the TTL after
// each answer then hears nothing for two of the proxy's periods, at a 3 s
// TTL 3 s, past the 2.25 s after which its session is given up (lost,
// though etcd still holds the lease). How long that moment is depends on
// the two schedules and on the time an answer takes to arrive, so a
// loaded node turns it from rare to frequent. Asking every sixth of the
// TTL leaves an ask waiting at each of the proxy's renewals; straight to
// etcd, it renews twice as often as clientv3 would, at one small message
// per lease each time. An ask not yet answered is not repeated on the same
// stream before two paces have passed: etcd answers a stream's asks one
// after the other, and a slow etcd would otherwise pile them up.
type renewer struct {
	lc    pb.LeaseClient
	every time.Duration // between two asks
	retry backoff.ExponentialBackOff

	mu      sync.Mutex
	subs    map[clientv3.LeaseID]chan renewal
	fresh   map[clientv3.LeaseID]struct{} // added since the stream last asked
	lastErr error                         // why the last stream broke
	wake    chan struct{}                 // something was added
}

// newRenewer returns a renewer asking every `every`, opening a stream
// that broke again after retryMin, doubling up to at most every; run
// starts it.
func newRenewer(cli *clientv3.Client, every, retryMin time.Duration) *renewer {
	r := &renewer{lc: clientv3.RetryLeaseClient(cli), every: every,
		subs: map[clientv3.LeaseID]chan renewal{}, fresh: map[clientv3.LeaseID]struct{}{}, wake: make(chan struct{}, 1)}
	// Varied by ±20%, so that the sidecars that lost a member together do
	// not come back in step.
	r.retry = backoff.ExponentialBackOff{InitialInterval: min(retryMin, every), RandomizationFactor: 0.2, Multiplier: 2, MaxInterval: every}
	r.retry.Reset()
	return r
}

// add starts renewing id, asking at once, and returns the channel its
// answers arrive on. The channel keeps the latest answer only.
func (r *renewer) add(id clientv3.LeaseID) <-chan renewal {
	ch := make(chan renewal, 1)
	r.mu.Lock()
	r.subs[id] = ch
	r.fresh[id] = struct{}{}
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default: // already woken
	}
	return ch
}

// remove stops renewing id.
func (r *renewer) remove(id clientv3.LeaseID) {
	r.mu.Lock()
	delete(r.subs, id)
	delete(r.fresh, id)
	r.mu.Unlock()
}

// err returns why the last keep-alive stream broke, or nil.
func (r *renewer) err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastErr
}

// run keeps a keep-alive stream open until ctx ends, opening another one
// when it breaks (a member restarted, the proxy went): the sessions' own
// deadlines bound how long that may take.
func (r *renewer) run(ctx context.Context) {
	for ctx.Err() == nil {
		answered, err := r.stream(ctx)
		if ctx.Err() != nil {
			return
		}
		r.mu.Lock()
		r.lastErr = err
		r.mu.Unlock()
		if answered {
			r.retry.Reset()
		}
		select {
		case <-ctx.Done():
		case <-time.After(r.retry.NextBackOff()):
		}
	}
}

// stream opens one keep-alive stream and asks on it until it breaks or ctx
// ends. answered says whether an answer came on it.
func (r *renewer) stream(ctx context.Context) (answered bool, err error) {
	// Required to have a leader: a member cut off from the others ends the
	// stream, and the next one may go to another member.
	sctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	st, err := r.lc.LeaseKeepAlive(sctx, grpc.WaitForReady(true))
	if err != nil {
		return false, err
	}
	asks := &asked{at: map[clientv3.LeaseID]time.Time{}}
	recvd := make(chan error, 1)
	go func() { recvd <- r.receive(st, asks) }()
	tick := time.NewTicker(r.every)
	defer tick.Stop()
	r.takeFresh()
	for err = r.ask(st, asks, r.ids()); err == nil; {
		select {
		case <-tick.C:
			err = r.ask(st, asks, r.ids())
		case <-r.wake:
			err = r.ask(st, asks, r.takeFresh())
		case err = <-recvd:
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	return asks.answered(), err
}

// asked is what a stream asked and was answered.
type asked struct {
	mu  sync.Mutex
	at  map[clientv3.LeaseID]time.Time // the asks not answered yet
	any bool                           // an answer came
}

func (a *asked) answered() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.any
}

// ask sends a renewal of each of ids but those asked for less than two
// paces ago and not answered yet.
func (r *renewer) ask(st pb.Lease_LeaseKeepAliveClient, asks *asked, ids []clientv3.LeaseID) error {
	now := time.Now()
	for _, id := range ids {
		asks.mu.Lock()
		at, waiting := asks.at[id]
		if waiting && now.Sub(at) < 2*r.every {
			asks.mu.Unlock()
			continue
		}
		asks.at[id] = now
		asks.mu.Unlock()
		if err := st.Send(&pb.LeaseKeepAliveRequest{ID: int64(id)}); err != nil {
			return err
		}
	}
	return nil
}

// receive hands each answer on the stream to its lease's channel until the
// stream breaks.
func (r *renewer) receive(st pb.Lease_LeaseKeepAliveClient, asks *asked) error {
	for {
		resp, err := st.Recv()
		if err != nil {
			return err
		}
		a := renewal{ttl: time.Duration(resp.TTL) * time.Second, at: time.Now()}
		if resp.Header != nil {
			a.rev = resp.Header.Revision
		}
		id := clientv3.LeaseID(resp.ID)
		asks.mu.Lock()
		delete(asks.at, id)
		asks.any = true
		asks.mu.Unlock()
		r.mu.Lock()
		ch := r.subs[id]
		r.mu.Unlock()
		if ch == nil {
			continue
		}
		select { // the latest answer replaces one not yet read
		case <-ch:
		default:
		}
		select { // a stream that broke may still be handing its last one
		case ch <- a:
		default:
		}
	}
}

// ids returns the leases being renewed.
func (r *renewer) ids() []clientv3.LeaseID {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Collect(maps.Keys(r.subs))
}

// takeFresh returns the leases added since it was last called.
func (r *renewer) takeFresh() []clientv3.LeaseID {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := slices.Collect(maps.Keys(r.fresh))
	clear(r.fresh)
	return ids
}
