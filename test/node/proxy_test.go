package node

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The namespace of the example run through the proxy.
const proxyDemo = "relay-demo"

// etcdProxyOnANode uninstalls the default release and removes what it
// leaves, then installs the chart with etcd.proxy on (its own etcd without
// TLS, as the chart allows it), both with docs/kubernetes.md's commands as
// written, and runs the README's example through it: the sidecars reach
// etcd through the proxy on their node, which carries their leases'
// keep-alives, their watches and their transactions, and the controller,
// which reaches etcd itself, shows their locks.
func etcdProxyOnANode(t *testing.T, sh *docShell) {
	ctx := context.Background()
	sh.run(t, "$ helm uninstall baton -n baton-system", nil)
	start := time.Now()
	sh.run(t, "$ kubectl -n baton-system get daemonset baton-etcd-proxy", nil)
	defer helm(t, "uninstall", release, "--namespace", system, "--wait", "--timeout", "2m")
	for _, what := range []string{"daemonset/" + release + "-etcd-proxy", "statefulset/" + release + "-etcd", "deployment/" + release + "-controller"} {
		kubectl(t, "-n", system, "rollout", "status", what, "--timeout=5m")
	}
	t.Logf("helm install with etcd.proxy, until its proxy, etcd and controller were ready: %v", time.Since(start).Round(time.Millisecond))

	b, err := os.ReadFile(filepath.Join(root, "examples", "k8s", "report.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// Shorter turns than the example's, in a namespace of its own.
	manifest := strings.NewReplacer("sleep 20", "sleep 2",
		"baton-demo", proxyDemo).Replace(string(b))
	file := filepath.Join(t.TempDir(), "report.yaml")
	if err := os.WriteFile(file, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	kubectl(t, "apply", "-f", file)
	defer kubectl(t, "delete", "namespace", proxyDemo, "--wait=false")
	kubectl(t, "-n", proxyDemo, "rollout", "status", "deploy/report", "--timeout=2m")

	const endpoint = "--etcd-endpoints=http://" + release + "-etcd-proxy." + system + ".svc:23790"
	pods, err := node.Client.CoreV1().Pods(proxyDemo).List(ctx, metav1.ListOptions{LabelSelector: "app=report"})
	if err != nil {
		t.Fatal(err)
	}
	replicas := 0
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		replicas++
		i := slices.IndexFunc(p.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == "baton" })
		if i < 0 || !slices.Contains(p.Spec.InitContainers[i].Args, endpoint) {
			t.Errorf("pod %s: its sidecar is not pointed at its node's proxy (%s): %+v", p.Name, endpoint, p.Spec.InitContainers)
		}
	}

	// The replicas take turns; the controller, on etcd itself, sees each
	// holder that the sidecars wrote through the proxy.
	holders := map[string]bool{}
	eventually(t, 90*time.Second, "kubectl get locks naming two replicas in turn", func() error {
		out := kubectl(t, "get", "locks", "-n", proxyDemo, "-o", "jsonpath={range .items[*]}{.status.phase} {.status.holder.pod}{\"\\n\"}{end}")
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) == 2 && f[0] == "Held" {
				holders[f[1]] = true
			}
		}
		if len(holders) < 2 {
			return fmt.Errorf("holders so far %v", holders)
		}
		return nil
	})

	// The proxy served every sidecar's lease keep-alive stream, its
	// watches and its transactions.
	proxies, err := node.Client.CoreV1().Pods(system).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=etcd-proxy"})
	if err != nil || len(proxies.Items) != 1 {
		t.Fatalf("proxy pods on the node: %v (%v), want one", len(proxies.Items), err)
	}
	metrics := kubectl(t, "get", "--raw", fmt.Sprintf("/api/v1/namespaces/%s/pods/%s:23790/proxy/proxy/metrics", system, proxies.Items[0].Name))
	counts := map[string]int{}
	for method, atLeast := range map[string]int{"LeaseKeepAlive": replicas, "Watch": replicas, "Txn": replicas} {
		if counts[method] = started(metrics, method); counts[method] < atLeast {
			t.Errorf("the proxy started %d %s calls, want at least %d (one per sidecar)", counts[method], method, atLeast)
		}
	}
	t.Logf("the proxy carried %d replicas' %d keep-alive streams, %d watch streams and %d transactions; holders %v",
		replicas, counts["LeaseKeepAlive"], counts["Watch"], counts["Txn"], holders)

	// The example's three replicas, at its pods' lease TTL
	// (baton.dev/lease-ttl).
	var running []string
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			running = append(running, p.Name)
		}
	}
	if len(running) < 3 {
		t.Fatalf("running replicas %v, want three", running)
	}
	releaseThroughProxy(t, running, 15*time.Second)
}

// started sums grpc_server_started_total of method in a Prometheus text
// exposition.
func started(metrics, method string) int {
	n := 0
	s := bufio.NewScanner(strings.NewReader(metrics))
	for s.Scan() {
		l := s.Text()
		if !strings.HasPrefix(l, "grpc_server_started_total{") || !strings.Contains(l, `grpc_method="`+method+`"`) {
			continue
		}
		f := strings.Fields(l)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			n += int(v)
		}
	}
	return n
}
