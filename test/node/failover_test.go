package node

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// frozenWrites is how long after its SIGCONT a whole pod, frozen past its
// lease, may still write under its old fence (the store refuses each): its
// baton elect, thawed with it, stops the command at once, its deadline
// long past.
const frozenWrites = 5 * time.Second

// force does f to the leader, waits for the next leader and for the Lease,
// the Lock, the label and etcd to agree with it, and returns how long after that
// leader's first tick they did (one for each change of a rollout).
func (e *electors) force(t *testing.T, f *fault) []time.Duration {
	t.Helper()
	pod := f.from.pod
	f.at = time.Now()
	var stopped []int
	switch f.kind {
	case "rollout":
		lags := e.rollout(t, f)
		f.done = time.Now()
		return lags
	case "delete":
		if err := node.Client.CoreV1().Pods(e.ns).Delete(context.Background(), pod, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	case "kill-sidecar", "stop-sidecar":
		sidecar := sidecarPID(t, pod)
		sig := syscall.SIGKILL
		if f.kind == "stop-sidecar" {
			sig, stopped = syscall.SIGSTOP, []int{sidecar}
		}
		if err := syscall.Kill(sidecar, sig); err != nil {
			t.Fatal(err)
		}
	case "kill-app":
		signalAll(t, pod, syscall.SIGKILL, false)
	case "stop-pod":
		stopped = signalAll(t, pod, syscall.SIGSTOP, true)
	}
	// A stopped leader stays stopped until another leads: past its lease.
	next, ok := e.store.after(f.from.fence, 2*time.Minute)
	f.resumed = time.Now()
	for _, pid := range stopped {
		_ = syscall.Kill(pid, syscall.SIGCONT)
	}
	if !ok {
		t.Fatalf("%s of the leader %s (fence %d): no other leader for 2 minutes", f.kind, pod, f.from.fence)
	}
	if next.pod == pod {
		t.Errorf("%s of the leader %s (fence %d): it led again next (fence %d), before the standbys queued ahead of it", f.kind, pod, f.from.fence, next.fence)
	}
	lag, _ := e.agree(t)
	f.done = time.Now()
	return []time.Duration{lag}
}

// rollout restarts every pod of the Deployment, one at a time, and
// follows each change of leader it brings.
func (e *electors) rollout(t *testing.T, f *fault) []time.Duration {
	t.Helper()
	kubectl(t, "-n", e.ns, "rollout", "restart", "deploy/"+electorName)
	done := make(chan string, 1)
	go func() { done <- kubectlOut("-n", e.ns, "rollout", "status", "deploy/"+electorName, "--timeout=5m") }()
	var lags []time.Duration
	last := f.from.fence
	for {
		if _, ok := e.store.after(last, time.Second); ok {
			lag, agreed := e.agree(t)
			lags, last = append(lags, lag), agreed.fence
			continue
		}
		select {
		case out := <-done:
			if !strings.Contains(out, "successfully rolled out") {
				t.Fatalf("kubectl rollout status: %s", out)
			}
			// The old pods may still be going, the old leader's among
			// them, and its key may outlive it: etcd, the Lease, the Lock
			// and the label agree only once a new pod leads.
			e.settled(t)
			lag, cur := e.agree(t)
			if cur.fence == f.from.fence {
				t.Fatalf("the rollout replaced every pod, but %s leads on with fence %d", f.from.pod, f.from.fence)
			}
			if cur.fence > last {
				lags = append(lags, lag)
			}
			return lags
		default:
		}
	}
}

// settled waits until the Deployment's old pods are gone.
func (e *electors) settled(t *testing.T) {
	t.Helper()
	eventually(t, 2*time.Minute, "the old pods gone", func() error {
		pods, err := node.Client.CoreV1().Pods(e.ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=" + electorName})
		if err != nil {
			return err
		}
		if len(pods.Items) != 3 {
			return fmt.Errorf("%d pods", len(pods.Items))
		}
		return nil
	})
}

// check reads the store's verdicts: no fence ticked by two pods; no tick
// under an older fence after a newer one was written, but a frozen pod's,
// refused, after its SIGCONT and within frozenWrites of it; and no change
// of leader but in a forced failover.
func (e *electors) check(t *testing.T, faults []fault) {
	t.Helper()
	for _, l := range e.store.badLines() {
		t.Errorf("the tick store: %s", l)
	}
	for _, l := range e.store.since(faults[0].from.fence)[1:] {
		if forcedBy(faults, l) == "none" {
			t.Errorf("%s led (fence %d) though no failover was forced then", l.pod, l.fence)
		}
	}
	frozen := map[int64]time.Time{}
	for _, f := range faults {
		if f.kind == "stop-pod" {
			frozen[f.from.fence] = f.resumed
		}
	}
	for _, st := range e.store.refused() {
		resumed, ok := frozen[st.fence]
		switch {
		case !ok:
			t.Errorf("%s wrote under fence %d after a newer leader wrote, though nothing froze it: two leaders", st.pod, st.fence)
		case st.at.Before(resumed):
			t.Errorf("%s wrote under fence %d after a newer leader wrote, while it was to be frozen: two leaders", st.pod, st.fence)
		case st.at.After(resumed.Add(frozenWrites)):
			t.Errorf("%s, frozen past its lease, still wrote under fence %d %v after its SIGCONT (the fence refused it)", st.pod, st.fence, st.at.Sub(resumed).Round(time.Millisecond))
		}
	}
}

// report logs the time without a leader by kind of failover, and how soon
// the Lease and the label agreed.
func (e *electors) report(t *testing.T, faults []fault, lags []time.Duration) {
	t.Helper()
	gaps := map[string][]time.Duration{}
	var all []time.Duration
	ls := e.store.since(faults[0].from.fence)
	for _, l := range ls[1:] {
		kind := forcedBy(faults, l)
		gaps[kind] = append(gaps[kind], l.gap)
		all = append(all, l.gap)
	}
	t.Logf("%d failovers forced %d times; time without a leader (the last write of one leader to the first of the next, ±20 ms): %s",
		len(ls)-1, len(faults), spread(all))
	for _, k := range append(slices.Clone(failoverKinds), "none") {
		if len(gaps[k]) > 0 {
			t.Logf("  %-12s %3d: %s", k, len(gaps[k]), spread(gaps[k]))
		}
	}
	late := 0
	for _, l := range lags {
		if l > time.Second {
			late++
		}
	}
	refused := len(e.store.refused())
	t.Logf("the Lease, the Lock, the leader label and etcd agreed with a new leader %s after its first write; %d of %d later than a second", spread(lags), late, len(lags))
	t.Logf("writes under an older fence, all by a pod frozen past its lease and refused by the fence: %d", refused)
}

// forcedBy is the kind of the failover that l began in, or "none".
func forcedBy(faults []fault, l leadership) string {
	for _, f := range faults {
		if !l.first.Before(f.at) && !l.first.After(f.done) {
			return f.kind
		}
	}
	return "none"
}

// spread is p50, p99 and the worst of ds.
func spread(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	at := func(p float64) time.Duration { return s[max(0, int(math.Ceil(p*float64(len(s))))-1)] }
	return fmt.Sprintf("p50 %s, p99 %s, worst %s", ms(at(0.5)), ms(at(0.99)), ms(s[len(s)-1]))
}
