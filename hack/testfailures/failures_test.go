// Package testfailures tests failures.awk, which make test runs over the
// logs of its go test runs to print what each failure said, last.
package testfailures

import (
	"os/exec"
	"testing"
)

func TestFailures(t *testing.T) {
	out, err := exec.Command("awk", "-f", "failures.awk", "testdata/go-test.log").CombinedOutput()
	if err != nil {
		t.Fatalf("awk: %v: %s", err, out)
	}
	want := `go-test.log: --- FAIL: TestBatonOnANode (1010.25s)
go-test.log:     --- FAIL: TestBatonOnANode/helm_uninstall (14.09s)
go-test.log:         baton_test.go:469: $ helm uninstall baton -n baton-system --cascade foreground --wait  (4.638s)
go-test.log:         baton_test.go:471: pods left after helm uninstall: pod/baton-etcd-0
go-test.log:             pod/baton-etcd-1
go-test.log:     --- FAIL: TestBatonOnANode/helm_install_again (303.78s)
go-test.log:         docblock_test.go:211: exit status 1
go-test.log:             Error: INSTALLATION FAILED
go-test.log: panic: test timed out after 20m0s
go-test.log: 	running tests:
go-test.log: 		TestHold (19m59s)
go-test.log: 
go-test.log: goroutine 1 [running]:
go-test.log: testing.(*M).startAlarm.func1()
go-test.log: FAIL	github.com/baton-dev/baton/test/node	1113.111s
go-test.log: FAIL
`
	if string(out) != want {
		t.Errorf("failures.awk printed:\n%s\nwant:\n%s", out, want)
	}
}
