package node

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// Where the chart goes, and the app that takes turns at a phase.
const (
	release   = "baton"
	system    = "baton-system"
	appNS     = "shop"
	phaseKey  = "nightly/report"
	appUser   = 1000 // the app runs as another user than the sidecar
	appGroup  = 2000 // the pod's fsGroup: the socket's group, so the app may use it
	leaseTTL  = 3 * time.Second
	phaseTime = time.Second
)

// helm runs bin/helm against the node.
func helm(t *testing.T, args ...string) string {
	t.Helper()
	bin := os.Getenv("HELM")
	if bin == "" {
		bin = filepath.Join(root, "bin", "helm")
	}
	return command(t, bin, args...)
}

// kubectl runs bin/k8s/kubectl against the node.
func kubectl(t *testing.T, args ...string) string {
	t.Helper()
	return command(t, filepath.Join(root, "bin", "k8s", "kubectl"), args...)
}

func command(t *testing.T, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+node.Kubeconfig)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s%s", filepath.Base(bin), strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String()
}

// eventually polls cond every 100ms until it returns nil or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() error) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, d, true, func(context.Context) (bool, error) {
		last = cond()
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("%s: not after %v: %v", what, d, last)
	}
}

// TestBatonOnANode installs the chart with its default values on the node
// and runs an injected app: the path every user takes.
func TestBatonOnANode(t *testing.T) {
	needNode(t)
	ctx := context.Background()
	chart := filepath.Join(root, "charts", "baton")

	// One terminal for the whole test, as a person's: the install's PATH
	// export holds for the commands after it.
	sh := newDocShell(t)

	t.Run("helm install with the default values, and the example, as docs/kubernetes.md shows them", func(t *testing.T) {
		start := time.Now()
		sh.run(t, "$ export PATH=$PWD/bin:$PWD/bin/k8s:$PATH", map[string]check{
			"kubectl logs":         linesLike(reportLine),
			"kubectl get locks -A": table("NAMESPACE", "NAME", "KEY", "PHASE"),
		})
		t.Logf("the install and the example: %v", time.Since(start).Round(time.Millisecond))
		pods, err := node.Client.CoreV1().Pods(system).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			if p.Labels["app.kubernetes.io/component"] == "controller" && p.Spec.ServiceAccountName != release+"-controller" {
				t.Errorf("controller pod %s runs as %s, want the chart's ServiceAccount", p.Name, p.Spec.ServiceAccountName)
			}
		}
		// One replica leads the mirror, under the chart's own RBAC.
		eventually(t, time.Minute, "a mirror leader", func() error {
			l, err := node.Client.CoordinationV1().Leases(system).Get(ctx, "baton-mirror", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
				return fmt.Errorf("no holder")
			}
			return nil
		})
		// The leader keeps the fences' high-water mark, under the chart's
		// Role for its ConfigMap.
		eventually(t, time.Minute, "the fences' high-water mark kept", func() error {
			cm, err := node.Client.CoreV1().ConfigMaps(system).Get(ctx, release+"-fences", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if rev, err := strconv.ParseInt(cm.Data["revision"], 10, 64); err != nil || rev <= 0 {
				return fmt.Errorf("revision %q", cm.Data["revision"])
			}
			return nil
		})
	})

	t.Run("force release by annotation, as docs/kubernetes.md shows it", func(t *testing.T) {
		shown := func() (holder, fence string) {
			out := kubectl(t, "get", "locks", "-n", "baton-demo", "-o", "jsonpath={.items[0].status.phase} {.items[0].status.holder.pod} {.items[0].status.fence}")
			if f := strings.Fields(out); len(f) == 3 && f[0] == "Held" {
				return f[1], f[2]
			}
			return "", ""
		}
		var holder, fence string
		eventually(t, time.Minute, "the report held", func() error {
			if holder, fence = shown(); holder == "" {
				return fmt.Errorf("not held")
			}
			return nil
		})
		sh.inline(t, "kubectl annotate lock -n baton-demo ")
		// The next replica in the queue takes it at once, not when the
		// holder's 20 s run ends.
		start := time.Now()
		eventually(t, 15*time.Second, "the report held by the next replica", func() error {
			if h, f := shown(); h == "" || h == holder || f == fence {
				return fmt.Errorf("held by %q with fence %s", h, f)
			}
			return nil
		})
		t.Logf("the force release handed the report on in %v", time.Since(start).Round(time.Millisecond))
	})

	t.Run("the README's example", readmeExample)

	shared := filepath.Join(os.TempDir(), fmt.Sprintf("baton-node-shared-%d", os.Getpid()))
	if err := os.MkdirAll(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(shared, 0o777)
	defer os.RemoveAll(shared)
	log := filepath.Join(shared, "phases")

	t.Run("replicas take turns at the phase", func(t *testing.T) {
		if _, err := node.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: appNS}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := node.Client.AppsV1().Deployments(appNS).Create(ctx, app(shared), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// Both replicas run the phase, one at a time, each run under a
		// larger fence.
		eventually(t, 2*time.Minute, "both replicas ran the phase twice", func() error {
			runs := checkPhases(t, log)
			by := map[string]int{}
			for _, r := range runs {
				by[r.pod]++
			}
			if len(by) < 2 {
				return fmt.Errorf("runs by pod: %v", by)
			}
			for pod, n := range by {
				if n < 2 {
					return fmt.Errorf("%s ran %d times", pod, n)
				}
			}
			return nil
		})
		// kubectl shows the holder pod by name.
		start := time.Now()
		eventually(t, 10*time.Second, "kubectl get locks -A naming the holder", func() error {
			runs := checkPhases(t, log)
			last := runs[len(runs)-1]
			if last.ended {
				return fmt.Errorf("between runs")
			}
			out := kubectl(t, "get", "locks", "-A")
			if !strings.Contains(out, phaseKey) || !strings.Contains(out, last.pod) {
				return fmt.Errorf("the holder %s is not shown:\n%s", last.pod, out)
			}
			return nil
		})
		t.Logf("kubectl get locks -A named the holder %v after asking", time.Since(start).Round(time.Millisecond))
		runs := checkPhases(t, log)
		for _, r := range runs[:len(runs)-1] {
			if !r.ended {
				t.Errorf("%s's run with fence %d never ended, though nothing was killed", r.pod, r.fence)
			}
		}
	})

	// holding waits for a run in progress and returns it: one that neither
	// ended nor was stopped (a run stopped with its pod, by a scale-down,
	// stays the last until the next starts).
	holding := func(t *testing.T) run {
		t.Helper()
		var r run
		eventually(t, 30*time.Second, "a run in progress", func() error {
			runs := checkPhases(t, log)
			if len(runs) == 0 || runs[len(runs)-1].ended || runs[len(runs)-1].termed {
				return fmt.Errorf("between runs")
			}
			r = runs[len(runs)-1]
			return nil
		})
		return r
	}
	// nextRun waits for the first run after prev (a larger fence) and
	// says how long after since it started. A lock that waited for its
	// ttl (a minute) rather than its holder's lease would take too long.
	nextRun := func(t *testing.T, prev run, since time.Time) run {
		t.Helper()
		var r run
		eventually(t, 30*time.Second, "the next run", func() error {
			for _, x := range checkPhases(t, log) {
				if x.fence > prev.fence {
					r = x
					return nil
				}
			}
			return fmt.Errorf("none after fence %d", prev.fence)
		})
		t.Logf("the next run (%s, fence %d) started %v after", r.pod, r.fence, time.Since(since).Round(time.Millisecond))
		return r
	}

	t.Run("a force-deleted holder's lock passes on", func(t *testing.T) {
		h := holding(t)
		start, zero := time.Now(), int64(0)
		if err := node.Client.CoreV1().Pods(appNS).Delete(ctx, h.pod, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			t.Fatal(err)
		}
		if n := nextRun(t, h, start); n.pod == h.pod {
			t.Errorf("the deleted pod %s ran again", h.pod)
		}
	})

	t.Run("a killed sidecar's lock passes on", func(t *testing.T) {
		h := holding(t)
		pid := sidecarPID(t, h.pod)
		start := time.Now()
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		nextRun(t, h, start)
		eventually(t, 30*time.Second, "the holder's command stopped", func() error {
			for _, r := range checkPhases(t, log) {
				if r.fence == h.fence && !r.termed && !r.ended {
					return fmt.Errorf("%s's run with fence %d neither ended nor got SIGTERM", r.pod, r.fence)
				}
			}
			return nil
		})
	})

	t.Run("force release by annotation", func(t *testing.T) {
		// A hold of its own, which no phase's end can beat: the app's runs
		// last a second, less than kubectl and the controller may take on
		// a busy node.
		pod := strings.Fields(kubectlOut("get", "pods", "-n", appNS, "-o", "jsonpath={.items[*].metadata.name}"))[0]
		logsOnFailure(t, []string{pod})
		hold, out, ended := batonRunIn(t, pod, "--key", "forced/by-annotation", "--owner", "forced", "--ttl", "1m", "--",
			"sh", "-c", `trap 'echo term; exit 143' TERM; echo "held $BATON_FENCE"; sleep 600 & wait $!`)
		defer hold.Process.Kill()
		var fence, name string
		eventually(t, 30*time.Second, "the lock forced/by-annotation held and shown", func() error {
			m := regexp.MustCompile(`held (\d+)`).FindStringSubmatch(out.String())
			if m == nil {
				return fmt.Errorf("baton run printed %q", out.String())
			}
			fence = m[1]
			for _, l := range strings.Split(kubectlOut("get", "locks", "-n", appNS, "-o", `jsonpath={range .items[*]}{.metadata.name} {.status.key} {.status.fence}{"\n"}{end}`), "\n") {
				if f := strings.Fields(l); len(f) == 3 && f[1] == "forced/by-annotation" && f[2] == fence {
					name = f[0]
					return nil
				}
			}
			return fmt.Errorf("no Lock object shows fence %s", fence)
		})
		start := time.Now()
		kubectl(t, "annotate", "lock", name, "-n", appNS, "baton.dev/force-release=node test")
		select {
		case <-ended:
		case <-time.After(30 * time.Second):
			t.Fatalf("baton run still runs 30s after the force release: %s", out.String())
		}
		if code := hold.ProcessState.ExitCode(); code != 70 || !strings.Contains(out.String(), "term") || !strings.Contains(out.String(), "force release") {
			t.Errorf("baton run after the force release: exit %d, %s; want 70, its command stopped (term) and the force release named", code, out.String())
		}
		t.Logf("the holder's command was stopped %v after the annotation", time.Since(start).Round(time.Millisecond))
	})

	t.Run("etcd's backups: the first by itself, one more by hand, as docs/operations.md shows", func(t *testing.T) {
		etcdBackups(t, sh)
	})

	t.Run("an etcd member that lost its volume comes back, no lock lost", func(t *testing.T) {
		memberLostItsVolume(t, sh, log)
	})

	t.Run("etcd restored from a backup under the app, as docs/operations.md shows", func(t *testing.T) {
		etcdRestored(t, sh, log)
	})

	t.Run("scaled to 0, nothing is held", func(t *testing.T) {
		start := time.Now()
		defer func() { t.Logf("scaled to 0 in %v", time.Since(start).Round(time.Millisecond)) }()
		kubectl(t, "scale", "deployment/report", "-n", appNS, "--replicas=0")
		eventually(t, time.Minute, "no app pods", func() error {
			pods, err := node.Client.CoreV1().Pods(appNS).List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			if len(pods.Items) > 0 {
				return fmt.Errorf("%d pods left", len(pods.Items))
			}
			return nil
		})
		eventually(t, 30*time.Second, "every lock shown Free", func() error {
			phases := strings.Fields(kubectl(t, "get", "locks", "-n", appNS, "-o", "jsonpath={.items[*].status.phase}"))
			if len(phases) == 0 || slices.ContainsFunc(phases, func(p string) bool { return p != "Free" }) {
				return fmt.Errorf("phases %q", phases)
			}
			return nil
		})
	})

	// podNames lists the app's pods.
	podNames := func(t *testing.T) []string {
		t.Helper()
		pods, err := node.Client.CoreV1().Pods(appNS).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil {
				names = append(names, p.Name)
			}
		}
		return names
	}
	sidecarArgs := func(t *testing.T, pod string) string {
		t.Helper()
		p, err := node.Client.CoreV1().Pods(appNS).Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range p.Spec.InitContainers {
			if c.Name == "baton" {
				return strings.Join(c.Args, " ")
			}
		}
		t.Fatalf("pod %s has no baton sidecar: %+v", pod, p.Spec.InitContainers)
		return ""
	}

	t.Run("a Dapr app's replicas take turns through Dapr's lock API", daprExample)

	t.Run("the chart's etcd is a boundary: TLS, client certificates, a user per namespace", etcdIsABoundary)

	t.Run("certificates rotate under running sidecars and the mirror, no lock lost", func(t *testing.T) {
		certificatesRotate(t, chart, log)
	})

	t.Run("a LockPolicy governs running pods within seconds", lockPolicyOnANode)

	t.Run("three replicas elect through their sidecars: failovers forced every way, never two leaders, the Lease and the leader's label following", func(t *testing.T) {
		helm(t, "upgrade", release, chart, "--namespace", system, "--reuse-values", "--set", "controller.leaderLabels=true", "--wait", "--timeout", "5m")
		electionFailovers(t, "elections", len(failoverKinds)+2)
	})

	t.Run("helm upgrade keeps running pods and their locks", func(t *testing.T) {
		kubectl(t, "scale", "deployment/report", "-n", appNS, "--replicas=2")
		kubectl(t, "-n", appNS, "rollout", "status", "deploy/report", "--timeout=2m")
		before := podNames(t)
		h := holding(t)
		helm(t, "upgrade", release, chart, "--namespace", system, "--reuse-values", "--set", "sidecar.args={--default-ttl=7m}", "--wait", "--timeout", "5m")
		// The run that held the lock through the upgrade ended as it
		// should: neither killed nor stopped.
		eventually(t, 30*time.Second, "the run held across the upgrade ends", func() error {
			for _, r := range checkPhases(t, log) {
				if r.fence == h.fence {
					if r.termed {
						t.Fatalf("the upgrade stopped %s's run (fence %d)", r.pod, r.fence)
					}
					if r.ended {
						return nil
					}
				}
			}
			return fmt.Errorf("fence %d still running", h.fence)
		})
		nextRun(t, h, time.Now())
		if after := podNames(t); strings.Join(after, " ") != strings.Join(before, " ") {
			t.Errorf("app pods %v became %v: the upgrade restarted them", before, after)
		}
		if args := sidecarArgs(t, before[0]); strings.Contains(args, "--default-ttl=7m") {
			t.Errorf("a running pod's sidecar changed: %s", args)
		}
		// A pod created from now on gets the new settings.
		if err := node.Client.CoreV1().Pods(appNS).Delete(ctx, before[0], metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		var fresh string
		eventually(t, time.Minute, "a replacement pod", func() error {
			for _, p := range podNames(t) {
				if p != before[0] && p != before[1] {
					fresh = p
					return nil
				}
			}
			return fmt.Errorf("none yet")
		})
		if args := sidecarArgs(t, fresh); !strings.Contains(args, "--default-ttl=7m") {
			t.Errorf("the new pod's sidecar: %s, want the upgraded --default-ttl=7m", args)
		}
	})

	t.Run("etcd out of space under the app: grants refused by name, pods not ready, a hold kept, the controller repairs it, fences growing", func(t *testing.T) {
		etcdOutOfSpace(t, chart, log, podNames)
	})

	t.Run("helm uninstall: a held lock reported lost, the Lock objects go, the CRD and etcd's volumes stay, new pods get no sidecar", func(t *testing.T) {
		kubectl(t, "-n", appNS, "rollout", "status", "deploy/report", "--timeout=2m")
		// A lock held for as long as etcd lasts: its command cannot end
		// before etcd does.
		pod := podNames(t)[0]
		type result struct {
			out  string
			code int
		}
		held := make(chan result, 1)
		go func() {
			cmd := exec.Command(filepath.Join(root, "bin", "k8s", "kubectl"), "exec", "-n", appNS, pod, "-c", "worker", "--",
				"baton", "run", "--key", "held-through-uninstall", "--", "sleep", "600")
			cmd.Env = append(os.Environ(), "KUBECONFIG="+node.Kubeconfig)
			out, _ := cmd.CombinedOutput()
			held <- result{string(out), cmd.ProcessState.ExitCode()}
		}()
		eventually(t, 30*time.Second, "the long lock held", func() error {
			if out := kubectl(t, "get", "locks", "-n", appNS); !strings.Contains(out, "held-through-uninstall") {
				return fmt.Errorf("not shown:\n%s", out)
			}
			return nil
		})
		// docs/kubernetes.md's commands, with its helm and kubectl: the
		// uninstall, then the wait for its workloads and pods to be gone,
		// so that an install right after does not meet etcd's old ones
		// (helm's own wait once returned with them still terminating).
		sh.one(t, "$ helm uninstall baton -n baton-system")
		sh.one(t, "$ kubectl -n baton-system wait --for=delete")
		if pods := kubectl(t, "get", "pods", "-n", system, "-o", "name"); pods != "" {
			t.Errorf("pods left after helm uninstall and the wait for their deletion: %s", pods)
		}
		// The Lock objects go with the release: the garbage collector
		// deletes them with their owner, the controller's ClusterRole.
		gone := time.Now()
		eventually(t, time.Minute, "no Lock objects left", func() error {
			if out := kubectl(t, "get", "locks", "-A", "-o", "name"); out != "" {
				return fmt.Errorf("left:\n%s", out)
			}
			return nil
		})
		t.Logf("the Lock objects were gone %v after helm uninstall returned", time.Since(gone).Round(time.Millisecond))
		// Once etcd's pods are gone, the lock is reported lost to its
		// owner, as the README says: baton run says so, stops its command
		// and exits 70.
		select {
		case r := <-held:
			if r.code != 70 || !strings.Contains(r.out, "lost") {
				t.Errorf("baton run holding a lock through the uninstall: exit %d, %s; want 70 and lost", r.code, r.out)
			}
		case <-time.After(2 * time.Minute):
			t.Fatal("baton run still holds its lock 2 minutes after etcd was uninstalled")
		}
		if out := kubectl(t, "get", "crd", "locks.baton.dev", "-o", "name"); !strings.Contains(out, "locks.baton.dev") {
			t.Errorf("the CRD went with the release: %q", out)
		}
		// The Secrets the controller made stay, as docs/kubernetes.md
		// says, found by the label its command to remove them uses.
		left := kubectl(t, "get", "secret", "-A", "-l", "baton.dev/etcd-credentials", "-o", "jsonpath={range .items[*]}{.metadata.namespace}/{.metadata.name} {end}")
		for _, want := range []string{system + "/" + release + "-etcd-ca", system + "/" + release + "-etcd-tls", appNS + "/baton-etcd-client"} {
			if !strings.Contains(left, want) {
				t.Errorf("Secrets labelled baton.dev/etcd-credentials after uninstall: %q; want %s among them, as docs/kubernetes.md says", left, want)
			}
		}
		// etcd's volumes and its backups' stay.
		pvcs, err := node.Client.CoreV1().PersistentVolumeClaims(system).List(ctx, metav1.ListOptions{})
		var kept []string
		if err == nil {
			for _, p := range pvcs.Items {
				kept = append(kept, p.Name)
			}
		}
		slices.Sort(kept)
		if want := []string{"backups-" + release + "-etcd-backup-0", "data-" + release + "-etcd-0", "data-" + release + "-etcd-1", "data-" + release + "-etcd-2"}; err != nil || !slices.Equal(kept, want) {
			t.Errorf("PVCs after uninstall: %v (%v), want %v kept", kept, err, want)
		}
		// No webhook: a labelled pod is created without a sidecar.
		runPodLabelled(t, appNS, "after-uninstall", map[string]string{"baton.dev/inject": "true"}, func(p *corev1.Pod) {
			if len(p.Spec.InitContainers) != 0 {
				t.Errorf("a pod created after uninstall got %d init containers", len(p.Spec.InitContainers))
			}
		})
	})

	t.Run("helm install again on the volumes left: etcd keeps its data, fences keep growing", func(t *testing.T) {
		runs := checkPhases(t, log)
		last := runs[len(runs)-1]
		start := time.Now()
		sh.one(t, "$ bin/helm install baton charts/baton")
		t.Logf("helm install --wait on the kept volumes: %v", time.Since(start).Round(time.Millisecond))
		// The app's sidecars, still running, reach the new etcd and the
		// replicas take turns again, with fences above every earlier one:
		// etcd kept its revision.
		eventually(t, 2*time.Minute, "a run after the reinstall", func() error {
			for _, r := range checkPhases(t, log) {
				if r.fence > last.fence {
					return nil
				}
			}
			return fmt.Errorf("none after fence %d", last.fence)
		})
		// The lock held through the uninstall was reported lost to its
		// holder: once etcd is back, its lease expires and it is free,
		// never handed back. A sidecar of the scope lists it no more, and
		// its Lock object, if the new mirror saw it before it expired,
		// shows it Free.
		eventually(t, time.Minute, "the lock lost in the uninstall freed", func() error {
			cmd := exec.Command(filepath.Join(root, "bin", "k8s", "kubectl"), "exec", "-n", appNS, podNames(t)[0], "-c", "worker", "--", "baton", "locks", "list")
			cmd.Env = append(os.Environ(), "KUBECONFIG="+node.Kubeconfig)
			out, err := cmd.CombinedOutput()
			if err != nil {
				return fmt.Errorf("baton locks list in the scope: %w\n%s", err, out)
			}
			if strings.Contains(string(out), "held-through-uninstall") {
				return fmt.Errorf("still listed by a sidecar of the scope:\n%s", out)
			}
			phase := kubectl(t, "get", "locks", "-n", appNS, "-l", "baton.dev/key=held-through-uninstall", "-o", "jsonpath={.items[*].status.phase}")
			if p := strings.TrimSpace(phase); p != "Free" && p != "" {
				return fmt.Errorf("phase %q", phase)
			}
			return nil
		})
		t.Logf("the first run after it and the lost lock freed %v after the install began", time.Since(start).Round(time.Millisecond))
	})

	t.Run("etcd's gRPC proxy on the node carries the sidecars' etcd traffic", func(t *testing.T) {
		kubectl(t, "scale", "deployment/report", "-n", appNS, "--replicas=0") // its sidecars' etcd is going
		etcdProxyOnANode(t, sh)
	})
}

// runPodLabelled creates a pod with labels that exits at once, hands the
// created object to check, and deletes it.
func runPodLabelled(t *testing.T, ns, name string, labels map[string]string, check func(*corev1.Pod)) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "main", Image: "docker.io/baton/app:test", ImagePullPolicy: corev1.PullNever, Command: []string{"true"}}},
		},
	}
	created, err := node.Client.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	check(created)
	_ = node.Client.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{})
}

