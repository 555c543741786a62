//go:build e2e

package e2e

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// TestS5Blackhole: the holder's sidecar is cut off from etcd (its proxy
// drops everything both ways) for TTL + 2 s. Its app must hear `lost`
// before anyone else is granted the lock: a positive detection lead, no
// belief overlap.
func TestS5Blackhole(t *testing.T) {
	e := newEnv(t, envOptions{})
	apps := e.startClients(3, 1, 5*time.Millisecond)
	stop := make(chan struct{})
	wg := runApps(apps, stop, "s5", 0, holdPlan{wait: 30 * time.Second, increments: 1, holdFor: 8 * time.Second, pause: 50 * time.Millisecond})
	var faults []time.Duration
	for range scale(3, 10) {
		x := e.holderOf("s5")
		time.Sleep(rand.N(100 * time.Millisecond))
		faults = append(faults, e.h.now())
		x.proxy.BlackholeTx()
		x.proxy.BlackholeRx()
		time.Sleep(leaseTTL + 2*time.Second)
		x.proxy.UnblackholeTx()
		x.proxy.UnblackholeRx()
		time.Sleep(1500 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	e.finish("S5 sidecar↔etcd blackhole", requirements{noOverlap: true, minOK: len(faults)}, func(o *outcome) {
		ops := e.h.snapshot()
		o.gaps = reacquireGaps(ops, "s5", faults)
		o.leads = detectionLeads(ops)
		if len(o.leads) == 0 {
			t.Error("no detection lead measured: no holder was told lost before the next grant")
		}
		for _, l := range o.leads {
			if l <= 0 {
				t.Errorf("detection lead %v: the old holder heard lost only after the new grant", l)
			}
		}
		o.note("%d blackholes of the holder's etcd connection for TTL + 2 s", len(faults))
	})
}

// TestS6DelayDrop: every sidecar's etcd traffic is delayed 75±50 ms, then
// loses half its chunks, each for 1.5 × TTL (etcd robustness parameters).
// Locks may be lost and requests fail; no two holders may act.
func TestS6DelayDrop(t *testing.T) {
	e := newEnv(t, envOptions{})
	apps := e.startClients(3, 2, 5*time.Millisecond)
	scs := e.sidecars
	stop := make(chan struct{})
	wg := runApps(apps, stop, "s6", 0, holdPlan{wait: 10 * time.Second, increments: 1, holdFor: 200 * time.Millisecond, pause: 20 * time.Millisecond})
	phase := 3 * leaseTTL / 2
	var (
		mu      sync.Mutex
		windows [][2]time.Duration
	)
	window := func(f func()) {
		from := e.h.now()
		f()
		mu.Lock()
		windows = append(windows, [2]time.Duration{from, e.h.now()})
		mu.Unlock()
	}
	for range scale(1, 5) {
		time.Sleep(time.Second)
		window(func() {
			for _, s := range scs {
				s.proxy.DelayTx(75*time.Millisecond, 50*time.Millisecond)
				s.proxy.DelayRx(75*time.Millisecond, 50*time.Millisecond)
			}
			time.Sleep(phase)
			for _, s := range scs {
				s.proxy.UndelayTx()
				s.proxy.UndelayRx()
			}
		})
		time.Sleep(time.Second)
		window(func() {
			drop := func(b []byte) []byte {
				if rand.N(2) == 0 {
					return nil
				}
				return b
			}
			for _, s := range scs {
				s.proxy.ModifyTx(drop)
				s.proxy.ModifyRx(drop)
			}
			time.Sleep(phase)
			for _, s := range scs {
				s.proxy.UnmodifyTx()
				s.proxy.UnmodifyRx()
			}
		})
	}
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()
	e.finish("S6 delay 75±50 ms, drop 50 %", requirements{minOK: 10}, func(o *outcome) {
		ops := e.h.snapshot()
		losses, granted := 0, 0
		var under []time.Duration
		for _, op := range ops {
			if op.Kind == opLoss && op.Return != never {
				losses++
			}
			if op.Kind == opAcquire && op.Result == resOK {
				for _, w := range windows {
					if op.Call >= w[0] && op.Call <= w[1] {
						under = append(under, op.Return-op.Call)
						granted++
					}
				}
			}
		}
		o.note("%d locks lost (%.1f per minute), %d grants asked for under fault with latency p50/p99 %s",
			losses, float64(losses)/o.took.Minutes(), granted, quantiles(under, 0.5, 0.99))
	})
}
