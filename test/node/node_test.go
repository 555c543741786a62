// Package node runs Baton on a real one-node Kubernetes (package kubenode)
// that make cluster starts, as the README shows: the chart installed by
// helm with its default values, injected pods that take turns at a phase,
// crashes, force release, upgrades; then make cluster-down leaves the host
// as it was.
package node

import (
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/baton-dev/baton/internal/testing/kubenode"
)

const root = "../.."

// cluster is the node under test, started as a person starts one: by
// make cluster, which the README shows.
type cluster struct {
	// Kubeconfig is the administrator's kubeconfig make cluster printed.
	Kubeconfig string
	// Client is a client with that identity.
	Client kubernetes.Interface
	dir    string // NODE_DIR
}

// logs writes the tail of every log of the node for a failed test: make
// cluster's own and each process's.
func (c *cluster) logs(w io.Writer) {
	fmt.Fprintf(w, "==== make cluster's process (%s.log)\n", c.dir)
	b, _ := os.ReadFile(c.dir + ".log")
	w.Write(b)
	kubenode.PrintLogs(w, filepath.Join(c.dir, "logs"), 40)
	for _, what := range []string{"pods", "events"} {
		cmd := exec.Command(filepath.Join(root, "bin", "k8s", "kubectl"), "get", what, "-A", "-o", "wide", "--sort-by", ".metadata.creationTimestamp")
		cmd.Env = append(os.Environ(), "KUBECONFIG="+c.Kubeconfig)
		out, err := cmd.CombinedOutput()
		fmt.Fprintf(w, "==== kubectl get %s -A (%v)\n%s", what, err, out)
	}
}

var (
	node       *cluster
	skipReason string
)

// runMake runs a target of the project's Makefile with NODE_DIR set, as a
// fresh make (not a sub-make of the make test that runs this test).
func runMake(nodeDir string, args ...string) (string, error) {
	cmd := exec.Command("make", append([]string{"-C", root, "--no-print-directory", "NODE_DIR=" + nodeDir}, args...)...)
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); name != "MAKEFLAGS" && name != "MFLAGS" && name != "MAKELEVEL" {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "baton-node")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	nodeDir := filepath.Join(dir, "node")
	code := runNode(m, nodeDir)
	if code == 0 {
		os.RemoveAll(dir)
	} else {
		fmt.Fprintf(os.Stderr, "the node's logs are kept in %s\n", filepath.Join(nodeDir, "logs"))
	}
	os.Exit(code)
}

// runNode starts the node with make cluster, runs the tests and stops the node
// with make cluster-down, which must leave the host as it was.
func runNode(m *testing.M, nodeDir string) int {
	sysctls := kubenode.HostSettings()
	start := time.Now()
	var err error
	node, err = startCluster(nodeDir)
	if err != nil {
		if os.Getenv("CI") == "true" {
			fmt.Fprintln(os.Stderr, "node tests:", err)
			return 1
		}
		skipReason = err.Error()
		return m.Run()
	}
	fmt.Fprintf(os.Stderr, "make cluster: node Ready with DNS in %v (logs in %s)\n", time.Since(start).Round(time.Millisecond), filepath.Join(nodeDir, "logs"))
	// go test's -timeout panics without a word of the node and without
	// what follows m.Run: the node would go on running, on a machine that
	// runs the tests again. Shortly before it, print the node's logs and
	// stop it.
	if d := testTimeout(); d > 3*time.Minute {
		before := time.AfterFunc(d-2*time.Minute, func() {
			fmt.Fprintf(os.Stderr, "the node's tests are 2 minutes from go test's -timeout %v: the node's logs, then make cluster-down\n", d)
			node.logs(os.Stderr)
			out, err := runMake(nodeDir, "cluster-down")
			fmt.Fprintf(os.Stderr, "make cluster-down: %v\n%s", err, out)
		})
		defer before.Stop()
	}
	code := m.Run()
	if code != 0 {
		node.logs(os.Stderr)
	}
	if out, err := runMake(nodeDir, "cluster-down"); err != nil || !strings.Contains(out, "node stopped") {
		fmt.Fprintf(os.Stderr, "make cluster-down: %v\n%s", err, out)
		return 1
	}
	if !leftNothing(nodeDir, sysctls) {
		code = 1
	}
	if code == 0 && !killedHalfWay(nodeDir, sysctls) {
		code = 1
	}
	return code
}

// testTimeout is go test's -timeout (0: none), whose clock starts with
// m.Run.
func testTimeout() time.Duration {
	if !flag.Parsed() {
		flag.Parse()
	}
	f := flag.Lookup("test.timeout")
	if f == nil {
		return 0
	}
	d, _ := f.Value.(flag.Getter).Get().(time.Duration)
	return d
}

