package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The quota the out-of-space scenario lowers etcd's to, so that a test can
// fill it: 64 MiB, far above what the app's turns keep in use.
const (
	smallQuota = 64 << 20
	fillerKeys = "/node-test/filler/"
)

// etcdOutOfSpace: etcd's quota lowered by a helm upgrade (which rolls its
// members and the controller under the app), then filled to it with data
// that is not Baton's while the app takes turns and a hold stream holds a
// lock. etcd raises its NOSPACE alarm: the sidecars refuse grants with
// etcd_no_space and turn not ready, BatonEtcdAlarm fires in a Prometheus
// scraping the controller, and the hold stream keeps its lock through
// renewals etcd refuses. The data in use fills the quota,
// so the alarm stays until, as docs/operations.md says, what is not
// Baton's is deleted; then the controller compacts, defragments and
// disarms by itself, the pods turn ready, and every grant's fence is above
// every one before. On the way, the churn of the app's turns so far has
// left etcd's database small.
func etcdOutOfSpace(t *testing.T, chart, phases string, appPods func(*testing.T) []string) {
	ctx := context.Background()
	prom := prometheusBin(t)
	start := time.Now()
	helm(t, "upgrade", release, chart, "--namespace", system, "--reuse-values",
		"--set", fmt.Sprintf("etcd.quota=%d", smallQuota), "--set", "etcd.maintenance.interval=10s", "--wait", "--timeout", "5m")
	t.Logf("helm upgrade to a quota of %d MiB, etcd's members rolled under the app: %v", smallQuota>>20, time.Since(start).Round(time.Millisecond))
	cli := rootClient(t)
	st := endpointStatus(t, cli)
	if st.DbSizeQuota != smallQuota {
		t.Fatalf("etcd's quota %d after the upgrade, want %d", st.DbSizeQuota, smallQuota)
	}
	// Bounded under churn: every run of the phase so far was a grant and a
	// release, with the other tests' locks, member replacements and a
	// restore among them.
	runs := checkPhases(t, phases)
	t.Logf("after %d runs of the phase and the tests before: etcd's database file %.1f MiB, %.1f MiB in use, revision %d",
		len(runs), mib(st.DbSize), mib(st.DbSizeInUse), st.Header.Revision)
	if st.DbSize > 32<<20 || st.DbSizeInUse > 16<<20 {
		t.Errorf("etcd's database %d bytes, %d in use, after the app's churn: want under 32 MiB and 16 MiB", st.DbSize, st.DbSizeInUse)
	}

	pods := appPods(t)
	logsOnFailure(t, pods)
	hold, holdOut, heldFence, holdEnded := holdThrough(t, pods[0])
	// The pod's containers do not share their processes (the Kubernetes
	// default): its sidecar says it cannot see the holder's, and why.
	if code, out := batonIn(t, pods[0], "locks", "status", "nospace/held"); code != 0 || !strings.Contains(out, "held here by held: (not visible to the sidecar: shareProcessNamespace)") {
		t.Errorf("locks status of the held lock in its pod: exit %d:\n%s", code, out)
	}
	defer func() {
		if t.Failed() { // the command in the pod, and the lock, end too
			batonIn(t, pods[0], "sh", "-c", "echo > /tmp/nospace-done")
		}
		hold.Process.Kill()
	}()
	// A failure midway leaves etcd full and the app's pods not ready: the
	// tests after this one would fail for it. Make room as a user would,
	// and let the controller disarm.
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		if _, err := cli.Delete(ctx, fillerKeys, clientv3.WithPrefix()); err != nil {
			t.Logf("delete the filler after the failure: %v", err)
		}
		for ctx.Err() == nil && hasAlarm(t, cli) {
			time.Sleep(time.Second)
		}
		t.Logf("after the failure: filler deleted, NOSPACE raised still: %v", hasAlarm(t, cli))
	})
	filled, lastRev := fill(t, cli)
	alarmAt := time.Now()
	// Started now, it sees this alarm alone (its rule looks back 15
	// minutes: an alarm of an earlier filler round would fire it too).
	alerts := controllerPrometheus(t, prom)
	t.Logf("etcd took %.1f MiB of filler before NOSPACE stayed (last at revision %d)", mib(filled), lastRev)
	if !hasAlarm(t, cli) {
		t.Fatal("etcd refused a write for space but lists no NOSPACE alarm")
	}

	// A grant is refused, by name; every app pod's sidecar turns not ready.
	code, out := batonIn(t, pods[len(pods)-1], "run", "--key", "nospace/probe", "--", "true")
	if code != 74 || !strings.Contains(out, "etcd_no_space") {
		t.Errorf("baton run while etcd is out of space: exit %d, %s; want 74 and etcd_no_space", code, out)
	}
	eventually(t, time.Minute, "every app pod not ready", func() error {
		for _, p := range pods {
			if podReady(t, appNS, p) {
				return fmt.Errorf("%s still ready", p)
			}
		}
		return nil
	})
	t.Logf("every app pod was not ready %v after the alarm", time.Since(alarmAt).Round(time.Millisecond))
	eventually(t, time.Minute, "BatonEtcdAlarm firing for NOSPACE", func() error {
		return firing(alerts(), "BatonEtcdAlarm", map[string]string{"alarm": "NOSPACE", "namespace": system})
	})
	t.Logf("BatonEtcdAlarm fired %v after the alarm", time.Since(alarmAt).Round(time.Millisecond))
	// The hold stream's renewals (every 2 s for its 6 s ttl) are refused
	// for space: it holds its lock all the same, for three ttls and more.
	select {
	case err := <-holdEnded:
		t.Fatalf("the hold stream's baton run ended while etcd was out of space (%v): %s", err, holdOut.String())
	case <-time.After(time.Until(alarmAt.Add(20 * time.Second))):
	}
	if strings.Contains(holdOut.String(), "lost") {
		t.Fatalf("the hold stream's baton run lost its lock while etcd was out of space: %s", holdOut.String())
	}
	if fences := lockFences(t, cli, "nospace/held"); len(fences) != 1 || fences[0] != heldFence {
		t.Fatalf("the held lock's keys have fences %v, want the one granted, %d", fences, heldFence)
	}
	// docs/operations.md: "delete what is not Baton's". The controller's
	// next pass compacts, defragments the members and disarms.
	if _, err := cli.Delete(ctx, fillerKeys, clientv3.WithPrefix()); err != nil {
		t.Fatalf("delete the filler while etcd is out of space: %v", err)
	}
	deleted := time.Now()
	for hasAlarm(t, cli) {
		if time.Since(deleted) > 2*time.Minute {
			t.Fatalf("the NOSPACE alarm still raised 2m after the filler was deleted; the controller's maintenance said last: %s", maintenanceSaid())
		}
		time.Sleep(time.Second)
	}
	t.Logf("the controller disarmed NOSPACE %v after the filler was deleted (maintenance every 10s)", time.Since(deleted).Round(time.Millisecond))
	eventually(t, time.Minute, "every app pod ready again", func() error {
		for _, p := range pods {
			if !podReady(t, appNS, p) {
				return fmt.Errorf("%s not ready", p)
			}
		}
		return nil
	})
	t.Logf("every app pod was ready again %v after the filler was deleted", time.Since(deleted).Round(time.Millisecond))
	if st := endpointStatus(t, cli); float64(st.DbSize) >= 0.5*smallQuota {
		t.Errorf("etcd's database file %d bytes after the maintenance, half the quota or more: not defragmented", st.DbSize)
	}

	// The hold ends as its command does: its lock was never lost.
	if code, out := batonIn(t, pods[0], "sh", "-c", "echo > /tmp/nospace-done"); code != 0 {
		t.Fatalf("end the held command: exit %d: %s", code, out)
	}
	select {
	case err := <-holdEnded:
		if err != nil || strings.Contains(holdOut.String(), "lost") {
			t.Errorf("the hold through the alarm: %v, %s; want exit 0, its lock never lost", err, holdOut.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the held command did not end: %s", holdOut.String())
	}
	// Fences keep growing: a grant now is above the filler's revisions,
	// and so is the app's next run.
	code, out = batonIn(t, pods[len(pods)-1], "run", "--key", "nospace/probe", "--", "sh", "-c", `echo "fence $BATON_FENCE"`)
	m := regexp.MustCompile(`fence (\d+)`).FindStringSubmatch(out)
	if code != 0 || m == nil {
		t.Fatalf("baton run after the alarm: exit %d, %s", code, out)
	}
	if f, _ := strconv.ParseInt(m[1], 10, 64); f <= lastRev || f <= heldFence {
		t.Errorf("a grant after the alarm has fence %d, not above the filler's revision %d and the held lock's %d", f, lastRev, heldFence)
	}
	eventually(t, time.Minute, "a run of the phase after the alarm", func() error {
		for _, r := range checkPhases(t, phases) {
			if r.fence > lastRev {
				return nil
			}
		}
		return fmt.Errorf("none above fence %d", lastRev)
	})
}

// batonRunIn starts baton run with args in pod's worker container, and
// returns it, what it prints, and a channel closed when it ends.
func batonRunIn(t *testing.T, pod string, args ...string) (*exec.Cmd, *syncBuffer, <-chan struct{}) {
	t.Helper()
	cmd := exec.Command(filepath.Join(root, "bin", "k8s", "kubectl"), append([]string{"exec", "-n", appNS, pod, "-c", "worker", "--", "baton", "run"}, args...)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+node.Kubeconfig)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ended := make(chan struct{})
	go func() {
		cmd.Wait()
		close(ended)
	}()
	return cmd, out, ended
}

// holdThrough starts baton run in pod holding the lock nospace/held with a
// ttl of 6s through a hold stream, its command waiting for the file
// /tmp/nospace-done, and returns it, what it prints, its fence, and a
// channel that gets its end.
func holdThrough(t *testing.T, pod string) (*exec.Cmd, *syncBuffer, int64, <-chan error) {
	t.Helper()
	hold := exec.Command(filepath.Join(root, "bin", "k8s", "kubectl"), "exec", "-n", appNS, pod, "-c", "worker", "--",
		"baton", "run", "--key", "nospace/held", "--owner", "held", "--ttl", "6s", "--",
		"sh", "-c", `echo "held $BATON_FENCE"; while [ ! -e /tmp/nospace-done ]; do sleep 1; done`)
	hold.Env = append(os.Environ(), "KUBECONFIG="+node.Kubeconfig)
	out := &syncBuffer{}
	hold.Stdout, hold.Stderr = out, out
	if err := hold.Start(); err != nil {
		t.Fatal(err)
	}
	ended := make(chan error, 1)
	go func() { ended <- hold.Wait() }()
	var fence int64
	eventually(t, 30*time.Second, "the lock nospace/held held", func() error {
		m := regexp.MustCompile(`held (\d+)`).FindStringSubmatch(out.String())
		if m == nil {
			return fmt.Errorf("printed %q", out.String())
		}
		fence, _ = strconv.ParseInt(m[1], 10, 64)
		return nil
	})
	return hold, out, fence, ended
}

// fill writes filler until etcd is out of space with its data in use
// filling the quota, and returns how many bytes it took and the revision
// of the last. etcd raises NOSPACE when its file's high-water mark
// reaches the quota, with freed pages below it: the controller then makes
// room, disarms, and the next round fills those with smaller values.
func fill(t *testing.T, cli *clientv3.Client) (int64, int64) {
	t.Helper()
	var total, last int64
	for round, size := range []int{64 << 10, 8 << 10, 1 << 10, 1 << 10, 1 << 10, 1 << 10} {
		n, rev := fillRound(t, cli, round, size)
		total, last = total+n, max(last, rev)
		st := endpointStatus(t, cli)
		t.Logf("%s filler round %d: %d values of %d KiB; etcd's file %.1f MiB, %.1f MiB in use, of a %d MiB quota",
			time.Now().UTC().Format("15:04:05.000"), round, n/int64(size), size>>10, mib(st.DbSize), mib(st.DbSizeInUse), smallQuota>>20)
		// The controller keeps the alarm when a member's file, compacted
		// and defragmented, is still 95% of the quota or more. Far above
		// that, etcd is full. Just above it, it is the controller's call,
		// seen in what it does within two passes. Below it, the controller
		// disarms, in two minutes at most (a loaded machine's compaction
		// and defragmentation take seconds), and the next round fills the
		// room it made: a test that called etcd full there would meet the
		// alarm disarmed right after.
		if float64(st.DbSizeInUse) >= 0.97*smallQuota {
			return total, last
		}
		wait := 25 * time.Second
		if float64(st.DbSizeInUse) < 0.95*smallQuota {
			wait = 2 * time.Minute
		}
		disarmed := false
		for deadline := time.Now().Add(wait); time.Now().Before(deadline) && !disarmed; time.Sleep(time.Second) {
			disarmed = !hasAlarm(t, cli)
		}
		switch {
		case !disarmed && wait < time.Minute:
			return total, last
		case !disarmed:
			t.Fatalf("the controller did not make room and disarm NOSPACE in %v, with %.1f MiB of %d MiB in use; its maintenance said last: %s",
				wait, mib(st.DbSizeInUse), smallQuota>>20, maintenanceSaid())
		}
	}
	t.Fatal("etcd's data in use never filled its quota")
	return 0, 0
}

// fillRound writes values of size bytes under fillerKeys, from 8 writers,
// until etcd refuses one for space, and returns the bytes it took and the
// revision of the last.
func fillRound(t *testing.T, cli *clientv3.Client, round, size int) (int64, int64) {
	t.Helper()
	value := strings.Repeat("x", size)
	var mu sync.Mutex
	var took, last int64
	var failed error
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; int64(i*8*size) < 2*smallQuota; i++ {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				resp, err := cli.Put(ctx, fmt.Sprintf("%s%d/%d/%06d", fillerKeys, round, w, i), value)
				cancel()
				mu.Lock()
				switch {
				case err != nil && strings.HasSuffix(err.Error(), rpctypes.ErrNoSpace.Error()):
				case err != nil:
					failed = err
				default:
					took, last = took+int64(size), max(last, resp.Header.Revision)
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
			mu.Lock()
			failed = fmt.Errorf("etcd took twice its quota of %d MiB", smallQuota>>20)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if failed != nil {
		t.Fatalf("fill etcd: %v", failed)
	}
	return took, last
}

// batonIn runs a command in pod's worker container and returns its exit
// code and what it printed.
func batonIn(t *testing.T, pod string, args ...string) (int, string) {
	t.Helper()
	if args[0] == "run" || args[0] == "locks" {
		args = append([]string{"baton"}, args...)
	}
	cmd := exec.Command(filepath.Join(root, "bin", "k8s", "kubectl"), append([]string{"exec", "-n", appNS, pod, "-c", "worker", "--"}, args...)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+node.Kubeconfig)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("kubectl exec %s: %v", pod, err)
	}
	return cmd.ProcessState.ExitCode(), string(out)
}

// podReady reports the pod's Ready condition.
func podReady(t *testing.T, ns, name string) bool {
	t.Helper()
	p, err := node.Client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }
