//go:build e2e

package e2e

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// TestS14Soak (BATON_SOAK=1 only): 64 clients on 8 sidecars for 10
// minutes while, every 5 s, one fault of S3/S4/S5/S6 strikes at random.
func TestS14Soak(t *testing.T) {
	if !soak {
		t.Skip("soak only: BATON_SOAK=1 (make soak)")
	}
	e := newEnv(t, envOptions{})
	apps := e.startClients(8, 8, 10*time.Millisecond)
	scs := e.sidecars
	stop := make(chan struct{})
	wg := runApps(apps, stop, "s14", 0, holdPlan{wait: 30 * time.Second, increments: 1, holdFor: 500 * time.Millisecond, pause: 50 * time.Millisecond})
	kinds := map[string]int{}
	var schedule []string
	for end := time.Now().Add(10 * time.Minute); time.Now().Before(end); {
		time.Sleep(5 * time.Second)
		x := e.holderOf("s14")
		from := e.h.now()
		var kind string
		switch rand.N(4) {
		case 0:
			kind = "SIGKILL"
			x.kill()
			x.start(t)
		case 1:
			kind = "SIGSTOP"
			x.pause()
			time.Sleep(leaseTTL + 500*time.Millisecond + rand.N(2*leaseTTL))
			x.resume()
		case 2:
			kind = "blackhole"
			x.proxy.BlackholeTx()
			x.proxy.BlackholeRx()
			time.Sleep(leaseTTL + 2*time.Second)
			x.proxy.UnblackholeTx()
			x.proxy.UnblackholeRx()
		default:
			kind = "delay"
			for _, s := range scs {
				s.proxy.DelayTx(75*time.Millisecond, 50*time.Millisecond)
				s.proxy.DelayRx(75*time.Millisecond, 50*time.Millisecond)
			}
			time.Sleep(3 * leaseTTL / 2)
			for _, s := range scs {
				s.proxy.UndelayTx()
				s.proxy.UndelayRx()
			}
		}
		kinds[kind]++
		schedule = append(schedule, fmt.Sprintf("%s %s %s–%s", kind, x.name, fmtDur(from), fmtDur(e.h.now())))
	}
	close(stop)
	wg.Wait()
	e.finish("S14 soak: random S3/S4/S5/S6 every 5 s", requirements{minOK: 100}, func(o *outcome) {
		o.note("faults %s; schedule: %v", counts(kinds), schedule)
	})
}
