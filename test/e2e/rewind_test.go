//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/baton-dev/baton/clients/go/lockapi"
)

// held is a hold stream of the scenario, with how it ended.
type held struct {
	fence int64
	ended chan lockapi.Event // the lost or released line, or a zero event when the stream broke
}

// holdOn opens a hold of lock on s and waits for its grant.
func holdOn(t *testing.T, s *sidecar, lock, owner string) *held {
	t.Helper()
	st, err := s.client.Hold(context.Background(), lock, lockapi.Request{Owner: owner})
	must(t, err)
	t.Cleanup(func() { st.Close() })
	ev, err := st.Next()
	if err != nil || ev.Event != lockapi.EventGranted {
		t.Fatalf("hold %s: %+v %v", lock, ev, err)
	}
	h := &held{fence: ev.Fence, ended: make(chan lockapi.Event, 1)}
	go func() {
		for {
			ev, err := st.Next()
			if err != nil {
				h.ended <- lockapi.Event{}
				return
			}
			if ev.Event == lockapi.EventLost || ev.Event == lockapi.EventReleased {
				h.ended <- ev
				return
			}
		}
	}()
	return h
}

// acquireFence takes lock on s as owner and releases it, returning its
// fence; code is the answer's status when not 200.
func acquireFence(t *testing.T, s *sidecar, lock, owner string) (fence int64, code int, body map[string]any) {
	t.Helper()
	c := httpClient(s)
	code, body, err := call(t.Context(), c, http.MethodPost, "/v1/locks/"+lock, `{"owner":"`+owner+`"}`)
	must(t, err)
	if code != http.StatusOK {
		return 0, code, body
	}
	fence = int64(body["fence"].(float64))
	if code, _, err := call(t.Context(), c, http.MethodDelete, "/v1/locks/"+lock+"?owner="+owner, ""); err != nil || code != 200 {
		t.Fatalf("release %s: %d %v", lock, code, err)
	}
	return fence, http.StatusOK, nil
}

