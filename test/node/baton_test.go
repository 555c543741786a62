package node

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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

	t.Run("helm install with the default values", func(t *testing.T) {
		start := time.Now()
		helm(t, "install", release, chart, "--namespace", system, "--create-namespace", "--wait", "--timeout", "5m")
		t.Logf("helm install --wait: %v", time.Since(start).Round(time.Millisecond))
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
	})

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
	})
}

// app is the Deployment of 2 replicas, labelled for injection, each
// looping over a phase under baton run that appends start and end lines
// to a file on the node, as another user than the sidecar.
func app(shared string) *appsv1.Deployment {
	two, user, group := int32(2), int64(appUser), int64(appGroup)
	labels := map[string]string{"app": "report"}
	script := fmt.Sprintf(`while true; do
  baton run --key %s --owner "$POD_NAME" --wait 1m --ttl 1m -- sh -c '
    echo "start $POD_NAME $BATON_FENCE" >> /shared/phases
    sleep %d
    echo "end $POD_NAME $BATON_FENCE" >> /shared/phases'
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
				Spec: corev1.PodSpec{
					SecurityContext: &corev1.PodSecurityContext{FSGroup: &group},
					Containers: []corev1.Container{{
						Name: "worker", Image: "docker.io/baton/app:test", ImagePullPolicy: corev1.PullNever,
						Command:         []string{"sh", "-c", script},
						Env:             []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
						SecurityContext: &corev1.SecurityContext{RunAsUser: &user, RunAsGroup: &user},
						VolumeMounts:    []corev1.VolumeMount{{Name: "shared", MountPath: "/shared"}},
					}},
					Volumes: []corev1.Volume{{Name: "shared", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: shared}}}},
				},
			},
		},
	}
}

// run is one run of the phase as the shared file tells it.
type run struct {
	pod   string
	fence int64
	ended bool
}

// checkPhases reads the runs of the phase and checks that they never
// overlap (each start is followed by its own end before the next start)
// and that fences only grow.
func checkPhases(t *testing.T, path string) []run {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var runs []run
	s := bufio.NewScanner(f)
	for i := 1; s.Scan(); i++ {
		var what, pod string
		var fence int64
		if _, err := fmt.Sscanf(s.Text(), "%s %s %d", &what, &pod, &fence); err != nil {
			t.Fatalf("line %d %q: %v", i, s.Text(), err)
		}
		switch what {
		case "start":
			if n := len(runs); n > 0 && !runs[n-1].ended {
				t.Fatalf("line %d: %s started the phase while %s ran it (fence %d): two holders", i, pod, runs[n-1].pod, runs[n-1].fence)
			}
			if n := len(runs); n > 0 && fence <= runs[n-1].fence {
				t.Fatalf("line %d: fence %d after %d: fences must grow", i, fence, runs[n-1].fence)
			}
			runs = append(runs, run{pod: pod, fence: fence})
		case "end":
			if n := len(runs); n == 0 || runs[n-1].ended || runs[n-1].pod != pod || runs[n-1].fence != fence {
				t.Fatalf("line %d: %s %d ended a run it did not start", i, pod, fence)
			}
			runs[len(runs)-1].ended = true
		default:
			t.Fatalf("line %d: %q", i, s.Text())
		}
	}
	return runs
}
