//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// electionTimeout is etcd's default election timeout.
const electionTimeout = time.Second

// holdOnce runs one acquisition of a in the background.
func holdOnce(a *app, lock string, p holdPlan) chan bool {
	done := make(chan bool, 1)
	go func() { done <- a.once(context.Background(), lock, p) }()
	return done
}

// waitHolding waits until owner holds lock.
func (e *env) waitHolding(lock, owner string) {
	e.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for holding(e.h.snapshot(), lock) != owner {
		if time.Now().After(deadline) {
			e.t.Fatalf("%s does not hold %s after 15s", owner, lock)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitQueued waits until lock has n contender keys in etcd.
func (e *env) waitQueued(lock string, n int64) {
	e.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for e.contenders(lock) != n {
		if time.Now().After(deadline) {
			e.t.Fatalf("%s has %d contender keys, want %d", lock, e.contenders(lock), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// contenders counts lock's keys in etcd (holder and waiters, one per
// sidecar).
func (e *env) contenders(lock string) int64 {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := e.cli.Get(ctx, "/baton/v1/e2e/locks/"+lock+"/", withPrefixCount()...)
	if err != nil {
		return -1
	}
	return r.Count
}

// TestS7EtcdKillRestart: etcd is SIGKILLed while a live sidecar holds one
// lock and a crashed sidecar's lock has a waiter, stays down 1 s and
// restarts on its data directory. Fences keep increasing across the
// restart; the waiter gets the crashed holder's lock within TTL + election
// timeout + 0.5 s of etcd being back (plus room for a loaded machine).
func TestS7EtcdKillRestart(t *testing.T) {
	e := newEnv(t, envOptions{})
	// Dialling etcd directly: while etcd is down, the fault proxy accepts a
	// connection it cannot forward and leaves it open, which holds up the
	// client's reconnection by seconds once etcd is back.
	scs := e.addSidecars(3, sidecarOptions{direct: true})
	live, crashed, waiter := e.apps(scs[0], 1, 0)[0], e.apps(scs[1], 1, 0)[0], e.apps(scs[2], 1, 0)[0]
	var kept []string
	var afterReady []time.Duration
	for round := range scale(1, 3) {
		liveLock, crashLock := fmt.Sprintf("s7-live-%d", round), fmt.Sprintf("s7-crash-%d", round)
		liveDone := holdOnce(live, liveLock, holdPlan{increments: 1, holdFor: 6 * time.Second})
		holdOnce(crashed, crashLock, holdPlan{increments: 1, holdFor: time.Minute})
		e.waitHolding(liveLock, live.owner)
		e.waitHolding(crashLock, crashed.owner)
		waitDone := holdOnce(waiter, crashLock, holdPlan{wait: 30 * time.Second, increments: 1})
		e.waitQueued(crashLock, 2)

		scs[1].kill()
		e.etcd.kill()
		time.Sleep(time.Second)
		e.etcd = e.etcd.restart(t)
		ready := e.h.now()
		if !<-waitDone {
			t.Fatalf("round %d: the waiter was not granted the crashed holder's lock: %+v", round, e.h.snapshot())
		}
		g, _ := e.grantedAfter(crashLock, ready, time.Second)
		afterReady = append(afterReady, g-ready)
		<-liveDone
		if holding(e.h.snapshot(), liveLock) == "" && lostBy(e.h.snapshot(), live.owner, liveLock) {
			kept = append(kept, "no")
		} else {
			kept = append(kept, "yes")
		}
		scs[1].start(t)
	}
	e.finish("S7 etcd SIGKILL + restart", requirements{linearizable: false, minOK: 3}, func(o *outcome) {
		bound := leaseTTL + electionTimeout + 500*time.Millisecond + 2*time.Second
		for _, d := range afterReady {
			if d > bound {
				e.dump()
				t.Errorf("waiter granted %v after etcd was ready (bound %v)", d, bound)
			}
		}
		o.gaps = afterReady
		o.note("reacquire measured from etcd ready (bound TTL + election timeout + 0.5 s = %v); live holder kept its lock across the restart: %s",
			leaseTTL+electionTimeout+500*time.Millisecond, strings.Join(kept, ", "))
	})
}

// lostBy reports whether owner was told it lost lock.
func lostBy(ops []histOp, owner, lock string) bool {
	for _, op := range ops {
		if op.Kind == opLoss && op.Owner == owner && op.Lock == lock {
			return true
		}
	}
	return false
}

// TestS8EtcdPaused: etcd is SIGSTOPped (a stuck leader or disk) for 0.5,
// 1 and 2 lease TTLs while clients loop. Sessions may be lost; no two
// holders may act, and grants resume once etcd does.
func TestS8EtcdPaused(t *testing.T) {
	e := newEnv(t, envOptions{})
	apps := e.startClients(3, 2, 5*time.Millisecond)
	stop := make(chan struct{})
	wg := runApps(apps, stop, "s8", 0, holdPlan{wait: 10 * time.Second, increments: 1, holdFor: 300 * time.Millisecond, pause: 20 * time.Millisecond})
	var lines []string
	for _, f := range []float64{0.5, 1, 2} {
		time.Sleep(time.Second)
		d := time.Duration(f * float64(leaseTTL))
		from := e.h.now()
		e.etcd.pause()
		time.Sleep(d)
		e.etcd.resume()
		resumed := e.h.now()
		g, ok := e.grantedAfter("s8", resumed, 15*time.Second)
		if !ok {
			t.Fatalf("no grant within 15s of etcd resuming after a %v pause", d)
		}
		time.Sleep(time.Second)
		lost := 0
		for _, op := range e.h.snapshot() {
			if op.Kind == opLoss && op.Return != never && op.Told >= from && op.Told <= resumed+time.Second {
				lost++
			}
		}
		lines = append(lines, fmt.Sprintf("%.1f×TTL: %d holders lost, first grant %s after resume", f, lost, fmtDur(g-resumed)))
	}
	close(stop)
	wg.Wait()
	e.finish("S8 etcd SIGSTOP", requirements{minOK: 10}, func(o *outcome) {
		o.note("%s", strings.Join(lines, "; "))
	})
}
