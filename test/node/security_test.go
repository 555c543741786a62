package node

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/baton-dev/baton/internal/pki"
)

// etcdImage is the chart's etcd image, which carries etcdctl.
const etcdImage = "gcr.io/etcd-development/etcd:v3.7.3"

// etcdIsABoundary: the chart's etcd, secured by the controller, refuses
// a plaintext client and one without a certificate, and a namespace's
// credentials (the Secret the controller put there for its sidecars)
// read and write that namespace's locks only: checked with etcdctl from a
// pod of the namespace, as an attacker in it would.
func etcdIsABoundary(t *testing.T) {
	ctx := context.Background()
	s, err := node.Client.CoreV1().Secrets(appNS).Get(ctx, "baton-etcd-client", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the namespace's etcd credentials: %v", err)
	}
	if c, err := pki.ParseCert(s.Data["tls.crt"]); err != nil || c.Subject.CommonName != "baton-scope-"+appNS {
		t.Fatalf("the namespace's certificate: %v %+v", err, c)
	}
	etcd := fmt.Sprintf("%s-etcd.%s.svc:2379", release, system)
	creds := []string{"--cacert=/creds/ca.crt", "--cert=/creds/tls.crt", "--key=/creds/tls.key"}
	other := "/baton/v1/team-b/locks/"
	for _, tt := range []struct {
		name string
		args []string
		ok   bool
		says string // in the output of a refusal
	}{
		{"plaintext", []string{"--endpoints=http://" + etcd, "get", "/baton/", "--prefix"}, false, ""},
		{"no-certificate", []string{"--endpoints=https://" + etcd, "--cacert=/creds/ca.crt", "get", "/baton/", "--prefix"}, false, ""},
		{"read-another-namespace", append(append([]string{"--endpoints=https://" + etcd}, creds...), "get", other, "--prefix"), false, "permission denied"},
		{"write-another-namespace", append(append([]string{"--endpoints=https://" + etcd}, creds...), "put", other+"job/1", "x"), false, "permission denied"},
		{"write-its-own-policy", append(append([]string{"--endpoints=https://" + etcd}, creds...), "put", "/baton/v1/"+appNS+"/policy", "{}"), false, "permission denied"},
		{"read-its-own-locks", append(append([]string{"--endpoints=https://" + etcd}, creds...), "get", "/baton/v1/"+appNS+"/locks/", "--prefix", "--keys-only"), true, ""},
	} {
		code, out := runEtcdctl(t, "etcdctl-"+tt.name, tt.args)
		if (code == 0) != tt.ok || !strings.Contains(out, tt.says) {
			t.Errorf("etcdctl %s: exit %d, %q; want success %v saying %q", tt.name, code, out, tt.ok, tt.says)
		}
	}
}

// runEtcdctl runs etcdctl with args in a pod of the app's namespace that
// mounts the namespace's etcd credentials at /creds, and returns its exit
// code and what it printed.
func runEtcdctl(t *testing.T, name string, args []string) (int, string) {
	t.Helper()
	return runEtcdctlIn(t, appNS, "baton-etcd-client", name, args)
}

// runEtcdctlIn runs etcdctl with args in a pod of namespace ns that mounts
// the Secret secret at /creds, and returns its exit code and what it
// printed.
func runEtcdctlIn(t *testing.T, ns, secret, name string, args []string) (int, string) {
	t.Helper()
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "etcdctl", Image: etcdImage, ImagePullPolicy: corev1.PullNever,
				Command:                  append([]string{"etcdctl", "--dial-timeout=3s", "--command-timeout=5s"}, args...),
				TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
				VolumeMounts:             []corev1.VolumeMount{{Name: "creds", MountPath: "/creds", ReadOnly: true}},
			}},
			Volumes: []corev1.Volume{{Name: "creds", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: secret}}}},
		},
	}
	if _, err := node.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer node.Client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{})
	var term *corev1.ContainerStateTerminated
	eventually(t, time.Minute, name+" done", func() error {
		p, err := node.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range p.Status.ContainerStatuses {
			if term = c.State.Terminated; term != nil {
				return nil
			}
		}
		return fmt.Errorf("phase %s", p.Status.Phase)
	})
	if term.ExitCode == 0 {
		// A success's output is in its log only.
		out, err := node.Client.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{Container: "etcdctl"}).DoRaw(ctx)
		if err != nil {
			t.Fatalf("the log of %s: %v", name, err)
		}
		return 0, string(out)
	}
	return int(term.ExitCode), term.Message
}

