package alerts

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/baton-dev/baton/internal/testing/kubetest"
)

// batonBin is the sidecar binary built once for the run: the Prometheus
// test scrapes real sidecar processes.
var batonBin string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "baton-alerts-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	batonBin = filepath.Join(dir, "baton")
	if out, err := exec.Command("go", "build", "-o", batonBin, "github.com/baton-dev/baton/cmd/sidecar").CombinedOutput(); err != nil {
		kubetest.Unavailable("go build of the sidecar", fmt.Errorf("%w\n%s", err, out))
		batonBin = ""
	}
	return m.Run()
}
