// Command testreport turns the events of `go test -json` into what make
// test prints, and says last what failed, in a few lines.
//
//	go test -json ./... | testreport          # go test's own output, as without -v
//	testreport -summary a.json b.json         # each failed test's errors, one test a line
//
// Without -summary it reads events from its input and writes what go test
// prints without -v: every package's ok or FAIL line, and the whole
// output of each test that failed (or never ended, as under a time-out's
// panic), its "--- FAIL" line first. Passing tests' logs are dropped.
//
// With -summary it reads the event files named and writes, for each test
// that failed with errors of its own, its name and those errors alone:
// go test marks what t.Error and t.Fatal wrote apart from what t.Log
// wrote, so the summary leaves out the logs and the dumps a test's
// cleanup prints, however long. A package that failed with no failed
// test (a build error, a panic, a time-out) gets its first lines of
// build output or its panic. make test prints the summary last, so that a
// log cut to its last lines still says which tests failed and why.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// event is one line of `go test -json` (cmd/test2json documents it).
type event struct {
	Action      string
	Package     string
	ImportPath  string
	Test        string
	Output      string
	OutputType  string
	FailedBuild string
}

func main() {
	summary := flag.Bool("summary", false, "print each failed test's errors from the event files named, one test a line")
	flag.Parse()
	var err error
	if *summary {
		err = summarize(os.Stdout, flag.Args())
	} else {
		err = render(os.Stdout, os.Stdin)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(1)
	}
}

// events calls fn with each event read from r. A line that is not an
// event (go itself failing before any test ran) becomes package output.
func events(r io.Reader, fn func(event)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Action == "" {
			e = event{Action: "output", Output: sc.Text() + "\n"}
		}
		fn(e)
	}
	return sc.Err()
}

// render writes to w what go test without -v would have printed of the
// events read from r, as they come: a test's output once it fails, the
// output of tests that never ended (a time-out's panic is among it)
// before their package's FAIL line.
func render(w io.Writer, r io.Reader) error {
	type key struct{ pkg, test string }
	held := map[key][]event{}
	var order []key
	flush := func(k key, header string) {
		if header != "" {
			fmt.Fprintln(w, header)
		}
		for _, e := range held[k] {
			if e.OutputType != "frame" || strings.Contains(e.Output, "--- FAIL") {
				fmt.Fprint(w, e.Output)
			}
		}
		delete(held, k)
	}
	unended := func(pkg string) {
		for _, k := range order {
			if _, ok := held[k]; ok && k.pkg == pkg {
				flush(k, fmt.Sprintf("--- %s did not end; what it printed:", k.test))
			}
		}
	}
	err := events(r, func(e event) {
		k := key{e.Package, e.Test}
		switch {
		case e.Action == "build-output":
			fmt.Fprint(w, e.Output)
		case e.Test == "" && e.Action == "output":
			if strings.HasPrefix(e.Output, "FAIL") {
				unended(e.Package)
			}
			fmt.Fprint(w, e.Output)
		case e.Test == "":
		case e.Action == "output":
			if _, ok := held[k]; !ok {
				order = append(order, k)
			}
			held[k] = append(held[k], e)
		case e.Action == "fail":
			// Its "--- FAIL" frame first, as go test prints it.
			evs := held[k]
			for i, o := range evs {
				if o.OutputType == "frame" && strings.Contains(o.Output, "--- FAIL") {
					held[k] = append([]event{o}, append(evs[:i:i], evs[i+1:]...)...)
					break
				}
			}
			flush(k, "")
		case e.Action == "pass" || e.Action == "skip":
			delete(held, k)
		}
	})
	for _, k := range order {
		unended(k.pkg)
	}
	return err
}

// A failure as the summary tells it.
type failure struct {
	pkg, test string
	errors    []string // what t.Error and t.Fatal wrote, line by line
}

// The summary's bounds: CI keeps the last two thousand bytes or so of a
// run's output, and the summary comes last.
const (
	maxFailures   = 5
	maxErrorLines = 3
	maxLine       = 400
	maxSummary    = 1600 // bytes of failures' lines; the first failure's header always
)

