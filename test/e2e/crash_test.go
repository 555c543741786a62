//go:build e2e

package e2e

import (
	"math/rand/v2"
	"testing"
	"time"
)

// crashBound is the liveness bound the tests enforce on a crashed holder's
// lock: the lease TTL plus etcd's 500 ms expiry sweep plus room for a
// loaded machine. The report shows the figures against TTL + 0.5 s.
const crashBound = leaseTTL + 2*time.Second

// TestS2HolderCrash: the holder's sidecar is SIGKILLed mid-hold; a waiter
// on another sidecar must get the lock once the lease expires, and the
// killed sidecar comes back after that.
func TestS2HolderCrash(t *testing.T) {
	e := newEnv(t, envOptions{})
	apps := e.startClients(3, 2, 5*time.Millisecond)
	stop := make(chan struct{})
	wg := runApps(apps, stop, "s2", 0, holdPlan{wait: 30 * time.Second, increments: 1, holdFor: 3 * time.Second, pause: 50 * time.Millisecond})
	var faults []time.Duration
	for range scale(10, 20) {
		x := e.holderOf("s2")
		time.Sleep(rand.N(300 * time.Millisecond))
		f := e.h.now()
		x.kill()
		faults = append(faults, f)
		if _, ok := e.grantedAfter("s2", f, crashBound+5*time.Second); !ok {
			t.Fatalf("no grant of s2 within %v of the holder's crash", crashBound+5*time.Second)
		}
		x.start(t)
	}
	close(stop)
	wg.Wait()
	e.finish("S2 holder crash", requirements{minOK: len(faults)}, func(o *outcome) {
		o.gaps = reacquireGaps(e.h.snapshot(), "s2", faults)
		o.note("%d SIGKILLs of the holder's sidecar, restarted after the next grant", len(faults))
		checkGaps(t, o)
	})
}

// TestS3KillChurn: app clients loop on one lock while the sidecar of a
// random holder is SIGKILLed at an interval and restarted at once (it then
// resumes its lease and frees its dead hold streams' locks).
func TestS3KillChurn(t *testing.T) {
	e := newEnv(t, envOptions{})
	var apps []*app
	for _, sc := range e.addSidecars(scale(4, 8), sidecarOptions{}) {
		apps = append(apps, e.apps(sc, scale(4, 8), 5*time.Millisecond)...)
	}
	stop := make(chan struct{})
	wg := runApps(apps, stop, "s3", 0, holdPlan{wait: 30 * time.Second, increments: 1, holdFor: 300 * time.Millisecond, pause: 50 * time.Millisecond})
	var faults []time.Duration
	end := time.Now().Add(scale(15*time.Second, 5*time.Minute))
	for time.Now().Before(end) {
		time.Sleep(scale(3*time.Second, 5*time.Second))
		x := e.holderOf("s3")
		f := e.h.now()
		x.kill()
		faults = append(faults, f)
		x.start(t)
	}
	close(stop)
	wg.Wait()
	e.finish("S3 SIGKILL churn", requirements{minOK: 10}, func(o *outcome) {
		o.gaps = reacquireGaps(e.h.snapshot(), "s3", faults)
		o.note("%d clients, a holder's sidecar SIGKILLed every %v and restarted at once (%d kills)",
			len(apps), scale(3*time.Second, 5*time.Second), len(faults))
		checkGaps(t, o)
	})
}

// TestS15SemaphoreKillChurn: app clients on several sidecars loop on units
// of one semaphore of 3, and others on a read/write lock, while the
// sidecar of a random holder is SIGKILLed at an interval and restarted:
// never more than 3 holders believe they hold the semaphore at once (and
// 3 do at times), never a writer with anyone (readers share), and the
// writers' fenced increments lose nothing.
func TestS15SemaphoreKillChurn(t *testing.T) {
	e := newEnv(t, envOptions{})
	var apps []*app
	for _, sc := range e.addSidecars(scale(4, 6), sidecarOptions{}) {
		apps = append(apps, e.apps(sc, scale(3, 6), 5*time.Millisecond)...)
	}
	stop := make(chan struct{})
	const limit = 3
	wg := runApps(apps, stop, "s15", 0, holdPlan{wait: 30 * time.Second, holdFor: 200 * time.Millisecond, pause: 50 * time.Millisecond, limit: limit})
	// Beside it, a read/write lock: a third of the clients write.
	var rw []*app
	for _, sc := range e.sidecars {
		rw = append(rw, e.apps(sc, 3, 5*time.Millisecond)...)
	}
	rwr := runApps(rw[:2*len(rw)/3], stop, "s15rw", 0, holdPlan{wait: 30 * time.Second, holdFor: 100 * time.Millisecond, pause: 50 * time.Millisecond, mode: "read"})
	rww := runApps(rw[2*len(rw)/3:], stop, "s15rw", 0, holdPlan{wait: 30 * time.Second, increments: 1, holdFor: 50 * time.Millisecond, pause: 100 * time.Millisecond})
	var faults []time.Duration
	end := time.Now().Add(scale(15*time.Second, 5*time.Minute))
	for i := 0; time.Now().Before(end); i++ {
		time.Sleep(scale(3*time.Second, 5*time.Second))
		x := e.holderOf([]string{"s15", "s15rw"}[i%2])
		faults = append(faults, e.h.now())
		x.kill()
		x.start(t)
	}
	close(stop)
	wg.Wait()
	rwr.Wait()
	rww.Wait()
	o := e.finish("S15 semaphore and read/write lock, SIGKILL churn", requirements{minOK: 20, noOverlap: true}, func(o *outcome) {
		o.note("%d clients on a semaphore of %d and %d on a read/write lock (a third writing), a holder's sidecar SIGKILLed every %v and restarted at once (%d kills); at most %d holders of the semaphore and %d readers at once",
			len(apps), limit, len(rw), scale(3*time.Second, 5*time.Second), len(faults), o.concurrency["s15"], o.concurrency["s15rw"])
	})
	if o.concurrency["s15"] != limit {
		t.Errorf("at most %d holders at once: the semaphore of %d was never full", o.concurrency["s15"], limit)
	}
	if o.concurrency["s15rw"] < 2 {
		t.Errorf("at most %d readers at once: they never shared the lock", o.concurrency["s15rw"])
	}
}

// checkGaps enforces the liveness bound on reacquire gaps.
func checkGaps(t *testing.T, o *outcome) {
	t.Helper()
	if len(o.gaps) == 0 {
		t.Error("no reacquire gap measured")
	}
	within := 0
	for _, g := range o.gaps {
		if g > crashBound {
			t.Errorf("a crashed holder's lock was granted again only after %v (bound %v)", g, crashBound)
		}
		if g <= leaseTTL+500*time.Millisecond+210*time.Millisecond {
			within++
		}
	}
	o.note("%d of %d reacquire gaps within TTL + 0.5 s + 0.21 s", within, len(o.gaps))
}
