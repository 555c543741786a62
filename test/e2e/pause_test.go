//go:build e2e

package e2e

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// pauseRun SIGSTOPs the holder's sidecar for longer than the lease TTL, then
// SIGCONTs it (Jepsen's pause). The app is not paused: it goes on writing
// with its old fence, as a holder cut off from its lock service would, so
// only the fence can keep its writes out.
func pauseRun(t *testing.T, name string, noFence bool, pauses int) *outcome {
	e := newEnv(t, envOptions{noFence: noFence})
	apps := e.startClients(3, 1, 20*time.Millisecond)
	stop := make(chan struct{})
	wg := runApps(apps, stop, "s4", 0, holdPlan{wait: 30 * time.Second, increments: 1, holdFor: 8 * time.Second, pause: 50 * time.Millisecond})
	type pauseAt struct {
		owners []string
		resume time.Duration
	}
	var ps []pauseAt
	var faults []time.Duration
	maxPause := scale(2*leaseTTL, 3*leaseTTL)
	for range pauses {
		x := e.holderOf("s4")
		time.Sleep(rand.N(200 * time.Millisecond))
		d := leaseTTL + 500*time.Millisecond + rand.N(maxPause-leaseTTL-500*time.Millisecond)
		faults = append(faults, e.h.now())
		x.pause()
		time.Sleep(d)
		x.resume()
		ps = append(ps, pauseAt{owners: e.ownersOf(x), resume: e.h.now()})
		time.Sleep(time.Second)
	}
	close(stop)
	wg.Wait()
	return e.finish(name, requirements{minOK: pauses}, func(o *outcome) {
		ops := e.h.snapshot()
		o.gaps = reacquireGaps(ops, "s4", faults)
		// Stale-belief window: from SIGCONT to the paused holder's sidecar
		// telling its app the lock was lost.
		var windows []time.Duration
		for _, p := range ps {
			for _, op := range ops {
				if op.Kind == opLoss && op.Return != never && op.Return >= p.resume && slices.Contains(p.owners, op.Owner) {
					windows = append(windows, op.Return-p.resume)
					break
				}
			}
		}
		o.note("%d pauses of TTL+0.5s…%v; stale-belief window after SIGCONT min/p50/max %s", pauses, maxPause, quantiles(windows, 0, 0.5, 1))
	})
}

// TestS4Pause: the fence must reject every write of the paused holder once
// the next holder has used its token; no update is lost.
func TestS4Pause(t *testing.T) {
	o := pauseRun(t, "S4 holder sidecar SIGSTOP", false, scale(4, 30))
	if o.store.staleRejected == 0 {
		t.Errorf("no stale write was rejected: the pauses never let two holders write, so the scenario proved nothing")
	}
}

// TestS4NegativeControl: the same pauses with a store that ignores tokens.
// The suite must see the damage (lost updates or stale writes accepted);
// a run that sees nothing means the checks are blind.
func TestS4NegativeControl(t *testing.T) {
	o := pauseRun(t, "S4-neg same, store without fence", true, scale(3, 10))
	if o.store.lostUpdates == 0 && o.store.staleAccepted == 0 {
		t.Errorf("negative control detected nothing: lost updates 0, stale writes accepted 0")
	}
	for _, e := range o.fenceErrors {
		t.Errorf("fence invariant: %s", e)
	}
	o.note("negative control: detected %d lost updates and %d stale writes accepted", o.store.lostUpdates, o.store.staleAccepted)
}