// summarize writes to w, for the event files named, each failed test's
// errors, one test a line and its errors' lines under it, within
// maxSummary bytes.
func summarize(w io.Writer, files []string) error {
	var all []failure
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			fmt.Fprintf(w, "(no events of %s: %v)\n", filepath.Base(name), err)
			continue
		}
		fs, err := failures(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		for i := range fs {
			fs[i].pkg = strings.TrimSuffix(filepath.Base(name), ".json") + ": " + fs[i].pkg
		}
		all = append(all, fs...)
	}
	left := maxSummary
	say := func(s string) bool {
		s = clip(s)
		if len(s)+1 > left {
			return false
		}
		fmt.Fprintln(w, s)
		left -= len(s) + 1
		return true
	}
	for i, f := range all {
		header := "FAIL " + f.pkg + " " + f.test
		if i == maxFailures || (i > 0 && !say(header)) {
			fmt.Fprintf(w, "... and %d more failures: see above\n", len(all)-i)
			break
		}
		if i == 0 {
			fmt.Fprintln(w, clip(header))
			left -= len(clip(header)) + 1
		}
		for j, l := range f.errors {
			if j == maxErrorLines || !say("    "+strings.TrimSpace(l)) {
				fmt.Fprintf(w, "    ... %d more lines\n", len(f.errors)-j)
				break
			}
		}
	}
	return nil
}

// failures reads events from r and returns the failed tests that wrote
// errors of their own, in the order they failed, and the packages that
// failed with tests that never ended or with none failed.
func failures(r io.Reader) ([]failure, error) {
	type key struct{ pkg, test string }
	errs := map[key][]string{}
	said := map[key][]string{} // a test's output
	var running []key
	failedTests := map[string]bool{}
	failedChild := map[key]bool{}
	output := map[string][]string{} // every line of a package's output
	build := map[string][]string{}
	started := map[string]bool{} // packages not ended yet
	var out []failure
	err := events(r, func(e event) {
		k := key{e.Package, e.Test}
		line := strings.TrimRight(e.Output, "\n")
		switch e.Action {
		case "build-output":
			build[e.ImportPath] = append(build[e.ImportPath], line)
		case "start":
			started[e.Package] = true
		case "run":
			running = append(running, k)
		case "output":
			output[e.Package] = append(output[e.Package], line)
			switch {
			case e.Test == "":
			case e.OutputType == "error" || e.OutputType == "error-continue":
				errs[k] = append(errs[k], line)
			case e.OutputType != "frame":
				said[k] = append(said[k], line)
			}
		case "pass", "skip", "fail":
			if e.Test != "" {
				running = slices.DeleteFunc(running, func(o key) bool { return o == k })
			} else {
				delete(started, e.Package)
			}
			switch {
			case e.Action != "fail":
			case e.Test != "":
				failedTests[e.Package] = true
				if i := strings.LastIndex(e.Test, "/"); i > 0 {
					failedChild[key{e.Package, e.Test[:i]}] = true
				}
				switch {
				case len(errs[k]) > 0:
					out = append(out, failure{e.Package, e.Test, errs[k]})
				case !failedChild[k]: // a panic, or t.FailNow after a log: what it said last
					out = append(out, failure{e.Package, e.Test, panicOf(said[k])})
				}
			case e.FailedBuild != "":
				lines := build[e.FailedBuild]
				if len(lines) == 0 {
					lines = output[e.Package]
				}
				out = append(out, failure{e.Package, "(build failed)", lines})
			default:
				var hung []string
				for _, o := range running {
					if o.pkg == e.Package {
						hung = append(hung, o.test)
					}
				}
				switch {
				case len(hung) > 0:
					out = append(out, failure{e.Package, "(did not end: " + strings.Join(hung, ", ") + ")", panicOf(output[e.Package])})
				case !failedTests[e.Package]:
					out = append(out, failure{e.Package, "(no test failed)", panicOf(output[e.Package])})
				}
			}
		}
	})
	for _, pkg := range slices.Sorted(maps.Keys(started)) { // go test killed
		out = append(out, failure{pkg, "(never ended)", panicOf(output[pkg])})
	}
	return out, err
}

// panicOf returns the lines of a package's output from its panic on, or
// its last lines when it has none.
func panicOf(lines []string) []string {
	for i, l := range lines {
		if strings.HasPrefix(l, "panic:") || strings.HasPrefix(l, "fatal error:") {
			return slices.DeleteFunc(slices.Clone(lines[i:]), func(l string) bool { return strings.TrimSpace(l) == "" })
		}
	}
	return lines[max(0, len(lines)-maxErrorLines):]
}

// clip cuts s to maxLine bytes.
func clip(s string) string {
	if len(s) <= maxLine {
		return s
	}
	return s[:maxLine-3] + "..."
}