// leftNothing reports whether the host is as it was before the node in
// nodeDir (settings as before), saying what is left on it if not.
func leftNothing(nodeDir string, before map[string]string) bool {
	// Processes killed a moment ago may still be on their way out.
	left := kubenode.Leftovers(nodeDir)
	for deadline := time.Now().Add(10 * time.Second); len(left) > 0 && time.Now().Before(deadline); left = kubenode.Leftovers(nodeDir) {
		time.Sleep(200 * time.Millisecond)
	}
	ok := true
	if len(left) > 0 {
		fmt.Fprintf(os.Stderr, "make cluster-down left on the host:\n  %s\n", strings.Join(left, "\n  "))
		ok = false
	}
	if after := kubenode.HostSettings(); !maps.Equal(after, before) {
		fmt.Fprintf(os.Stderr, "make cluster-down left the host's settings %v; they were %v\n", after, before)
		ok = false
	}
	return ok
}

// killedHalfWay kills make cluster's node with SIGKILL once it is Ready
// with pods running (CoreDNS), as a crash or a cancelled CI job would:
// a make cluster after it starts a node all the same, and make
// cluster-down then leaves the host as it was before either.
func killedHalfWay(nodeDir string, before map[string]string) bool {
	if _, err := startCluster(nodeDir); err != nil {
		fmt.Fprintln(os.Stderr, "the node to kill:", err)
		return false
	}
	pid, err := os.ReadFile(nodeDir + ".pid")
	if err == nil {
		err = exec.Command("kill", "-9", strings.TrimSpace(string(pid))).Run()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kill make cluster's node:", err)
		return false
	}
	start := time.Now()
	c, err := startCluster(nodeDir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "make cluster after a node killed half-way:", err)
		return false
	}
	fmt.Fprintf(os.Stderr, "make cluster after a node killed half-way: Ready in %v\n", time.Since(start).Round(time.Millisecond))
	// A kubectl of its own: this process's clients cache the transport,
	// with the killed node's CA, of a kubeconfig naming the same files.
	kc := exec.Command(filepath.Join(root, "bin", "k8s", "kubectl"), "--kubeconfig", c.Kubeconfig, "get", "namespace", "default", "-o", "name")
	if out, err := kc.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "namespace/default" {
		fmt.Fprintf(os.Stderr, "the node started after a killed one does not answer: %v: %s\n", err, out)
		runMake(nodeDir, "cluster-down")
		return false
	}
	if out, err := runMake(nodeDir, "cluster-down"); err != nil || !strings.Contains(out, "node stopped") {
		fmt.Fprintf(os.Stderr, "make cluster-down: %v\n%s", err, out)
		return false
	}
	return leftNothing(nodeDir, before)
}

// startCluster runs make cluster with the node's state in nodeDir and
// checks what it prints: its last line points kubectl at the node.
func startCluster(nodeDir string) (*cluster, error) {
	out, err := runMake(nodeDir, "cluster")
	c := &cluster{dir: nodeDir}
	if err != nil {
		runMake(nodeDir, "cluster-down") // a node that never got Ready
		return nil, fmt.Errorf("make cluster: %w\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	last := lines[len(lines)-1]
	want := "export KUBECONFIG=" + filepath.Join(nodeDir, "admin.kubeconfig")
	if last != want {
		runMake(nodeDir, "cluster-down")
		return nil, fmt.Errorf("make cluster's last line: %q, want %q", last, want)
	}
	c.Kubeconfig = strings.TrimPrefix(last, "export KUBECONFIG=")
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err == nil {
		c.Client, err = kubernetes.NewForConfig(cfg)
	}
	if err != nil {
		runMake(nodeDir, "cluster-down")
		return nil, err
	}
	return c, nil
}

func needNode(t *testing.T) {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
}

// runPod runs a pod of the app image with command to completion and
// returns its log.
func runPod(t *testing.T, ns, name string, command ...string) string {
	t.Helper()
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{{Name: "main", Image: "docker.io/baton/app:test", ImagePullPolicy: corev1.PullNever, Command: command}},
		},
	}
	if _, err := node.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		p, err := node.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			log, _ := node.Client.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
			if p.Status.Phase == corev1.PodFailed {
				t.Fatalf("pod %s failed: %s", name, log)
			}
			return string(log)
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s still %s after a minute: %+v", name, p.Status.Phase, p.Status.ContainerStatuses)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestClusterDNS: Service names resolve in pods, as in every cluster.
func TestClusterDNS(t *testing.T) {
	needNode(t)
	out := runPod(t, "default", "dns", "nslookup", "kubernetes.default.svc.cluster.local")
	if want := "10.96.0.1"; !strings.Contains(out, want) {
		t.Errorf("nslookup kubernetes.default: %s, want %s", out, want)
	}
	// The pods' logs are the node's, kept with it when a test fails.
	if logs, _ := filepath.Glob(filepath.Join(node.dir, "pod-logs", "default_dns_*")); len(logs) == 0 {
		t.Errorf("no log of pod dns under %s", filepath.Join(node.dir, "pod-logs"))
	}
}