// certificatesRotate: with certificates valid for 90s, renewed every
// minute, a lock held through two replacements of etcd's certificate and
// of the namespace's (the shortened validity's, then a renewal) stays held and ends as its owner ends it; the app's
// replicas keep taking turns; a new sidecar starts on the renewed
// credentials; the mirror keeps showing locks.
func certificatesRotate(t *testing.T, chart, phases string) {
	ctx := context.Background()
	serials := func() (server, client string) {
		for _, x := range []struct {
			ns, name string
			into     *string
		}{{system, release + "-etcd-tls", &server}, {appNS, "baton-etcd-client", &client}} {
			s, err := node.Client.CoreV1().Secrets(x.ns).Get(ctx, x.name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			c, err := pki.ParseCert(s.Data["tls.crt"])
			if err != nil {
				t.Fatal(err)
			}
			*x.into = c.SerialNumber.String()
		}
		return server, client
	}
	server0, client0 := serials()
	helm(t, "upgrade", release, chart, "--namespace", system, "--reuse-values", "--set", "etcd.certValidity=90s", "--wait", "--timeout", "5m")
	defer helm(t, "upgrade", release, chart, "--namespace", system, "--reuse-values", "--set", "etcd.certValidity=720h", "--wait", "--timeout", "5m")

	kubectl(t, "scale", "deployment/report", "-n", appNS, "--replicas=2")
	kubectl(t, "-n", appNS, "rollout", "status", "deploy/report", "--timeout=2m")
	// A lock held through the rotations: its command ends by itself.
	pods, err := node.Client.CoreV1().Pods(appNS).List(ctx, metav1.ListOptions{LabelSelector: "app=report"})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("the app's pods: %v", err)
	}
	held := make(chan string, 1)
	go func() {
		cmd := exec.Command(filepath.Join(root, "bin", "k8s", "kubectl"), "exec", "-n", appNS, pods.Items[0].Name, "-c", "worker", "--",
			"baton", "run", "--key", "held-through-rotation", "--", "sleep", "100")
		cmd.Env = append(os.Environ(), "KUBECONFIG="+node.Kubeconfig)
		out, _ := cmd.CombinedOutput()
		held <- fmt.Sprintf("exit %d: %s", cmd.ProcessState.ExitCode(), out)
	}()
	eventually(t, 30*time.Second, "the lock held through the rotations", func() error {
		if out := kubectl(t, "get", "locks", "-n", appNS, "-l", "baton.dev/key=held-through-rotation", "-o", "jsonpath={.items[*].status.phase}"); out != "Held" {
			return fmt.Errorf("phase %q", out)
		}
		return nil
	})
	// The shortened validity replaced both at once; then a renewal, a
	// minute later, while the lock is held.
	seen := map[string]bool{}
	start := time.Now()
	eventually(t, 100*time.Second, "etcd's and the namespace's certificates renewed", func() error {
		s, c := serials()
		seen["s"+s], seen["c"+c] = true, true
		servers, clients := 0, 0
		for k := range seen {
			if k[0] == 's' && k != "s"+server0 {
				servers++
			} else if k[0] == 'c' && k != "c"+client0 {
				clients++
			}
		}
		if servers < 2 || clients < 2 {
			return fmt.Errorf("%d server and %d client certificates since the upgrade", servers, clients)
		}
		return nil
	})
	t.Logf("both certificates renewed %v after the lock was taken", time.Since(start).Round(time.Second))
	select {
	case out := <-held:
		t.Fatalf("the run holding a lock through the rotations ended before they did: %s", out)
	default:
	}
	// Replicas still take turns, a new sidecar starts on the renewed
	// credentials, and the mirror shows its lock.
	before := len(checkPhases(t, phases))
	if err := node.Client.CoreV1().Pods(appNS).Delete(ctx, pods.Items[len(pods.Items)-1].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "more runs after the rotations", func() error {
		if n := len(checkPhases(t, phases)); n < before+2 {
			return fmt.Errorf("%d runs, %d before", n, before)
		}
		return nil
	})
	kubectl(t, "-n", appNS, "rollout", "status", "deploy/report", "--timeout=2m")
	select {
	case out := <-held:
		if !strings.HasPrefix(out, "exit 0:") {
			t.Errorf("the run that held its lock through the rotations: %s; want exit 0", out)
		}
	case <-time.After(3 * time.Minute):
		t.Fatal("the run holding its lock through the rotations did not end")
	}
	// The mirror, on its renewed certificate, saw the release.
	eventually(t, 30*time.Second, "the mirror showing the lock freed", func() error {
		if out := kubectl(t, "get", "locks", "-n", appNS, "-l", "baton.dev/key=held-through-rotation", "-o", "jsonpath={.items[*].status.phase}"); out != "Free" {
			return fmt.Errorf("phase %q", out)
		}
		return nil
	})
}

