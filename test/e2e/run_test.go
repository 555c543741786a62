//go:build e2e

package e2e

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-dev/baton/clients/go/lockapi"
)

// writerEnv names the store socket a writer child of the test binary
// writes to: `baton run` runs the test binary itself as the work.
const (
	writerEnv    = "BATON_E2E_WRITER"
	writerForEnv = "BATON_E2E_WRITER_FOR" // how long it writes; forever when unset
	writerPIDs   = "BATON_E2E_WRITER_PIDS"
	// writerStubborn, when set, makes the writer ignore SIGTERM, as work
	// that takes its time to stop does: only the SIGKILL after the kill
	// grace stops it.
	writerStubborn = "BATON_E2E_WRITER_STUBBORN"
)

// runWriter is the work of a `baton run` in S17: it appends its pid to
// the file $BATON_E2E_WRITER_PIDS, then increments the store's counter of
// $BATON_KEY under $BATON_FENCE every 20ms, for $BATON_E2E_WRITER_FOR or
// until it is killed (SIGTERM ignored with $BATON_E2E_WRITER_STUBBORN). It never checks anything itself: the store (without
// fences) records every write, so a write after the next holder's shows.
func runWriter(sock string) int {
	if os.Getenv(writerStubborn) != "" {
		signal.Ignore(syscall.SIGTERM)
	}
	if f, err := os.OpenFile(os.Getenv(writerPIDs), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600); err == nil {
		fmt.Fprintln(f, os.Getpid())
		f.Close()
	}
	c := newStoreClient(&store{socket: sock}, 0)
	token, _ := strconv.ParseInt(os.Getenv("BATON_FENCE"), 10, 64)
	lock, holder := os.Getenv("BATON_KEY"), os.Getenv("BATON_OWNER")
	end := time.Now().Add(24 * time.Hour)
	if d, err := time.ParseDuration(os.Getenv(writerForEnv)); err == nil {
		end = time.Now().Add(d)
	}
	for time.Now().Before(end) {
		_ = c.increment(lock, token, holder)
		time.Sleep(20 * time.Millisecond)
	}
	return 0
}

// batonRun is a `baton run` child process of the test.
type batonRun struct {
	cmd    *exec.Cmd
	stderr *lockedBuffer
	exited chan struct{}
}

// startRun starts `baton run` through s with args, its work the writer
// (the command runs the test binary as one, see runWriter).
func (e *env) startRun(t *testing.T, s *sidecar, args ...string) *batonRun {
	t.Helper()
	self, err := os.Executable()
	must(t, err)
	cmd := exec.Command(batonBin, append([]string{"run", "--socket", s.socket}, append(args, self)...)...)
	cmd.Env = append(os.Environ(), writerEnv+"="+e.store.socket, writerPIDs+"="+filepath.Join(e.dir, "writers"), "GORACE=halt_on_error=1")
	r := &batonRun{cmd: cmd, stderr: &lockedBuffer{}, exited: make(chan struct{})}
	cmd.Stderr = r.stderr
	must(t, cmd.Start())
	go func() {
		_ = cmd.Wait()
		close(r.exited)
	}()
	return r
}

// wait waits for the run to end and returns its exit code.
func (r *batonRun) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-r.exited:
		return r.cmd.ProcessState.ExitCode()
	case <-time.After(d):
		t.Fatalf("baton run not done after %v; stderr: %s", d, r.stderr.String())
		return -1
	}
}

