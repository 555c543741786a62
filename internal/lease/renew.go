package lease

import (
	"context"
	"sync"
	"time"

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
// per lease each time.
type renewer struct {
	lc    pb.LeaseClient
	every time.Duration // between two asks
	retry time.Duration // before a stream that broke is opened again

	mu    sync.Mutex
	subs  map[clientv3.LeaseID]chan renewal
	added chan clientv3.LeaseID // asked for at once, ahead of the pace
}

// newRenewer returns a renewer asking every `every`; run starts it.
func newRenewer(cli *clientv3.Client, every, retry time.Duration) *renewer {
	return &renewer{lc: clientv3.RetryLeaseClient(cli), every: every, retry: retry,
		subs: map[clientv3.LeaseID]chan renewal{}, added: make(chan clientv3.LeaseID, 1)}
}

// add starts renewing id, at once, and returns the channel its answers
// arrive on. The channel keeps the latest answer only.
func (r *renewer) add(id clientv3.LeaseID) <-chan renewal {
	ch := make(chan renewal, 1)
	r.mu.Lock()
	r.subs[id] = ch
	r.mu.Unlock()
	select {
	case r.added <- id:
	default: // the pace asks for it soon enough
	}
	return ch
}

// remove stops renewing id.
func (r *renewer) remove(id clientv3.LeaseID) {
	r.mu.Lock()
	delete(r.subs, id)
	r.mu.Unlock()
}

// run keeps a keep-alive stream open until ctx ends, opening another one
// when it breaks (a member restarted, the proxy went): the sessions' own
// deadlines bound how long that may take.
func (r *renewer) run(ctx context.Context) {
	for ctx.Err() == nil {
		_ = r.stream(ctx)
		select {
		case <-ctx.Done():
		case <-time.After(r.retry):
		}
	}
}

// stream opens one keep-alive stream and asks on it until it breaks or ctx
// ends.
func (r *renewer) stream(ctx context.Context) error {
	// Required to have a leader: a member cut off from the others ends the
	// stream, and the next one may go to another member.
	sctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	st, err := r.lc.LeaseKeepAlive(sctx, grpc.WaitForReady(true))
	if err != nil {
		return err
	}
	recvd := make(chan error, 1)
	go func() { recvd <- r.receive(st) }()
	tick := time.NewTicker(r.every)
	defer tick.Stop()
	for err = r.ask(st, r.ids()...); err == nil; {
		select {
		case <-tick.C:
			err = r.ask(st, r.ids()...)
		case id := <-r.added:
			err = r.ask(st, id)
		case err = <-recvd:
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	return err
}

// ask sends a renewal of each of ids.
func (r *renewer) ask(st pb.Lease_LeaseKeepAliveClient, ids ...clientv3.LeaseID) error {
	for _, id := range ids {
		if err := st.Send(&pb.LeaseKeepAliveRequest{ID: int64(id)}); err != nil {
			return err
		}
	}
	return nil
}

// receive hands each answer on the stream to its lease's channel until the
// stream breaks.
func (r *renewer) receive(st pb.Lease_LeaseKeepAliveClient) error {
	for {
		resp, err := st.Recv()
		if err != nil {
			return err
		}
		a := renewal{ttl: time.Duration(resp.TTL) * time.Second, at: time.Now()}
		if resp.Header != nil {
			a.rev = resp.Header.Revision
		}
		r.mu.Lock()
		ch := r.subs[clientv3.LeaseID(resp.ID)]
		r.mu.Unlock()
		if ch == nil {
			continue
		}
		select { // the latest answer replaces one not yet read
		case <-ch:
		default:
		}
		ch <- a
	}
}

// ids returns the leases being renewed.
func (r *renewer) ids() []clientv3.LeaseID {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := make([]clientv3.LeaseID, 0, len(r.subs))
	for id := range r.subs {
		ids = append(ids, id)
	}
	return ids
}
