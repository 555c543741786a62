// Package failing holds the tests that testreport's tests run with
// go test -json: one of each kind of failure make test meets.
package failing

import (
	"os"
	"testing"
	"time"
)

func TestPasses(t *testing.T) {
	t.Log("a passing test's log, never shown")
}

func TestLogsThenFails(t *testing.T) {
	t.Cleanup(func() { t.Log("a dump of logs printed by a cleanup") })
	t.Log("a log before the error")
	t.Run("sub", func(t *testing.T) {
		t.Log("the subtest's log")
		t.Errorf("the subtest's error\nand its second line")
	})
	t.Fatal("the parent's own error")
}

func TestParentOfAFailure(t *testing.T) {
	t.Run("leaf", func(t *testing.T) {
		t.Error("only the leaf fails")
	})
}

func TestFailNowAfterALog(t *testing.T) {
	t.Log("the reason, logged")
	t.FailNow()
}

func TestPanics(t *testing.T) {
	if os.Getenv("FAILING_PANIC") == "" {
		t.Skip("set FAILING_PANIC to panic")
	}
	var m map[string]int
	m["x"]++
}

func TestHangs(t *testing.T) {
	if os.Getenv("FAILING_HANG") == "" {
		t.Skip("set FAILING_HANG to hang until the time-out")
	}
	t.Log("hanging")
	time.Sleep(time.Minute)
}