// lockPolicyOnANode: a LockPolicy applied with kubectl reaches the app's
// running sidecars within seconds: a key outside its rules is refused
// (baton run exits 77, forbidden, naming the policy, and the sidecar's log
// names the pod's ServiceAccount), force release over the socket too, the
// phase it allows goes on; deleted, the default is back.
func lockPolicyOnANode(t *testing.T) {
	ctx := context.Background()
	policy := `apiVersion: baton.dev/v1alpha1
kind: LockPolicy
metadata:
  name: report-only
  namespace: ` + appNS + `
spec:
  rules:
  - serviceAccounts: [default]
    keys: [nightly/]
`
	file := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(file, []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	pods, err := node.Client.CoreV1().Pods(appNS).List(ctx, metav1.ListOptions{LabelSelector: "app=report"})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("the app's pods: %v", err)
	}
	pod := pods.Items[0].Name
	batonIn := func(args ...string) (int, string) {
		cmd := exec.Command(filepath.Join(root, "bin", "k8s", "kubectl"), append([]string{"exec", "-n", appNS, pod, "-c", "worker", "--", "baton"}, args...)...)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+node.Kubeconfig)
		out, _ := cmd.CombinedOutput()
		return cmd.ProcessState.ExitCode(), string(out)
	}
	kubectl(t, "apply", "-f", file)
	start := time.Now()
	eventually(t, 30*time.Second, "the policy in force in the running sidecar", func() error {
		if code, out := batonIn("run", "--key", "adhoc/job", "--", "sleep", "0"); code != 77 || !strings.Contains(out, "report-only") {
			return fmt.Errorf("exit %d: %s", code, out)
		}
		return nil
	})
	t.Logf("the LockPolicy was in force in a running pod %v after kubectl apply", time.Since(start).Round(time.Millisecond))
	if code, out := batonIn("locks", "release", phaseKey, "--force"); code == 0 || !strings.Contains(out, "forbidden") {
		t.Errorf("force release outside the policy: exit %d, %s", code, out)
	}
	if out := kubectl(t, "get", "lockpolicies", "-n", appNS); !strings.Contains(out, "report-only   True") {
		t.Errorf("kubectl get lockpolicies:\n%s", out)
	}
	if out := kubectl(t, "logs", "-n", appNS, pod, "-c", "baton"); !strings.Contains(out, "audit: call refused by the lock policy") || !strings.Contains(out, `"serviceAccount":"default"`) {
		t.Errorf("the sidecar's log has no audit line naming the pod's ServiceAccount:\n%s", out)
	}
	kubectl(t, "delete", "-f", file)
	eventually(t, 30*time.Second, "the default back", func() error {
		if code, out := batonIn("run", "--key", "adhoc/job", "--", "sleep", "0"); code != 0 {
			return fmt.Errorf("exit %d: %s", code, out)
		}
		return nil
	})
}
