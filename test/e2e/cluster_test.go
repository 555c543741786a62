//go:build e2e

package e2e

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// TestS9Cluster: a 3-member etcd cluster under a leader SIGKILL, a peer
// blackhole, peer delay and drop, and a member restart, while clients on
// three sidecars loop on one lock. Fences and the store must stay right
// across leader changes; grants must resume after each fault.
func TestS9Cluster(t *testing.T) {
	e := newEnv(t, envOptions{cluster: true})
	apps := e.startClients(3, 2, 5*time.Millisecond)
	stop := make(chan struct{})
	wg := runApps(apps, stop, "s9", 0, holdPlan{wait: 10 * time.Second, increments: 1, holdFor: 200 * time.Millisecond, pause: 20 * time.Millisecond})
	c := e.cluster
	var lines []string
	var faults []time.Duration
	fault := func(name string, inject func()) {
		time.Sleep(1500 * time.Millisecond)
		faults = append(faults, e.h.now())
		inject()
		ended := e.h.now()
		g, ok := e.grantedAfter("s9", ended, leaseTTL+electionTimeout+10*time.Second)
		if !ok {
			e.dump()
			t.Fatalf("%s: no grant within %v after the fault ended", name, leaseTTL+electionTimeout+10*time.Second)
		}
		lines = append(lines, fmt.Sprintf("%s: next grant %s after it ended", name, fmtDur(g-ended)))
	}
	for range scale(1, 3) {
		fault("leader SIGKILL, restarted after 3 s", func() {
			i := c.leader(t, e.cli)
			c.members[i].kill()
			time.Sleep(3 * time.Second)
			c.members[i] = c.members[i].restart(t)
		})
		// A partition as TCP sees it: nothing gets through, nothing is
		// lost. (The proxy's blackhole drops bytes mid-stream, which no
		// real network does to a TCP connection; raft's peer streams then
		// stay desynchronised for long after.)
		fault("leader's incoming peer traffic partitioned 1 s", func() {
			px := c.proxies[c.leader(t, e.cli)]
			px.PauseTx()
			px.PauseRx()
			time.Sleep(time.Second)
			px.UnpauseTx()
			px.UnpauseRx()
		})
		fault("all peer traffic delayed 75±50 ms for 1.5×TTL", func() {
			for _, px := range c.proxies {
				px.DelayTx(75*time.Millisecond, 50*time.Millisecond)
				px.DelayRx(75*time.Millisecond, 50*time.Millisecond)
			}
			time.Sleep(3 * leaseTTL / 2)
			for _, px := range c.proxies {
				px.UndelayTx()
				px.UndelayRx()
			}
		})
		// Heavy loss as TCP sees it: delivery stalls while retransmits
		// fail, in 100 ms slices, half of them. (Dropping bytes in the
		// proxy would corrupt the stream instead.)
		fault("leader's incoming peer traffic stalled half the time for 1.5×TTL", func() {
			px := c.proxies[c.leader(t, e.cli)]
			paused := false
			for end := time.Now().Add(3 * leaseTTL / 2); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
				if stall := rand.N(2) == 0; stall != paused {
					if stall {
						px.PauseTx()
						px.PauseRx()
					} else {
						px.UnpauseTx()
						px.UnpauseRx()
					}
					paused = stall
				}
			}
			if paused {
				px.UnpauseTx()
				px.UnpauseRx()
			}
		})
		fault("follower SIGTERM and restart", func() {
			i := (c.leader(t, e.cli) + 1) % len(c.members)
			c.members[i].term()
			c.members[i] = c.members[i].restart(t)
		})
	}
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	e.finish("S9 3-member cluster faults", requirements{minOK: 10}, func(o *outcome) {
		o.gaps = reacquireGaps(e.h.snapshot(), "s9", faults)
		o.note("gap column: fault start → next grant; %s", strings.Join(lines, "; "))
	})
}
