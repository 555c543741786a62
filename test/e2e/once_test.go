//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-dev/baton/clients/go/lockapi"
)

// TestS16RunOnceKill: ten callers on three sidecars race to run one key
// once, each through a hold stream as `baton run --once` does; the first
// runner's sidecar is SIGKILLed mid-run. The work succeeds exactly once:
// the next caller runs it after the lease expires, and every caller whose
// sidecar lives on is either that runner or told it is done.
func TestS16RunOnceKill(t *testing.T) {
	e := newEnv(t, envOptions{})
	scs := e.addSidecars(3, sidecarOptions{})
	var runs, successes, done, cut atomic.Int32
	var victim atomic.Pointer[sidecar]
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Go(func() {
			s := scs[i%len(scs)]
			owner := fmt.Sprint("caller-", i)
			switch result := runOnce(s, owner, &victim); result {
			case "ran":
				runs.Add(1)
				successes.Add(1)
			case "killed":
				runs.Add(1)
			case "done":
				done.Add(1)
			case "cut":
				cut.Add(1) // its sidecar was the one killed
			default:
				t.Errorf("%s on %s: %s", owner, s.name, result)
			}
		})
	}
	wg.Wait()
	killed := victim.Load()
	onVictim := 0
	for i := range 10 {
		if killed != nil && scs[i%len(scs)] == killed {
			onVictim++
		}
	}
	if successes.Load() != 1 || runs.Load() != 2 || int(done.Load()+cut.Load()) != 8 || int(cut.Load()) > onVictim-1 {
		t.Errorf("%d runs, %d successes, %d told done, %d cut off with the killed sidecar (%d callers were on it); want 2 runs, 1 success, the rest done or cut off",
			runs.Load(), successes.Load(), done.Load(), cut.Load(), onVictim)
	}
	// The record is the scenario's to clean up: it lives for the retention.
	ctx := context.Background()
	r, err := e.cli.Get(ctx, "/baton/v1/e2e/once/s16")
	must(t, err)
	if len(r.Kvs) != 1 {
		t.Fatalf("run-once record: %v", r.Kvs)
	}
	_, err = e.cli.Revoke(ctx, clientv3.LeaseID(r.Kvs[0].Lease))
	must(t, err)
	e.finish("S16 run-once, first runner SIGKILLed", requirements{}, func(o *outcome) {
		o.note("10 callers on 3 sidecars race to run one key once; the first runner's sidecar SIGKILLed mid-run: %d runs, %d success, %d told done, %d cut off with it",
			runs.Load(), successes.Load(), done.Load(), cut.Load())
	})
}

// runOnce runs key s16 once as owner through s, the way baton run --once
// does; the first runner kills its own sidecar mid-run (victim). It says
// how it went: ran, killed, done, cut, or what went wrong.
func runOnce(s *sidecar, owner string, victim *atomic.Pointer[sidecar]) string {
	st, err := s.client.Hold(context.Background(), "s16", lockapi.Request{Owner: owner, Once: true, Wait: "60s", TTL: "30s"})
	var ae *lockapi.Error
	switch {
	case errors.As(err, &ae) && ae.Code == lockapi.CodeAlreadyDone:
		return "done"
	case err != nil && victim.Load() == s:
		return "cut"
	case err != nil:
		return err.Error()
	}
	defer st.Close()
	for {
		ev, err := st.Next()
		switch {
		case err != nil && victim.Load() == s:
			return "cut"
		case err != nil:
			return "stream: " + err.Error()
		case ev.Event == lockapi.EventRefused && ev.Code == lockapi.CodeAlreadyDone:
			return "done"
		case ev.Event != lockapi.EventGranted:
			continue
		}
		if victim.CompareAndSwap(nil, s) {
			s.kill() // mid-run: its stream and lease die with it
			return "killed"
		}
		time.Sleep(50 * time.Millisecond)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := s.client.Finish(ctx, "s16", lockapi.Done{Owner: owner, OK: true, Result: owner}); err != nil {
			return "finish: " + err.Error()
		}
		return "ran"
	}
}
