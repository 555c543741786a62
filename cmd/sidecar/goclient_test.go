package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	baton "github.com/baton-dev/baton/clients/go"
	"github.com/baton-dev/baton/clients/go/lockapi"
	"github.com/baton-dev/baton/internal/keyspace"
)

// twoSidecars starts two sidecars (baton serve, with extra flags) in a
// scope of their own.
func twoSidecars(t *testing.T, scope string, extra ...string) (pa, pb *proc) {
	t.Helper()
	dir, err := os.MkdirTemp("", "baton-clients")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return startProc(t, filepath.Join(dir, "a.sock"), scope, extra...), startProc(t, filepath.Join(dir, "b.sock"), scope, extra...)
}

// goClientSidecars is twoSidecars with a Go client of each, and the
// first's process.
func goClientSidecars(t *testing.T, scope string, extra ...string) (a, b *baton.Client, pa *proc) {
	t.Helper()
	pa, pb := twoSidecars(t, scope, extra...)
	return baton.New(pa.socket), baton.New(pb.socket), pa
}

// TestGoClientLock: the Go client's Lock, as an app imports it: a fence,
// a try refused by name while held, a waiter granted once the lock is
// released with a higher fence, a waiter withdrawn when its context ends
// (no key left behind), and a lock released when its holder's context
// ends.
func TestGoClientLock(t *testing.T) {
	const scope = "goclient-lock"
	a, b, _ := goClientSidecars(t, scope)
	ctx := context.Background()

	l, err := a.Lock(ctx, "report", lockapi.Request{Owner: "exec-1"})
	if err != nil {
		t.Fatal(err)
	}
	if l.Fence() <= 0 || l.Owner() != "exec-1" || l.Key() != "report" || l.Err() != nil {
		t.Fatalf("granted %+v, err %v", l.Grant(), l.Err())
	}
	_, err = b.Lock(ctx, "report", lockapi.Request{Owner: "exec-2"})
	if e, ok := errors.AsType[*lockapi.Error](err); !ok || e.Code != lockapi.CodeAlreadyRunning || e.Holder == nil || e.Holder.Owner != "exec-1" || e.Fence != l.Fence() {
		t.Fatalf("a try of a held lock: %v, want already_running naming exec-1 and fence %d", err, l.Fence())
	}

	// A waiter whose context ends is withdrawn: it leaves no key.
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = b.Lock(wctx, "report", lockapi.Request{Owner: "exec-3", Wait: lockapi.WaitForever})
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a waiter whose context ended: %v, want its context's error", err)
	}
	cli, _ := testEtcd.Client(t)
	eventually(t, "the withdrawn waiter's key gone", func() bool { return lockKeys(t, cli, scope) == 1 })

	granted := make(chan *baton.Lock, 1)
	go func() {
		l2, err := b.Lock(ctx, "report", lockapi.Request{Owner: "exec-4", Wait: "30s"})
		if err != nil {
			t.Error(err)
		}
		granted <- l2
	}()
	eventually(t, "the waiter queued", func() bool { return lockKeys(t, cli, scope) == 2 })
	r, err := l.Release(ctx)
	if err != nil || !r.Released || r.Fence != l.Fence() {
		t.Fatalf("release: %+v, %v", r, err)
	}
	if again, err := l.Release(ctx); err != nil || again != r {
		t.Fatalf("a second Release: %+v, %v; want the first's answer, and no second DELETE", again, err)
	}
	if !errors.Is(l.Err(), baton.ErrReleased) || l.Context().Err() == nil {
		t.Fatalf("after Release: Err %v, context %v; want ErrReleased, done", l.Err(), l.Context().Err())
	}
	l2 := <-granted
	if l2 == nil {
		t.FailNow()
	}
	if l2.Fence() <= l.Fence() {
		t.Fatalf("the next holder's fence %d, not above %d", l2.Fence(), l.Fence())
	}

	// The holder's context ends: the lock is released, not lost.
	hctx, hcancel := context.WithCancel(ctx)
	_, _ = l2.Release(ctx)
	l3, err := a.Lock(hctx, "report", lockapi.Request{Owner: "exec-5"})
	if err != nil {
		t.Fatal(err)
	}
	hcancel()
	<-l3.Done()
	if !errors.Is(l3.Err(), baton.ErrReleased) {
		t.Fatalf("a lock whose context ended: %v, want ErrReleased", l3.Err())
	}
	// The work's context ends first; the lock goes with the DELETE after.
	eventually(t, "the lock free after its holder's context ended", func() bool {
		st, err := b.Status(ctx, "report")
		return err == nil && !st.Held
	})

	// WithLock whose caller's context ends mid-work: the work's context
	// ends first, the lock is released once, and WithLock returns what
	// the work returned.
	wctx2, wcancel := context.WithCancel(ctx)
	err = a.WithLock(wctx2, "report", lockapi.Request{Owner: "exec-6"}, func(ctx context.Context, l *baton.Lock) error {
		wcancel()
		<-ctx.Done()
		if !errors.Is(context.Cause(ctx), baton.ErrReleased) {
			t.Errorf("the work's context ended with %v, want ErrReleased", context.Cause(ctx))
		}
		return context.Cause(ctx)
	})
	if !errors.Is(err, baton.ErrReleased) || strings.Contains(err.Error(), "release lock") {
		t.Fatalf("WithLock whose context ended: %v; want the work's ErrReleased alone", err)
	}
	eventually(t, "the lock free after WithLock's context ended", func() bool {
		st, err := b.Status(ctx, "report")
		return err == nil && !st.Held
	})
}

