// Package node runs Baton on a real one-node Kubernetes (package kubenode):
// the chart installed by helm with its default values, injected pods that
// take turns at a phase, crashes, force release, upgrades.
package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/baton-dev/baton/internal/kubenode"
)

const root = "../.."

var (
	node       *kubenode.Node
	skipReason string
)

func TestMain(m *testing.M) {
	code := func() int {
		dir, err := os.MkdirTemp("", "baton-node")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		images := os.Getenv("BATON_IMAGES")
		if images == "" {
			images = filepath.Join(root, "bin", "images")
		}
		images, _ = filepath.Abs(images)
		bin, _ := filepath.Abs(filepath.Join(root, "bin", "k8s"))
		var tarballs []string
		for _, name := range []string{"pause", "coredns", "baton", "etcd", "app"} {
			tarballs = append(tarballs, filepath.Join(images, name+".tar"))
		}
		start := time.Now()
		node, err = kubenode.Start(context.Background(), kubenode.Config{Dir: dir, Bin: bin, Images: tarballs,
			PauseImage: "docker.io/baton/pause:local", DNSImage: "docker.io/baton/coredns:local"})
		if err != nil {
			if node != nil {
				node.PrintLogs(os.Stderr, 40)
			}
			if os.Getenv("CI") == "true" {
				fmt.Fprintln(os.Stderr, "node tests:", err)
				return 1
			}
			skipReason = err.Error()
			return m.Run()
		}
		fmt.Fprintf(os.Stderr, "node Ready with DNS in %v (logs in %s)\n", time.Since(start).Round(time.Millisecond), node.LogDir())
		defer node.Stop()
		code := m.Run()
		if code != 0 {
			node.PrintLogs(os.Stderr, 40)
		}
		return code
	}()
	os.Exit(code)
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
}
