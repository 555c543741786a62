package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// goTestJSON runs go test -json on testdata/failing, whose tests fail in
// each way make test meets (one hangs until go test's time-out), and
// returns its events.
func goTestJSON(t *testing.T, env ...string) []byte {
	t.Helper()
	cmd := exec.Command("go", "test", "-json", "-count=1", "-timeout", "5s", ".")
	cmd.Dir = filepath.Join("testdata", "failing")
	cmd.Env = append(append(os.Environ(), "GOWORK=off", "GOFLAGS="), env...)
	out, err := cmd.Output()
	if _, failed := errors.AsType[*exec.ExitError](err); !failed {
		t.Fatalf("go test -json on tests that fail: %v (want exit status 1)\n%s", err, out)
	}
	return out
}

func TestRenderAndSummary(t *testing.T) {
	events := goTestJSON(t, "FAILING_HANG=1")

	var rendered bytes.Buffer
	if err := render(&rendered, bytes.NewReader(events)); err != nil {
		t.Fatal(err)
	}
	got := rendered.String()
	// As go test prints it without -v: each failure's own output under its
	// "--- FAIL" line, logs of its cleanup included; nothing of the test
	// that passed; the hung test's output, panic included, before its
	// package's FAIL line.
	for _, want := range []string{
		"--- FAIL: TestLogsThenFails/sub (",
		"--- FAIL: TestLogsThenFails (",
		"    failing_test.go:17: a log before the error\n    failing_test.go:22: the parent's own error\n    failing_test.go:16: a dump of logs printed by a cleanup\n",
		"--- FAIL: TestParentOfAFailure/leaf",
		"--- TestHangs did not end; what it printed:\n    failing_test.go:48: hanging\npanic: test timed out after 5s\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("rendered output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "never shown") || strings.Contains(got, "=== RUN") || strings.Contains(got, "--- SKIP") {
		t.Errorf("rendered output shows a passing test or go test's framing:\n%s", got)
	}
	if hung, fail := strings.Index(got, "did not end"), strings.LastIndex(got, "FAIL\texample.com/failing"); hung < 0 || fail < hung {
		t.Errorf("the hung test's output is not before the package's FAIL line:\n%s", got)
	}

	file := filepath.Join(t.TempDir(), "unit.json")
	if err := os.WriteFile(file, events, 0o600); err != nil {
		t.Fatal(err)
	}
	var summary bytes.Buffer
	if err := summarize(&summary, []string{file}); err != nil {
		t.Fatal(err)
	}
	// Each test's errors alone, not its logs; a parent that failed only
	// through its subtest is not named; the time-out names the test.
	want := `FAIL unit: example.com/failing TestLogsThenFails/sub
    failing_test.go:20: the subtest's error
    and its second line
FAIL unit: example.com/failing TestLogsThenFails
    failing_test.go:22: the parent's own error
FAIL unit: example.com/failing TestParentOfAFailure/leaf
    failing_test.go:27: only the leaf fails
FAIL unit: example.com/failing TestFailNowAfterALog
    failing_test.go:32: the reason, logged
FAIL unit: example.com/failing (did not end: TestHangs)
    panic: test timed out after 5s
    running tests:
    TestHangs (5s)
`
	if got := summary.String(); !strings.HasPrefix(got, want) {
		t.Errorf("summary:\n%s\nwant it to begin with:\n%s", got, want)
	}
}

// A test that panics writes no error, and ends its package: the summary
// names it with its panic.
func TestSummaryOfAPanic(t *testing.T) {
	file := filepath.Join(t.TempDir(), "panic.json")
	if err := os.WriteFile(file, goTestJSON(t, "FAILING_PANIC=1", "FAILING_HANG="), 0o600); err != nil {
		t.Fatal(err)
	}
	var summary bytes.Buffer
	if err := summarize(&summary, []string{file, filepath.Join(t.TempDir(), "missing.json")}); err != nil {
		t.Fatal(err)
	}
	got := summary.String()
	for _, want := range []string{
		"FAIL panic: example.com/failing TestPanics\n    panic: assignment to entry in nil map",
		"(no events of missing.json: ",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("summary:\n%s\nlacks %q", got, want)
		}
	}
}