// firstWrite waits for the first write to lock by a token other than not,
// and returns that token.
func (e *env) firstWrite(t *testing.T, lock string, not int64) int64 {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		for _, op := range e.store.snapshot() {
			if op.Lock == lock && op.Op == "write" && op.Token != not {
				return op.Token
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no write to %s", lock)
	return 0
}

// handOver is, for lock, the time from the last write of the holder of
// fence old to the first write of the next holder, negative when they
// overlapped.
func (e *env) handOver(lock string, old int64) time.Duration {
	var last, first time.Duration = -1, -1
	for _, op := range e.store.snapshot() {
		if op.Lock != lock {
			continue
		}
		switch {
		case op.Token == old:
			last = op.At
		case op.Token > old && first < 0:
			first = op.At
		}
	}
	return first - last
}

// writersGone checks that every writer started so far has exited.
func (e *env) writersGone(t *testing.T, phase string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(e.dir, "writers"))
	must(t, err)
	for _, f := range strings.Fields(string(b)) {
		pid, _ := strconv.Atoi(f)
		if pid > 0 && syscall.Kill(pid, 0) == nil {
			// A zombie is gone for good; anything else runs.
			if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil && !strings.Contains(string(st), ") Z ") {
				t.Errorf("%s: writer %d still runs", phase, pid)
			}
		}
	}
}

// TestS17RunTree: `baton run`'s work never outlives its lock. Its command
// starts the work as a grandchild in a session of its own (a daemon, out of
// reach of a signal to the command alone, ignoring SIGTERM: only the
// SIGKILL after the kill grace stops it), which writes to the store with
// the fence it was given, without fencing: every write is accepted, and an
// old holder's write after the next holder's first shows as a stale write.
// The lock ends five ways (--max-hold, a force release, the holder's
// sidecar SIGTERMed (a lock, and a semaphore's units, which have no lock
// delay), `baton run` SIGKILLed, the holder's sidecar SIGSTOPped past its
// lease), each time with another `baton run` waiting
// on another sidecar. None may write after the next holder started, and
// no writer may be left.
func TestS17RunTree(t *testing.T) {
	e := newEnv(t, envOptions{noFence: true})
	scs := e.addSidecars(2, sidecarOptions{})
	s0, s1 := scs[0], scs[1]
	daemon := []string{"--", "sh", "-c", writerStubborn + `=1 setsid "$0" & exec sleep 600`}
	type phase struct {
		name  string
		lock  string
		args  []string // of the holder's run
		both  []string // of both runs
		fault func(t *testing.T, w *batonRun)
		after func(t *testing.T)
		code  int
	}
	phases := []phase{
		{name: "max-hold", lock: "s17-max-hold", args: []string{"--max-hold", "1500ms"}, code: 70},
		{name: "force release", lock: "s17-force", code: 70, fault: func(t *testing.T, _ *batonRun) {
			// The holder's key deleted in etcd, as an operator would.
			r, err := e.cli.Get(t.Context(), "/baton/v1/e2e/locks/s17-force/", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
			must(t, err)
			if len(r.Kvs) == 0 {
				t.Fatal("no holder key to delete")
			}
			_, err = e.cli.Delete(t.Context(), string(r.Kvs[0].Key))
			must(t, err)
		}},
		{name: "sidecar SIGTERM", lock: "s17-sigterm", code: 70, fault: func(t *testing.T, _ *batonRun) { s0.stop(t) },
			after: func(t *testing.T) { s0.start(t) }},
		// A semaphore's units have no lock delay: the sidecar tells the
		// run to stop and keeps the units until it has (--shutdown-grace).
		{name: "sidecar SIGTERM, semaphore", lock: "s17-sigterm-sem", both: []string{"--limit", "2", "--weight", "2"}, code: 70, fault: func(t *testing.T, _ *batonRun) { s0.stop(t) },
			after: func(t *testing.T) { s0.start(t) }},
		{name: "baton run SIGKILL", lock: "s17-kill", code: -1, fault: func(t *testing.T, w *batonRun) { _ = w.cmd.Process.Kill() }},
		{name: "sidecar SIGSTOP past its lease", lock: "s17-sigstop", code: 70, fault: func(t *testing.T, _ *batonRun) { s0.pause() },
			after: func(t *testing.T) { s0.resume() }},
	}
	var notes []string
	for _, p := range phases {
		lock := p.lock
		old := e.startRun(t, s0, append(append(append([]string{"--key", lock, "--kill-grace", "500ms"}, p.args...), p.both...), daemon...)...)
		fence := e.firstWrite(t, lock, 0)
		next := e.startRun(t, s1, append(append([]string{"--key", lock, "--wait", "60s"}, p.both...), "--", "env", writerForEnv+"=500ms")...)
		time.Sleep(300 * time.Millisecond) // queued behind it, writing meanwhile
		faultAt := time.Now()
		if p.fault != nil {
			p.fault(t, old)
		}
		code := old.wait(t, 30*time.Second)
		stopped := time.Since(faultAt)
		if code != p.code {
			t.Errorf("%s: the holder's baton run exited %d, want %d; stderr: %s", p.name, code, p.code, old.stderr.String())
		}
		if c := next.wait(t, 60*time.Second); c != 0 {
			t.Errorf("%s: the next baton run exited %d; stderr: %s", p.name, c, next.stderr.String())
		}
		if p.name == "baton run SIGKILL" {
			time.Sleep(time.Second) // the guard stops the work within the kill grace
		}
		e.writersGone(t, p.name)
		gap := e.handOver(lock, fence)
		if gap < 0 {
			t.Errorf("%s: the next holder wrote %v before the old holder's last write", p.name, -gap)
		}
		notes = append(notes, fmt.Sprintf("%s: old work stopped, next holder's first write %v later (baton run exit %d after %v)", p.name, gap.Round(time.Millisecond), code, stopped.Round(time.Millisecond)))
		if p.after != nil {
			p.after(t)
		}
	}
	// A clean last run on each sidecar takes any lock-delay marker left.
	o := e.finish("S17 baton run: work stopped with its lock", requirements{}, func(o *outcome) {
		o.note("each `baton run`'s work is a daemonized grandchild writing with its fence to a store without fences; %s", strings.Join(notes, "; "))
	})
	if o.store.staleAccepted != 0 || o.store.lostUpdates != 0 {
		t.Errorf("the work of a holder that lost its lock wrote on: %d stale writes, %d lost updates", o.store.staleAccepted, o.store.lostUpdates)
	}
	if o.store.writesAccepted < 20 {
		t.Errorf("only %d writes: the scenario did not exercise the lock", o.store.writesAccepted)
	}
	if o.keys != 0 || o.leases != 0 {
		t.Errorf("left over: %d keys, %d leases", o.keys, o.leases)
	}
}

// TestS18OneOwnerTwoHolds: two hold streams of one owner (two replicas
// configured alike) never both hold the lock: the second waits until the
// first ends, with a fence of its own.
func TestS18OneOwnerTwoHolds(t *testing.T) {
	e := newEnv(t, envOptions{})
	s := e.addSidecars(1, sidecarOptions{})[0]
	apps := e.apps(s, 2, 5*time.Millisecond)
	for _, a := range apps {
		a.owner = "deploy-1" // both replicas configured with one owner
	}
	stop := make(chan struct{})
	time.AfterFunc(scale(4*time.Second, 20*time.Second), func() { close(stop) })
	runApps(apps, stop, "s18", 0, holdPlan{wait: 30 * time.Second, increments: 3}).Wait()
	e.finish("S18 one owner, two holds", requirements{noOverlap: true, minOK: 10}, func(o *outcome) {
		o.note("two replicas hold one lock through hold streams with the same owner, deploy-1: each grant has a fence of its own, never shared")
	})
}

// TestS20BurstNamesTheHolder: a burst of 30 tries of one free key on one
// sidecar (a webhook retried) grants one; every refusal names it, owner
// and fence, also those refused while its try was in flight.
func TestS20BurstNamesTheHolder(t *testing.T) {
	e := newEnv(t, envOptions{})
	s := e.addSidecars(1, sidecarOptions{})[0]
	c := httpClient(s)
	rounds, refusals := scale(10, 50), 0
	for round := range rounds {
		key := fmt.Sprintf("s20-%d", round)
		type answer struct {
			code int
			body map[string]any
		}
		answers := make(chan answer, 30)
		gun := make(chan struct{})
		for i := range 30 {
			go func() {
				<-gun
				code, body, err := call(t.Context(), c, http.MethodPost, "/v1/locks/"+key, fmt.Sprintf(`{"owner":"hook-%d"}`, i))
				if err != nil {
					t.Error(err)
				}
				answers <- answer{code, body}
			}()
		}
		close(gun)
		var winner string
		var fence float64
		var refused []map[string]any
		for range 30 {
			a := <-answers
			switch a.code {
			case http.StatusOK:
				winner, fence = a.body["owner"].(string), a.body["fence"].(float64)
			case http.StatusConflict:
				refused = append(refused, a.body)
			default:
				t.Fatalf("round %d: %d %v", round, a.code, a.body)
			}
		}
		for _, r := range refused {
			h, _ := r["holder"].(map[string]any)
			if r["code"] != lockapi.CodeAlreadyRunning || h == nil || h["owner"] != winner || r["fence"] != fence {
				t.Errorf("round %d: a refusal %v does not name the holder %s (fence %v)", round, r, winner, fence)
			}
		}
		refusals += len(refused)
		if code, _, err := call(t.Context(), c, http.MethodDelete, "/v1/locks/"+key+"?owner="+winner, ""); err != nil || code != 200 {
			t.Fatalf("release: %d %v", code, err)
		}
	}
	e.finish("S20 burst of tries, refusals name the holder", requirements{}, func(o *outcome) {
		o.note("%d bursts of 30 tries of one free key on one sidecar: %d refusals, each naming the winner and its fence", rounds, refusals)
	})
}

// TestS19RestartsAndNesting: a lock is never lost in silence. A sidecar
// SIGTERMed and restarted (as Kubernetes restarts it) answers the old
// owner of a plain lock 410 lock_lost, reason shutdown, not 404; a nested
// `baton run` takes a lock of its own, and its end leaves the outer run's.
func TestS19RestartsAndNesting(t *testing.T) {
	e := newEnv(t, envOptions{})
	scs := e.addSidecars(2, sidecarOptions{})
	s0, s1 := scs[0], scs[1]
	c := httpClient(s0)
	code, body, err := call(t.Context(), c, http.MethodPost, "/v1/locks/s19", `{"owner":"p1","ttl":"10m"}`)
	if err != nil || code != 200 {
		t.Fatalf("acquire: %d %v %v", code, body, err)
	}
	s0.stop(t)
	s0.start(t)
	for _, call1 := range []struct{ method, path, body string }{
		{http.MethodPost, "/v1/locks/s19:extend", `{"owner":"p1"}`},
		{http.MethodDelete, "/v1/locks/s19?owner=p1", ""},
	} {
		code, body, err := call(t.Context(), httpClient(s0), call1.method, call1.path, call1.body)
		if err != nil || code != http.StatusGone || body["code"] != lockapi.CodeLockLost || body["reason"] != "shutdown" {
			t.Errorf("%s %s after a SIGTERM restart: %d %v %v; want 410 lock_lost, reason shutdown", call1.method, call1.path, code, body, err)
		}
	}

	// Nested: the inner run takes s19-inner, not the outer's lock.
	out, err := exec.Command(batonBin, "run", "--socket", s1.socket, "--key", "s19-outer", "--owner", "o1", "--",
		batonBin, "run", "--socket", s1.socket, "--key", "s19-inner", "--", "sh", "-c",
		`echo "$BATON_KEY $BATON_OWNER"; curl -s --unix-socket `+s1.socket+` http://baton/v1/locks/s19-outer`).CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "s19-inner exec-") || !strings.Contains(string(out), `"owner":"o1"`) {
		t.Errorf("nested run: %v\n%s", err, out)
	}
	e.finish("S19 SIGTERM restart, nested run", requirements{}, func(o *outcome) {
		o.note("a plain lock's owner after its sidecar's SIGTERM restart: extend and release answered 410 lock_lost, reason shutdown; a nested baton run held a lock of its own while the outer run's stayed held")
	})
}

// TestS21PolicyAtTheGrant: a waiter that queued while the lock policy
// allowed it is not granted the lock once the policy forbids it: it is told
// why when its turn comes (403 forbidden), and the next waiter is served.
func TestS21PolicyAtTheGrant(t *testing.T) {
	e := newEnv(t, envOptions{})
	pol := filepath.Join(e.dir, "policy.yaml")
	allow := func(prefix string) {
		must(t, os.WriteFile(pol, []byte("policies:\n- name: p\n  rules:\n  - serviceAccounts: [\"*\"]\n    keys: [\""+prefix+"\"]\n"), 0o600))
	}
	allow("demo/")
	guarded := e.addSidecars(1, sidecarOptions{extra: []string{"--policy-file", pol}})[0]
	others := e.addSidecars(2, sidecarOptions{})
	c, c2 := httpClient(others[0]), httpClient(others[1])
	if code, body, err := call(t.Context(), c, http.MethodPost, "/v1/locks/demo/job", `{"owner":"holder"}`); err != nil || code != 200 {
		t.Fatalf("holder: %d %v %v", code, body, err)
	}
	waiter := make(chan map[string]any, 1)
	go func() {
		code, body, err := call(t.Context(), httpClient(guarded), http.MethodPost, "/v1/locks/demo/job", `{"owner":"waiter","wait":"30s"}`)
		if err != nil {
			t.Error(err)
		}
		body["status"] = float64(code)
		waiter <- body
	}()
	e.waitQueued("demo%2Fjob", 2)
	allow("other/")
	time.Sleep(2 * time.Second) // the sidecar reads its policy file every second
	next := make(chan int, 1)
	go func() {
		code, _, _ := call(t.Context(), c2, http.MethodPost, "/v1/locks/demo/job", `{"owner":"next","wait":"30s"}`)
		next <- code
	}()
	e.waitQueued("demo%2Fjob", 3)
	if code, _, err := call(t.Context(), c, http.MethodDelete, "/v1/locks/demo/job?owner=holder", ""); err != nil || code != 200 {
		t.Fatalf("release: %d %v", code, err)
	}
	w := <-waiter
	if w["status"] != 403.0 || w["code"] != lockapi.CodeForbidden || !strings.Contains(fmt.Sprint(w["message"]), "when its turn came") {
		t.Errorf("the waiter queued before the policy changed: %v; want 403 forbidden at its turn", w)
	}
	if code := <-next; code != 200 {
		t.Errorf("the next waiter: %d", code)
	}
	if code, _, err := call(t.Context(), c2, http.MethodDelete, "/v1/locks/demo/job?owner=next", ""); err != nil || code != 200 {
		t.Fatalf("release: %d %v", code, err)
	}
	e.finish("S21 policy changed while waiting", requirements{}, func(o *outcome) {
		o.note("a waiter queued while the policy allowed demo/; the policy then allowed only other/: refused 403 when its turn came, the next waiter granted")
	})
}