// grantOn is acquireFence, retried while etcd is coming back (503
// unavailable).
func grantOn(t *testing.T, s *sidecar, lock, owner string) int64 {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		f, code, body := acquireFence(t, s, lock, owner)
		switch {
		case code == http.StatusOK:
			return f
		case code != http.StatusServiceUnavailable || body["code"] != lockapi.CodeUnavailable || time.Now().After(deadline):
			t.Fatalf("acquire %s on %s: %d %v", lock, s.name, code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// grantPast waits until lock is granted on s again after a revision bump,
// and checks its fence is past high.
func grantPast(t *testing.T, s *sidecar, lock, owner string, high int64) int64 {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		f, code, body := acquireFence(t, s, lock, owner)
		switch {
		case code == http.StatusOK && f <= high:
			t.Fatalf("%s granted %s with fence %d, not past %d", s.name, lock, f, high)
		case code == http.StatusOK:
			return f
		case time.Now().After(deadline):
			t.Fatalf("%s not granted %s after the revision bump: %d %v", s.name, lock, code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// revision reads etcd's revision.
func (e *env) revision(t *testing.T) int64 {
	t.Helper()
	r, err := e.cli.Get(t.Context(), "/e2e/revision")
	must(t, err)
	return r.Header.Revision
}

// bumpPast writes until etcd's revision is past rev: what an operator's
// restore with --bump-revision does at once.
func (e *env) bumpPast(t *testing.T, rev int64) {
	t.Helper()
	for e.revision(t) <= rev {
		_, err := e.cli.Put(t.Context(), "/e2e/bump", "x")
		must(t, err)
	}
}

// etcdBack stops etcd, lets change alter its data directory, and starts it
// again on it.
func (e *env) etcdBack(t *testing.T, change func(dir string)) {
	t.Helper()
	e.etcd.term()
	change(e.etcd.spec.Dir)
	e.etcd = e.etcd.restart(t)
}

// waitRefused waits until a try of lock on s is refused 503 etcd_rewound.
func waitRefused(t *testing.T, s *sidecar, lock string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		fence, code, body := acquireFence(t, s, lock, "try-"+s.name)
		if code == http.StatusServiceUnavailable && body["code"] == lockapi.CodeEtcdRewound {
			return body
		}
		if code == http.StatusOK {
			t.Fatalf("%s granted %s with fence %d while etcd is below the fences granted", s.name, lock, fence)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s on %s: %d %v; want 503 etcd_rewound", lock, s.name, code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestS22EtcdGoesBack: fences never go back, whatever happens to etcd.
// etcd is restored from a copy of its data directory taken earlier (a
// volume snapshot, a backup) while locks are held, then loses its data
// directory altogether. Each time, the holders whose keys went with it hear
// lost (etcd_rewound) before anything is granted; every sidecar, one that
// restarts and one that starts afresh included, refuses to grant (503
// etcd_rewound) while etcd's revision is at or below the highest fence
// granted; once an operator bumps the revision past it, grants resume with
// higher fences.
func TestS22EtcdGoesBack(t *testing.T) {
	e := newEnv(t, envOptions{})
	scs := e.addSidecars(2, sidecarOptions{})
	s0, s1 := scs[0], scs[1]
	old := holdOn(t, s0, "s22-old", "holder-old") // lost too: etcd is down longer than the lease TTL here

	// The backup: a copy of the data directory, taken with etcd stopped.
	backup := e.dir + "/etcd-backup"
	e.etcdBack(t, func(dir string) {
		if out, err := exec.Command("cp", "-a", dir, backup).CombinedOutput(); err != nil {
			t.Fatalf("cp: %v %s", err, out)
		}
	})
	var high int64
	for i := range 20 {
		high = max(high, grantOn(t, s1, "s22-churn", fmt.Sprint("c", i)))
	}
	young := holdOn(t, s1, "s22-young", "holder-young")
	high = max(high, young.fence)
	// Every sidecar hears how far etcd went at its next lease renewal (a
	// third of the TTL): one that made no call since knows it too.
	time.Sleep(leaseTTL)

	// Restored from the backup: the young lock's key, and twenty grants,
	// are gone from etcd.
	e.etcdBack(t, func(dir string) {
		must(t, os.RemoveAll(dir))
		if out, err := exec.Command("cp", "-a", backup, dir).CombinedOutput(); err != nil {
			t.Fatalf("cp: %v %s", err, out)
		}
	})
	if rev := e.revision(t); rev >= high {
		t.Fatalf("etcd's revision %d after the restore; the scenario needs it below the fences granted (%d)", rev, high)
	}
	var notes []string
	select {
	case ev := <-young.ended:
		// etcd_rewound, or lease_lost when the sidecar gave its session up
		// first while etcd was down (longer than the lease TTL here).
		if ev.Event != lockapi.EventLost || (ev.Reason != "etcd_rewound" && ev.Reason != "lease_lost") {
			t.Errorf("the holder whose key went back in time heard %+v; want lost", ev)
		}
		notes = append(notes, "restored: the young holder heard lost ("+ev.Reason+")")
	case <-time.After(20 * time.Second):
		t.Fatal("the holder whose key went back in time heard nothing")
	}
	for _, s := range scs {
		body := waitRefused(t, s, "s22-young")
		if s == s1 {
			notes = append(notes, fmt.Sprintf("every sidecar refused grants: %.120s…", body["message"]))
		}
	}
	// A sidecar restarted meanwhile, and one started afresh, refuse too:
	// the first from its state file, the second from the scope's floor.
	s1.stop(t)
	s1.startUnready(t)
	waitRefused(t, s1, "s22-young")
	fresh := e.addSidecars(1, sidecarOptions{unready: true})[0]
	waitRefused(t, fresh, "s22-young")

	e.bumpPast(t, high)
	f := grantPast(t, fresh, "s22-young", "after-bump", high)
	high = f
	notes = append(notes, fmt.Sprintf("after the bump, granted with fence %d", f))

	// The data directory lost: etcd starts empty, at revision 1.
	younger := holdOn(t, s1, "s22-younger", "holder-younger")
	high = max(high, younger.fence)
	time.Sleep(leaseTTL)
	e.etcdBack(t, func(dir string) { must(t, os.RemoveAll(dir)) })
	select {
	case ev := <-younger.ended:
		if ev.Event != lockapi.EventLost {
			t.Errorf("a holder when the data was lost heard %+v; want lost", ev)
		}
		notes = append(notes, "data lost: the holder heard lost ("+ev.Reason+")")
	case <-time.After(20 * time.Second):
		t.Fatal("a holder when the data was lost heard nothing")
	}
	for _, s := range e.sidecars {
		waitRefused(t, s, "s22-younger")
	}
	e.bumpPast(t, high)
	for _, s := range e.sidecars {
		grantPast(t, s, "s22-younger", "after-loss-"+s.name, high)
	}
	<-old.ended
	_, _ = e.cli.Delete(t.Context(), "/baton/v1/e2e/floor")
	e.finish("S22 etcd restored from an older copy, then its data lost", requirements{}, func(o *outcome) {
		o.note("%s", strings.Join(notes, "; "))
	})
}