// A go test killed before its package ended: named, with its last lines.
func TestSummaryOfARunKilled(t *testing.T) {
	events := `{"Action":"start","Package":"p"}
{"Action":"run","Package":"p","Test":"TestLong"}
{"Action":"output","Package":"p","Test":"TestLong","Output":"    long_test.go:9: step 3\n"}
`
	fs, err := failures(strings.NewReader(events))
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) != 1 || fs[0].test != "(never ended)" || len(fs[0].errors) == 0 || !strings.Contains(fs[0].errors[len(fs[0].errors)-1], "step 3") {
		t.Errorf("failures of a run killed: %+v", fs)
	}
}

func TestSummaryOfABuildFailure(t *testing.T) {
	// What go test -json says of a package that does not compile.
	events := `{"ImportPath":"example.com/broken [example.com/broken.test]","Action":"build-output","Output":"# example.com/broken [example.com/broken.test]\n"}
{"ImportPath":"example.com/broken [example.com/broken.test]","Action":"build-output","Output":"./broken_test.go:3:1: syntax error: non-declaration statement outside function body\n"}
{"ImportPath":"example.com/broken [example.com/broken.test]","Action":"build-fail"}
{"Action":"start","Package":"example.com/broken"}
{"Action":"output","Package":"example.com/broken","Output":"FAIL\texample.com/broken [build failed]\n"}
{"Action":"fail","Package":"example.com/broken","Elapsed":0,"FailedBuild":"example.com/broken [example.com/broken.test]"}
`
	fs, err := failures(strings.NewReader(events))
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) != 1 || fs[0].test != "(build failed)" || len(fs[0].errors) != 2 || !strings.Contains(fs[0].errors[1], "syntax error") {
		t.Errorf("failures of a build failure: %+v", fs)
	}
	var rendered bytes.Buffer
	if err := render(&rendered, strings.NewReader(events)); err != nil {
		t.Fatal(err)
	}
	if got := rendered.String(); !strings.Contains(got, "syntax error") || !strings.Contains(got, "[build failed]") {
		t.Errorf("rendered build failure:\n%s", got)
	}
}

func TestSummaryIsBounded(t *testing.T) {
	var events strings.Builder
	for i := range 12 {
		name := "TestN" + strings.Repeat("x", i)
		for range 6 {
			events.WriteString(`{"Action":"output","Package":"p","Test":"` + name + `","Output":"    a_test.go:1: ` + strings.Repeat("y", 400) + `\n","OutputType":"error"}` + "\n")
		}
		events.WriteString(`{"Action":"fail","Package":"p","Test":"` + name + `"}` + "\n")
	}
	file := filepath.Join(t.TempDir(), "many.json")
	if err := os.WriteFile(file, []byte(events.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	var summary bytes.Buffer
	if err := summarize(&summary, []string{file}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(summary.String(), "\n"), "\n")
	// Past the errors' budget, a failure says how many lines it had.
	if limit := maxSummary + (maxFailures+1)*len("    ... 6 more lines\n"); summary.Len() > limit {
		t.Errorf("the summary of 12 failures of 6 lines each has %d bytes, over %d:\n%s", summary.Len(), limit, summary.String())
	}
	if len(lines) < 1+maxErrorLines || !strings.HasPrefix(lines[0], "FAIL many: p TestN") || !strings.Contains(lines[maxErrorLines], "yyy") {
		t.Errorf("the first failure does not show its %d first lines:\n%s", maxErrorLines, summary.String())
	}
	for _, l := range lines {
		if len(l) > maxLine {
			t.Errorf("a line of %d bytes, over %d", len(l), maxLine)
		}
	}
	if last := lines[len(lines)-1]; !regexp.MustCompile(`^\.\.\. and \d+ more failures: see above$`).MatchString(last) {
		t.Errorf("last line %q", last)
	}
}

// TestSummaryShowsALoneFailureWhole: a failure's error line of a few
// hundred bytes (a test's own diagnosis) is not cut.
func TestSummaryShowsALoneFailureWhole(t *testing.T) {
	long := "a_test.go:9: not disarmed; the controller said last: " + strings.Repeat("z", 300)
	file := filepath.Join(t.TempDir(), "one.json")
	if err := os.WriteFile(file, []byte(`{"Action":"output","Package":"p","Test":"TestOne","Output":"    `+long+`\n","OutputType":"error"}`+"\n"+
		`{"Action":"fail","Package":"p","Test":"TestOne"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var summary bytes.Buffer
	if err := summarize(&summary, []string{file}); err != nil {
		t.Fatal(err)
	}
	if want := "FAIL one: p TestOne\n    " + long + "\n"; summary.String() != want {
		t.Errorf("summary:\n%s\nwant:\n%s", summary.String(), want)
	}
}
