package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	batonv1 "github.com/baton-dev/baton/api/v1alpha1"
	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/mirror"
)

// The election the elector's replicas run, and its Deployment.
const (
	electionName = "failover"
	electorName  = "elector"
)

// The failovers the scenario forces, in turn, on the leader: its pod
// deleted; its sidecar, or its app container, SIGKILLed; its sidecar, or
// its whole pod, SIGSTOPped until another leads; a rollout of every pod.
var failoverKinds = []string{"delete", "kill-sidecar", "stop-sidecar", "rollout", "kill-app", "stop-pod"}

// TestElectionFailovers (make soak, BATON_SOAK=1): electionFailovers with
// BATON_FAILOVERS (200) failovers, on a release of its own with the
// leader labels on.
func TestElectionFailovers(t *testing.T) {
	if os.Getenv("BATON_SOAK") == "" {
		t.Skip("soak only: BATON_SOAK=1 (make soak)")
	}
	needNode(t)
	n := 200
	if s := os.Getenv("BATON_FAILOVERS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n < len(failoverKinds) {
			t.Fatalf("BATON_FAILOVERS=%s: want a number of %d or more", s, len(failoverKinds))
		}
	}
	helm(t, "install", release, filepath.Join(root, "charts", "baton"), "--namespace", system, "--create-namespace",
		"--set", "controller.leaderLabels=true", "--wait", "--timeout", "5m")
	t.Cleanup(func() { helm(t, "uninstall", release, "--namespace", system, "--wait") })
	electionFailovers(t, "elections", n)
}

// electors is the scenario's view of the elector Deployment's election.
type electors struct {
	ns     string
	store  *tickStore
	etcd   *clientv3.Client
	prefix string // the election's keys in etcd
}

// fault is one forced failover: what was done to the leader, and when.
type fault struct {
	kind     string
	at, done time.Time  // when it began, and when its changes were all seen
	from     leadership // the leadership it ended
	resumed  time.Time  // a stopped pod's or sidecar's SIGCONT
}

// electionFailovers runs the elector, three replicas of a Deployment
// campaigning through their sidecars with baton elect, each leader's
// command writing its fence to the tick store, and forces at least n
// failovers on it, failoverKinds in turn. Leaderships never overlap: no
// pod writes under an older fence than one written before, but for a
// whole pod frozen past its lease, whose late writes the fence refuses and
// which stop within seconds of its SIGCONT; no fence is written by two
// pods. After each change the Lease, the leader's pod label and etcd agree
// within 30 s, and so does the election's Lock (how soon is logged, with
// the time without a leader).
func electionFailovers(t *testing.T, ns string, n int) {
	ctx := context.Background()
	shared, err := os.MkdirTemp("", "baton-node-elect-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(shared, 0o777)
	t.Cleanup(func() { os.RemoveAll(shared) })
	if _, err := node.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { kubectl(t, "delete", "namespace", ns, "--wait") })
	if _, err := node.Client.AppsV1().Deployments(ns).Create(ctx, elector(ns, shared), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	layout, err := keyspace.NewLayout(ns)
	if err != nil {
		t.Fatal(err)
	}
	key, err := keyspace.ParseKey(electionName)
	if err != nil {
		t.Fatal(err)
	}
	e := &electors{ns: ns, store: newTickStore(t, filepath.Join(shared, "ticks")), etcd: rootClient(t),
		prefix: layout.In(keyspace.Elections).LockPrefix(key)}
	var faults []fault
	var lags []time.Duration
	first := e.ready(t)
	for i := 0; i < len(failoverKinds) || len(e.store.since(first.fence))-1 < n; i++ {
		f := fault{kind: failoverKinds[i%len(failoverKinds)], from: e.ready(t)}
		lags = append(lags, e.force(t, &f)...)
		faults = append(faults, f)
	}
	e.check(t, faults)
	e.report(t, faults, lags)
}

// elector is the Deployment of three replicas, each campaigning with
// baton elect in a loop, its command ticking every 100 ms while it leads.
func elector(ns, shared string) *appsv1.Deployment {
	three := int32(3)
	labels := map[string]string{"app": electorName}
	script := fmt.Sprintf(`trap 'kill -TERM $run 2>/dev/null; wait $run; exit 0' TERM
while true; do
  baton elect %s --kill-grace 1s -- sh -c 'while true; do echo "tick $POD_NAME $BATON_FENCE" >> /shared/ticks; sleep 0.1; done' &
  run=$!
  wait $run || sleep 1
done`, electionName)
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: electorName, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: &three,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{
					Labels: map[string]string{"app": electorName, "baton.dev/inject": "true"},
					Annotations: map[string]string{
						"baton.dev/lease-ttl":    leaseTTL.String(),
						"baton.dev/leader-label": "true",
					},
				},
				Spec: workerSpec(shared, script),
			},
		},
	}
}

