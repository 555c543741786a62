package coordinator

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependencies: the lock engine's core depends on neither etcd, nor
// Kubernetes, nor HTTP, even indirectly: etcd is behind lockstore.Store,
// the socket API and the controller are built on the core.
func TestDependencies(t *testing.T) {
	parallel(t)
	for _, pkg := range []string{".", "../lockstore", "../keyspace"} {
		out, err := exec.Command("go", "list", "-deps", pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		for _, dep := range strings.Fields(string(out)) {
			for _, banned := range []string{"go.etcd.io/", "k8s.io/", "sigs.k8s.io/", "net/http", "google.golang.org/grpc"} {
				if strings.HasPrefix(dep, banned) {
					t.Errorf("%s depends on %s", pkg, dep)
				}
			}
		}
	}
}