// sidecarPID finds the process of pod's Baton sidecar on the node.
func sidecarPID(t *testing.T, pod string) int {
	t.Helper()
	pid, _ := podProcesses(t, pod)
	if pid == 0 {
		t.Fatalf("no sidecar process of pod %s", pod)
	}
	return pid
}

// app is the Deployment of 2 replicas, labelled for injection, each
// looping over a phase under baton run that appends start and end lines
// to a file on the node, as another user than the sidecar.
func app(shared string) *appsv1.Deployment {
	two := int32(2)
	labels := map[string]string{"app": "report"}
	// The shell is the container's first process: it forwards SIGTERM to
	// baton run, which stops the phase and releases the lock.
	script := fmt.Sprintf(`trap 'kill -TERM $run 2>/dev/null; wait $run; exit 0' TERM
while true; do
  baton run --key %s --owner "$POD_NAME" --wait 1m --ttl 1m -- sh -c '
    trap "echo \"term $POD_NAME $BATON_FENCE\" >> /shared/phases; exit 143" TERM
    echo "start $POD_NAME $BATON_FENCE" >> /shared/phases
    sleep %d & wait $!
    echo "end $POD_NAME $BATON_FENCE" >> /shared/phases' &
  run=$!
  wait $run || sleep 1
done`, phaseKey, int(phaseTime.Seconds()))
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "report", Namespace: appNS},
		Spec: appsv1.DeploymentSpec{
			Replicas: &two,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{
					Labels:      map[string]string{"app": "report", "baton.dev/inject": "true"},
					Annotations: map[string]string{"baton.dev/lease-ttl": leaseTTL.String()},
				},
				Spec: workerSpec(shared, script),
			},
		},
	}
}