// TestGoClientLoss: a lock lost mid-hold (its sidecar's etcd lease
// revoked) ends the context the work runs under, with the reason, and
// WithLock returns the loss even though the work returned nil; a holder
// whose sidecar freezes (SIGSTOP) stops its work before the other
// sidecar's waiter is granted the lock.
func TestGoClientLoss(t *testing.T) {
	const scope = "goclient-loss"
	a, _, _ := goClientSidecars(t, scope)
	ctx := context.Background()
	cli, _ := testEtcd.Client(t)

	stopped := make(chan error, 1)
	err := a.WithLock(ctx, "nightly", lockapi.Request{Owner: "exec-1"}, func(ctx context.Context, l *baton.Lock) error {
		revokeHolderLease(t, cli, scope, "nightly")
		select { // the work: until its context ends
		case <-ctx.Done():
			stopped <- context.Cause(ctx)
		case <-time.After(30 * time.Second):
			stopped <- errors.New("the work ran on 30s after its lock's lease was revoked")
		}
		return nil
	})
	lost, ok := errors.AsType[*baton.LostError](err)
	if !ok || lost.Reason != "lease_lost" || lost.Key != "nightly" {
		t.Fatalf("WithLock after its lease was revoked: %v, want a LostError with reason lease_lost", err)
	}
	if cause, ok := errors.AsType[*baton.LostError](<-stopped); !ok || cause.Reason != "lease_lost" {
		t.Fatalf("the work's context ended with %v, want the loss (lease_lost)", cause)
	}
	// The sidecar's next session is there for the next caller at once:
	// a write refused for the revoked lease ends the session and is made
	// again on the next, rather than answered 503.
	next, err := a.Lock(ctx, "after-the-loss", lockapi.Request{Owner: "exec-9"})
	if err != nil {
		t.Fatalf("a lock taken right after the sidecar's lease was revoked: %v", err)
	}
	if _, err := next.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// A frozen sidecar says nothing more: its holder's lock ends by
	// silence, before anyone else is granted it. With a 6s lease, the
	// holder stops a quarter of it (1.5s) before etcd can let the lock go.
	a, b, pa := goClientSidecars(t, scope+"-frozen", "--lease-ttl", "6s")
	l, err := a.Lock(ctx, "frozen", lockapi.Request{Owner: "exec-2", Wait: "30s"})
	if err != nil {
		t.Fatal(err)
	}
	if err := pa.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer pa.cmd.Process.Signal(syscall.SIGCONT)
	l2, err := b.Lock(ctx, "frozen", lockapi.Request{Owner: "exec-3", Wait: "30s"})
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Release(ctx)
	holderErr := l.Err()
	if silent, ok := errors.AsType[*baton.LostError](holderErr); !ok || silent.Reason != baton.ReasonSilent {
		t.Fatalf("when the next holder (fence %d) was granted, the frozen sidecar's holder's lock: %v; want lost by silence before", l2.Fence(), holderErr)
	}
	t.Logf("the frozen sidecar's holder stopped at %v; the next holder was granted after it", l.ValidUntil().Format(time.RFC3339Nano))
}

