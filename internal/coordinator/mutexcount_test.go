package coordinator

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestMutexCounts runs TestMutexTakenPerOperation in the lockcount build,
// whose core mutexes count how often they are taken.
func TestMutexCounts(t *testing.T) {
	if onEtcd {
		t.Skip("counted on the in-memory store, in the run without BATON_STORE=etcd")
	}
	parallel(t)
	cmd := exec.Command("go", "test", "-tags", "lockcount", "-count=1", "-v", "-run", "^TestMutexTakenPerOperation$", ".")
	cmd.Env = append(os.Environ(), "BATON_STORE=memory")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the lockcount build's count: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "--- PASS: TestMutexTakenPerOperation") {
		t.Fatalf("the lockcount build ran no TestMutexTakenPerOperation:\n%s", out)
	}
	t.Logf("%s", out)
}