// workerSpec is a test app's pod: its worker container runs script as
// another user than the sidecar, with POD_NAME, and the node's directory
// shared at /shared.
func workerSpec(shared, script string) corev1.PodSpec {
	user, group := int64(appUser), int64(appGroup)
	return corev1.PodSpec{
		SecurityContext: &corev1.PodSecurityContext{FSGroup: &group},
		Containers: []corev1.Container{{
			Name: "worker", Image: "docker.io/baton/app:test", ImagePullPolicy: corev1.PullNever,
			Command:         []string{"sh", "-c", script},
			Env:             []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
			SecurityContext: &corev1.SecurityContext{RunAsUser: &user, RunAsGroup: &user},
			VolumeMounts:    []corev1.VolumeMount{{Name: "shared", MountPath: "/shared"}},
		}},
		Volumes: []corev1.Volume{{Name: "shared", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: shared}}}},
	}
}

// run is one run of the phase as the shared file tells it.
type run struct {
	pod    string
	fence  int64
	ended  bool // it wrote its end line
	termed bool // its command got SIGTERM (baton run was told the lock was lost)
}

// checkPhases reads the runs of the phase and checks that they never
// overlap and that fences only grow. A run that never ends was killed (its
// pod deleted, its lock lost) and is followed by the next start; but a run
// that ends after another started overlapped it: two holders. A term line
// (the command stopped by baton run on a lost lock) is recorded whenever
// it comes: it races with the next holder's start by nature, which is what
// fencing is for.
func checkPhases(t *testing.T, path string) []run {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var runs []run
	var seen []string
	fatalf := func(format string, args ...any) {
		t.Helper()
		t.Fatalf(format+"\nthe phases so far:\n%s", append(args, strings.Join(seen, "\n"))...)
	}
	s := bufio.NewScanner(f)
	for i := 1; s.Scan(); i++ {
		seen = append(seen, s.Text())
		var what, pod string
		var fence int64
		if _, err := fmt.Sscanf(s.Text(), "%s %s %d", &what, &pod, &fence); err != nil {
			fatalf("line %d %q: %v", i, s.Text(), err)
		}
		switch what {
		case "start":
			// The one exception: the same owner (the pod) asking again for
			// a lock it still holds gets the same grant back. That happens
			// when a release cannot reach etcd (it is being uninstalled).
			if n := len(runs); n > 0 && fence == runs[n-1].fence && pod == runs[n-1].pod && runs[n-1].ended {
				runs[n-1].ended = false
				continue
			}
			if n := len(runs); n > 0 && fence <= runs[n-1].fence {
				fatalf("line %d: fence %d after %d: fences must grow", i, fence, runs[n-1].fence)
			}
			runs = append(runs, run{pod: pod, fence: fence})
		case "end":
			if n := len(runs); n == 0 || runs[n-1].ended || runs[n-1].pod != pod || runs[n-1].fence != fence {
				fatalf("line %d: %s ended its run (fence %d) after another run had started: two holders", i, pod, fence)
			}
			runs[len(runs)-1].ended = true
		case "term":
			for j := range runs {
				if runs[j].pod == pod && runs[j].fence == fence {
					runs[j].termed = true
				}
			}
		default:
			fatalf("line %d: %q", i, s.Text())
		}
	}
	return runs
}