// ready waits for the three replicas to be ready and a leader to be
// leading, and returns its leadership.
func (e *electors) ready(t *testing.T) leadership {
	t.Helper()
	var cur leadership
	eventually(t, 6*time.Minute, "three ready electors, one of them leading", func() error {
		d, err := node.Client.AppsV1().Deployments(e.ns).Get(context.Background(), electorName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if s := d.Status; s.ReadyReplicas != 3 || s.UpdatedReplicas != 3 || s.Replicas != 3 {
			return fmt.Errorf("replicas %d, updated %d, ready %d", s.Replicas, s.UpdatedReplicas, s.ReadyReplicas)
		}
		var ok bool
		if cur, ok = e.store.current(); !ok {
			return errors.New("nobody ticking")
		}
		return nil
	})
	return cur
}

// agree waits until etcd, the election's Lease and Lock and the leader
// label of the pods all name the leadership leading now, and returns it and how
// long after its first tick they did.
func (e *electors) agree(t *testing.T) (time.Duration, leadership) {
	t.Helper()
	var why error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		cur, ok := e.store.current()
		if !ok {
			why = errors.New("nobody ticking")
			continue
		}
		if why = e.agrees(cur); why == nil {
			return time.Since(cur.first), cur
		}
	}
	t.Fatalf("etcd, the Lease, the Lock and the leader label disagree with the leader after 30s: %v", why)
	return 0, leadership{}
}

// agrees says how etcd, the Lease or the labels differ from cur.
func (e *electors) agrees(cur leadership) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := e.etcd.Get(ctx, e.prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend), clientv3.WithLimit(1))
	switch {
	case err != nil:
		return err
	case len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != cur.fence:
		return fmt.Errorf("%s leads with fence %d, etcd's first candidate is %v", cur.pod, cur.fence, resp.Kvs)
	}
	leases, err := node.Client.CoordinationV1().Leases(e.ns).List(ctx, metav1.ListOptions{LabelSelector: "baton.dev/election=" + electionName})
	if err != nil {
		return err
	}
	if len(leases.Items) != 1 {
		return fmt.Errorf("%d Leases of the election", len(leases.Items))
	}
	l := leases.Items[0]
	if h := l.Spec.HolderIdentity; h == nil || *h != cur.pod || l.Annotations["baton.dev/fence"] != strconv.FormatInt(cur.fence, 10) {
		return fmt.Errorf("the Lease shows holder %v, fence %s; %s leads with fence %d", h, l.Annotations["baton.dev/fence"], cur.pod, cur.fence)
	}
	pods, err := node.Client.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: "leader.baton.dev/" + l.Name + "=true"})
	if err != nil {
		return err
	}
	var labelled []string
	for _, p := range pods.Items {
		labelled = append(labelled, p.Name)
	}
	if !slices.Equal(labelled, []string{cur.pod}) {
		return fmt.Errorf("pods labelled leader: %v; %s leads", labelled, cur.pod)
	}
	// kubectl get locks shows it too.
	raw, err := node.Client.CoreV1().RESTClient().Get().
		AbsPath("/apis/baton.dev/v1alpha1/namespaces", e.ns, "locks", mirror.ElectionObjectName(electionName)).DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("the election's Lock: %w", err)
	}
	var lock batonv1.Lock
	if err := json.Unmarshal(raw, &lock); err != nil {
		return err
	}
	if s := lock.Status; !s.Election || s.Holder == nil || s.Holder.Pod != cur.pod || s.Fence != cur.fence {
		return fmt.Errorf("the election's Lock shows %+v; %s leads with fence %d", s, cur.pod, cur.fence)
	}
	return nil
}

// podProcesses are pod's processes on the node: its sidecar's, and the
// others (its app container's).
func podProcesses(t *testing.T, pod string) (sidecar int, others []int) {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, ent := range entries {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", ent.Name(), "cmdline"))
		env, _ := os.ReadFile(filepath.Join("/proc", ent.Name(), "environ"))
		switch {
		case !strings.Contains("\x00"+string(env)+"\x00", "\x00POD_NAME="+pod+"\x00"):
		case strings.HasPrefix(string(cmdline), "/baton\x00serve\x00"):
			sidecar = pid
		default:
			others = append(others, pid)
		}
	}
	return sidecar, others
}

// signalAll sends sig to pids, then again to the pod's processes that
// appeared meanwhile (a shell's child forked before it stopped), until no
// new one does.
func signalAll(t *testing.T, pod string, sig syscall.Signal, withSidecar bool) []int {
	t.Helper()
	done := map[int]bool{}
	for range 5 {
		sidecar, pids := podProcesses(t, pod)
		if withSidecar && sidecar != 0 {
			pids = append(pids, sidecar)
		}
		fresh := 0
		for _, pid := range pids {
			if !done[pid] {
				_ = syscall.Kill(pid, sig)
				done[pid], fresh = true, fresh+1
			}
		}
		if fresh == 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	var out []int
	for pid := range done {
		out = append(out, pid)
	}
	return out
}

// ms is d in milliseconds, for the report.
func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }
