package node

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// logsOnFailure prints, when t fails, the logs of the app pods' sidecars
// and of the controller since now: what a lost session or a maintenance
// pass did, which the kubelet deletes with the pods.
func logsOnFailure(t *testing.T, pods []string) {
	since := time.Now()
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		s := "--since-time=" + since.UTC().Format(time.RFC3339)
		for _, p := range pods {
			t.Logf("==== the sidecar of %s:\n%s", p, kubectlOut("logs", "-n", appNS, p, "-c", "baton", s))
		}
		for _, c := range []string{"controller", "etcd"} {
			t.Logf("==== the %s:\n%s", c, kubectlOut("logs", "-n", system, "-l", "app.kubernetes.io/component="+c, "--all-containers", "--prefix", "--tail=-1", s))
		}
	})
}

// maintenanceSaid returns the last thing the controller's etcd
// maintenance logged, clipped for a failure's message (CI shows little).
func maintenanceSaid() string {
	said := "nothing"
	for _, l := range strings.Split(kubectlOut("logs", "-n", system, "-l", "app.kubernetes.io/component=controller", "--tail=1000"), "\n") {
		if i := strings.Index(l, "etcd maintenance"); i >= 0 {
			said = l[i:]
		}
	}
	if len(said) > 300 {
		said = said[:300] + "..."
	}
	return said
}

// kubectlOut runs kubectl against the node and returns what it printed,
// its error included.
func kubectlOut(args ...string) string {
	cmd := exec.Command(filepath.Join(root, "bin", "k8s", "kubectl"), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+node.Kubeconfig)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Sprintf("%s(%v)", out, err)
	}
	return string(out)
}