// readmeExample applies examples/k8s/report.yaml, as the README says,
// with the node's image for busybox and a phase long enough that only
// the worker's handling of SIGTERM can end it early: kubectl get locks
// names the holder, and deleting the holder's pod (a graceful delete)
// hands the lock on well before the pod's 30s grace period is up.
func readmeExample(t *testing.T) {
	ctx := context.Background()
	b, err := os.ReadFile(filepath.Join(root, "examples", "k8s", "report.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	manifest := strings.NewReplacer("sleep 20", "sleep 120").Replace(string(b))
	file := filepath.Join(t.TempDir(), "report.yaml")
	if err := os.WriteFile(file, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	kubectl(t, "apply", "-f", file)
	defer kubectl(t, "delete", "namespace", "baton-demo", "--wait=false")
	kubectl(t, "-n", "baton-demo", "rollout", "status", "deploy/report", "--timeout=2m")

	holder := func() (pod string, fence string) {
		out := kubectl(t, "get", "locks", "-n", "baton-demo", "-o", "jsonpath={range .items[*]}{.status.phase} {.status.holder.pod} {.status.fence}{end}")
		f := strings.Fields(out)
		if len(f) != 3 || f[0] != "Held" {
			return "", ""
		}
		return f[1], f[2]
	}
	var pod, fence string
	eventually(t, time.Minute, "the report held by a replica", func() error {
		if pod, fence = holder(); pod == "" {
			return fmt.Errorf("not held")
		}
		return nil
	})
	start := time.Now()
	if err := node.Client.CoreV1().Pods("baton-demo").Delete(ctx, pod, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, "another replica holding the report", func() error {
		if p, f := holder(); p == "" || p == pod || f == fence {
			return fmt.Errorf("held by %q with fence %s", p, f)
		}
		return nil
	})
	t.Logf("deleting the holder's pod handed the lock on in %v", time.Since(start).Round(time.Millisecond))
}

// daprExample applies examples/k8s/dapr.yaml, as docs/dapr.md says: two
// replicas of a Dapr app, unchanged but for the label and annotation, call
// Dapr's lock API on daprd's port in their pod; the sidecar serves it, the
// lock is a Baton lock (kubectl get locks names the holding pod), and the
// replicas take turns.
func daprExample(t *testing.T) {
	ctx := context.Background()
	b, err := os.ReadFile(filepath.Join(root, "examples", "k8s", "dapr.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// A shorter report than the example's, so that the turns come sooner.
	manifest := strings.NewReplacer("sleep 10 # the report", "sleep 3 # the report").Replace(string(b))
	if !strings.Contains(manifest, "sleep 3 # the report") {
		t.Fatal("examples/k8s/dapr.yaml has no 'sleep 10 # the report' to shorten")
	}
	file := filepath.Join(t.TempDir(), "dapr.yaml")
	if err := os.WriteFile(file, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	kubectl(t, "apply", "-f", file)
	defer kubectl(t, "delete", "namespace", "dapr-demo", "--wait=false")
	kubectl(t, "-n", "dapr-demo", "rollout", "status", "deploy/orders", "--timeout=2m")

	pods, err := node.Client.CoreV1().Pods("dapr-demo").List(ctx, metav1.ListOptions{LabelSelector: "app=orders"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		names = append(names, p.Name)
		if len(p.Spec.InitContainers) == 0 || !slices.Equal(p.Spec.InitContainers[0].Command, []string{"/baton-dapr"}) {
			t.Errorf("pod %s: the sidecar does not run /baton-dapr: %+v", p.Name, p.Spec.InitContainers)
		}
		for _, c := range p.Spec.Containers {
			if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "DAPR_HTTP_PORT" && e.Value == "3500" }) {
				t.Errorf("pod %s container %s: no DAPR_HTTP_PORT=3500 in %v", p.Name, c.Name, c.Env)
			}
		}
	}
	eventually(t, time.Minute, "kubectl get locks names a replica holding dapr/orders/nightly-report", func() error {
		out := kubectl(t, "get", "locks", "-n", "dapr-demo", "-o", "jsonpath={range .items[*]}{.status.key} {.status.phase} {.status.holder.owner}{\"\\n\"}{end}")
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) == 3 && f[0] == "dapr/orders/nightly-report" && f[1] == "Held" && slices.Contains(names, f[2]) {
				return nil
			}
		}
		return fmt.Errorf("locks: %q; replicas %v", out, names)
	})
	// Each replica got the lock in its turn, and was refused while the
	// other had it.
	eventually(t, 90*time.Second, "both replicas held the lock and were refused it", func() error {
		for _, name := range names {
			log, err := node.Client.CoreV1().Pods("dapr-demo").GetLogs(name, &corev1.PodLogOptions{Container: "app"}).DoRaw(ctx)
			if err != nil {
				return err
			}
			if !strings.Contains(string(log), `lock: {"success":true}`) || !strings.Contains(string(log), `lock: {"success":false}`) {
				return fmt.Errorf("%s logged %q", name, log)
			}
			if !strings.Contains(string(log), `unlock: {"status":0}`) {
				return fmt.Errorf("%s never unlocked: %q", name, log)
			}
		}
		return nil
	})
}