// revokeHolderLease revokes the etcd lease of key's holder in scope: its
// sidecar's session, as when etcd expires it. It may run on a goroutine
// of its own (it does not stop the test).
func revokeHolderLease(t *testing.T, cli *clientv3.Client, scope, key string) {
	t.Helper()
	layout, err := keyspace.NewLayout(scope)
	k, kerr := keyspace.ParseKey(key)
	if err != nil || kerr != nil {
		t.Error(err, kerr)
		return
	}
	r, err := cli.Get(context.Background(), layout.LockPrefix(k), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil || len(r.Kvs) == 0 {
		t.Errorf("no holder key of %s: %v", key, err)
		return
	}
	if _, err := cli.Revoke(context.Background(), clientv3.LeaseID(r.Kvs[0].Lease)); err != nil {
		t.Error(err)
	}
}

// TestGoClientElection: the Go client's elections, as an app uses them:
// Lead elects the first candidate with its value, a second waits as
// long as it takes; Leader and Observe tell the leader from either
// sidecar; Proclaim changes its value; releasing the leadership resigns,
// and the second leads with a larger fence, its context live.
func TestGoClientElection(t *testing.T) {
	a, b, _ := goClientSidecars(t, "goclient-election")
	ctx := context.Background()
	one, err := a.Lead(ctx, "scheduler", lockapi.Request{Owner: "replica-1", Value: "10.0.0.1:8080"})
	if err != nil {
		t.Fatal(err)
	}
	if one.Grant().Value != "10.0.0.1:8080" || one.Err() != nil {
		t.Fatalf("elected %+v, err %v", one.Grant(), one.Err())
	}
	w, err := b.Observe(ctx, "scheduler", "")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	next := func(want string) lockapi.WatchEvent {
		t.Helper()
		for {
			ev, err := w.Next()
			if err != nil {
				t.Fatalf("observing: %v", err)
			}
			if ev.Event == want {
				return ev
			}
		}
	}
	if ev := next(lockapi.WatchState); ev.Lock.Holder == nil || ev.Lock.Holder.Value != "10.0.0.1:8080" {
		t.Fatalf("the observer's first line %+v", ev)
	}
	type led struct {
		l   *baton.Lock
		err error
	}
	second := make(chan led, 1)
	go func() {
		l, err := b.Lead(ctx, "scheduler", lockapi.Request{Owner: "replica-2", Value: "10.0.0.2:8080"})
		second <- led{l, err}
	}()
	waitUntil(t, 10*time.Second, "the second candidate waiting", func() bool {
		st, err := a.Leader(ctx, "scheduler")
		return err == nil && st.Waiters == 1
	})
	if g, err := a.Proclaim(ctx, "scheduler", "replica-1", "10.0.0.1:9090"); err != nil || g.Value != "10.0.0.1:9090" || g.Fence != one.Fence() {
		t.Fatalf("proclaim: %+v %v", g, err)
	}
	if ev := next(lockapi.WatchProclaimed); ev.Holder.Value != "10.0.0.1:9090" {
		t.Fatalf("the observer heard %+v", ev)
	}
	if _, err := b.Proclaim(ctx, "scheduler", "replica-2", "me"); err == nil {
		t.Fatal("a candidate that does not lead proclaimed")
	}
	if g, err := a.Proclaim(ctx, "scheduler", "replica-1", ""); err != nil || g.Value != "" {
		t.Fatalf("proclaim nothing: %+v %v", g, err)
	}
	if ev := next(lockapi.WatchProclaimed); ev.Holder.Value != "" {
		t.Fatalf("the observer heard %+v; want no value", ev)
	}
	if _, err := one.Release(ctx); err != nil {
		t.Fatal(err)
	}
	s := <-second
	if s.err != nil || s.l.Fence() <= one.Fence() || s.l.Err() != nil {
		t.Fatalf("the second candidate: %v, fence %d after %d", s.err, s.l.Fence(), one.Fence())
	}
	if st, err := b.Leader(ctx, "scheduler"); err != nil || st.Holder == nil || st.Holder.Owner != "replica-2" {
		t.Fatalf("the leader after the hand-over: %+v %v", st, err)
	}
	if _, err := b.Resign(ctx, "scheduler", "replica-2"); err != nil {
		t.Fatal(err)
	}
	<-s.l.Done()
	if !errors.Is(s.l.Err(), baton.ErrReleased) {
		t.Errorf("after its resignation the leader's context says %v", s.l.Err())
	}
}

// TestGoClientReleaseAfterALoss: a Release called the moment a lock's
// context ends with its loss (before the client closed the stream) returns
// the loss and sends no DELETE, which could free a later lock of the same
// owner.
func TestGoClientReleaseAfterALoss(t *testing.T) {
	const scope = "goclient-release-lost"
	a, _, _ := goClientSidecars(t, scope)
	ctx := context.Background()
	for i := range 100 {
		l, err := a.Lock(ctx, "report", lockapi.Request{Owner: "exec-1"})
		if err != nil {
			t.Fatal(err)
		}
		deleteHolder(t, scope, keyspace.Locks, "report", l.Fence())
		<-l.Done()
		if _, err := l.Release(ctx); !isLost(err, "force_released") {
			t.Fatalf("round %d: Release after the loss: %v; want the loss, force_released, and no DELETE", i, err)
		}
	}
}

func isLost(err error, reason string) bool {
	lost, ok := errors.AsType[*baton.LostError](err)
	return ok && lost.Reason == reason
}
