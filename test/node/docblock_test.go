package node

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The page whose shell blocks the node runs as written.
const kubePage = "docs/kubernetes.md"

// docStep is one command of a shell block and the output the page shows
// after it.
type docStep struct {
	command string
	shown   string
}

// pageBlocks reads the shell blocks of page, each as its lines without
// the indent of its fence (a block in a list is indented).
func pageBlocks(t *testing.T, page string) [][]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, page))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	var blocks [][]string
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != "```sh" {
			continue
		}
		indent := lines[i][:strings.Index(lines[i], "```")]
		var block []string
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			block = append(block, strings.TrimPrefix(lines[i], indent))
		}
		blocks = append(blocks, block)
	}
	return blocks
}

// stepsOf cuts a block into its commands ("$ " lines, with their "\"
// continuations) and the output shown after each.
func stepsOf(t *testing.T, block []string) []docStep {
	t.Helper()
	var steps []docStep
	for j := 0; j < len(block); j++ {
		l := block[j]
		if !strings.HasPrefix(l, "$ ") {
			if len(steps) == 0 {
				t.Fatalf("%s: a block shows output before any command: %q", kubePage, l)
			}
			steps[len(steps)-1].shown += l + "\n"
			continue
		}
		cmd := strings.TrimPrefix(l, "$ ")
		for strings.HasSuffix(cmd, "\\") && j+1 < len(block) {
			j++
			cmd += "\n" + block[j]
		}
		steps = append(steps, docStep{command: cmd})
	}
	return steps
}

// blockSteps returns the steps of the shell block of page that holds a
// line starting with first.
func blockSteps(t *testing.T, page, first string) []docStep {
	t.Helper()
	for _, block := range pageBlocks(t, page) {
		if slices.ContainsFunc(block, func(l string) bool { return strings.HasPrefix(l, first) }) {
			return stepsOf(t, block)
		}
	}
	t.Fatalf("%s has no shell block with the line %q", page, first)
	return nil
}

// docShell runs the commands of the docs as a person does, in one
// working directory that stands for the repository's root (bin, charts,
// config and examples are the repository's), with KUBECONFIG set to the
// node's: exports carry over to the commands after them, a command ending
// in & runs on in the background until the test ends, and a command that
// follows (-f) is stopped once it has printed what the page shows.
type docShell struct {
	dir     string
	exports []string
	bg      []*exec.Cmd
}

// newDocShell makes the working directory; the background commands are
// stopped when t ends.
func newDocShell(t *testing.T) *docShell {
	t.Helper()
	dir := t.TempDir()
	abs, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"bin", "charts", "config", "examples"} {
		if err := os.Symlink(filepath.Join(abs, d), filepath.Join(dir, d)); err != nil {
			t.Fatal(err)
		}
	}
	s := &docShell{dir: dir}
	t.Cleanup(s.stop)
	return s
}

// check compares what a command printed with what the page shows, by the
// parts that do not change between runs.
type check func(shown, got string) error

// run runs the block of kubePage holding the line first, each command as
// written. Every command must succeed. A command the page shows output for
// must have a check in checks, keyed by the start of the command; a
// kubectl get or logs command is run again until its check passes, for up
// to two minutes, since what it shows comes about on its own time. A
// command run in the background may have a check too, given what it
// printed so far and whatever else it looks at, which must pass before the
// next command runs.
func (s *docShell) run(t *testing.T, first string, checks map[string]check) {
	t.Helper()
	s.runPage(t, kubePage, first, checks)
}

// runPage is run on the shell blocks of page.
func (s *docShell) runPage(t *testing.T, page, first string, checks map[string]check) {
	t.Helper()
	used := map[string]bool{}
	for _, st := range blockSteps(t, page, first) {
		var c check
		for prefix, f := range checks {
			if strings.HasPrefix(st.command, prefix) {
				c, used[prefix] = f, true
			}
		}
		if st.shown != "" && c == nil {
			t.Fatalf("%s shows output for %q: the test needs a check for it", page, st.command)
		}
		s.step(t, st, c)
	}
	for prefix := range checks {
		if !used[prefix] {
			t.Fatalf("a check for %q, which no command of the block starts with", prefix)
		}
	}
}

// one runs the single command of kubePage whose line starts with first,
// and nothing else of its block; it must show no output.
func (s *docShell) one(t *testing.T, first string) {
	t.Helper()
	for _, block := range pageBlocks(t, kubePage) {
		for _, st := range stepsOf(t, block) {
			if strings.HasPrefix("$ "+st.command, first) {
				if st.shown != "" {
					t.Fatalf("%s shows output for %q: run its block", kubePage, st.command)
				}
				s.step(t, st, nil)
				return
			}
		}
	}
	t.Fatalf("%s shows no command %q", kubePage, first)
}

func (s *docShell) step(t *testing.T, st docStep, c check) {
	t.Helper()
	start := time.Now()
	switch {
	case strings.HasPrefix(st.command, "export "):
		s.exports = append(s.exports, st.command)
	case strings.HasSuffix(strings.TrimSpace(stripComment(st.command)), "&"):
		cmd := s.script(strings.TrimSuffix(strings.TrimSpace(stripComment(st.command)), "&"))
		logf, err := os.Create(filepath.Join(s.dir, fmt.Sprintf("bg-%d.log", len(s.bg))))
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		logf.Close()
		s.bg = append(s.bg, cmd)
		// A person waits to see a command in the background under way
		// before typing the next; c says what that is.
		if c != nil {
			n := len(s.bg) - 1
			eventually(t, 2*time.Minute, st.command+" under way", func() error { return c("", s.background(n)) })
		}
	case strings.Contains(st.command, " -f") && strings.HasPrefix(st.command, "kubectl logs"):
		s.follow(t, st, c)
	default:
		retry := strings.HasPrefix(st.command, "kubectl get") || strings.HasPrefix(st.command, "kubectl logs")
		eventually(t, 2*time.Minute, st.command, func() error {
			out, err := s.output(st.command)
			if err != nil {
				if !retry {
					t.Fatalf("%s's %q: %v\n%s", kubePage, st.command, err, out)
				}
				return err
			}
			if c != nil {
				if err := c(st.shown, out); err != nil {
					if !retry {
						t.Fatalf("%s's %q printed\n%s\nwhere the page shows\n%s%v", kubePage, st.command, out, st.shown, err)
					}
					return fmt.Errorf("%w; it printed\n%s", err, out)
				}
			}
			return nil
		})
	}
	t.Logf("$ %s  (%v)", st.command, time.Since(start).Round(time.Millisecond))
}

// follow runs a command that never ends by itself until its output passes
// c, then stops it.
func (s *docShell) follow(t *testing.T, st docStep, c check) {
	t.Helper()
	eventually(t, 2*time.Minute, st.command, func() error {
		cmd := s.script(st.command)
		var out, errb syncBuffer // only what it prints on stdout is compared
		cmd.Stdout, cmd.Stderr = &out, &errb
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		defer func() {
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}()
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case err := <-done:
				done <- err
				return fmt.Errorf("ended (exit %d) before it printed what the page shows:\n%s%s", cmd.ProcessState.ExitCode(), out.String(), errb.String())
			case <-ctx.Done():
				return fmt.Errorf("not within 90s; it printed\n%s", out.String())
			case <-tick.C:
				if c(st.shown, out.String()) == nil {
					return nil
				}
			}
		}
	})
}

// script is bash running line after the exports, in its own process group.
func (s *docShell) script(line string) *exec.Cmd {
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", strings.Join(append(append([]string{}, s.exports...), line), "\n"))
	cmd.Dir = s.dir
	cmd.Env = append(os.Environ(), "KUBECONFIG="+node.Kubeconfig, "PWD="+s.dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd
}

func (s *docShell) output(line string) (string, error) {
	cmd := s.script(line)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		return out.String() + errb.String(), err
	}
	return out.String(), nil
}

// background returns what the n-th background command printed so far.
func (s *docShell) background(n int) string {
	b, _ := os.ReadFile(filepath.Join(s.dir, fmt.Sprintf("bg-%d.log", n)))
	return string(b)
}

// stop ends the background commands, each with its process group,
// SIGTERM first, as a person's Ctrl-C would.
func (s *docShell) stop() {
	for i := len(s.bg) - 1; i >= 0; i-- {
		cmd := s.bg[i]
		syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	}
	s.bg = nil
}

// stripComment drops a trailing "# ..." comment of a command line.
func stripComment(cmd string) string {
	if i := strings.Index(cmd, "  #"); i >= 0 {
		return cmd[:i]
	}
	return cmd
}

// table compares kubectl's tables: the same header, and for each row
// shown one row printed with the same values in the columns named, and as
// many rows as shown.
func table(columns ...string) check {
	return func(shown, got string) error {
		want, have := rows(shown), rows(got)
		if len(want) == 0 || len(have) == 0 || strings.Join(want[0], " ") != strings.Join(have[0], " ") {
			return fmt.Errorf("a header other than the page's")
		}
		if len(have) != len(want) {
			return fmt.Errorf("%d rows, the page shows %d", len(have)-1, len(want)-1)
		}
		idx := map[string]int{}
		for i, h := range want[0] {
			idx[h] = i
		}
		for _, w := range want[1:] {
			found := false
			for _, h := range have[1:] {
				same := true
				for _, c := range columns {
					i, ok := idx[c]
					if !ok {
						return fmt.Errorf("no column %s in the page's header", c)
					}
					if cell(w, i) != cell(h, i) {
						same = false
					}
				}
				found = found || same
			}
			if !found {
				return fmt.Errorf("no row like the page's %v in the columns %v", w, columns)
			}
		}
		return nil
	}
}

// rows splits a table into its cells. Empty cells are placed by the
// header's column starts.
func rows(text string) [][]string {
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	if len(lines) == 0 || lines[0] == "" {
		return nil
	}
	header := lines[0]
	starts := []int{}
	for i := range header {
		if header[i] != ' ' && (i == 0 || header[i-1] == ' ') {
			starts = append(starts, i)
		}
	}
	var out [][]string
	for _, l := range lines {
		var r []string
		for k, st := range starts {
			end := len(l)
			if k+1 < len(starts) && starts[k+1] < end {
				end = starts[k+1]
			}
			if st >= len(l) {
				r = append(r, "")
				continue
			}
			r = append(r, strings.TrimSpace(l[st:end]))
		}
		out = append(out, r)
	}
	return out
}

func cell(r []string, i int) string {
	if i < len(r) {
		return r[i]
	}
	return ""
}

// linesLike says that at least as many lines as the page shows were
// printed, and that each line shown and printed matches one of res.
func linesLike(res ...*regexp.Regexp) check {
	match := func(l string) bool {
		for _, re := range res {
			if re.MatchString(l) {
				return true
			}
		}
		return false
	}
	return func(shown, got string) error {
		want := strings.Split(strings.TrimRight(shown, "\n"), "\n")
		have := strings.Split(strings.TrimRight(got, "\n"), "\n")
		for _, l := range want {
			if !match(l) {
				return fmt.Errorf("the page's line %q matches none of the test's patterns", l)
			}
		}
		n := 0
		for _, l := range have {
			if l == "" {
				continue
			}
			if !match(l) {
				return fmt.Errorf("printed %q", l)
			}
			n++
		}
		if n < len(want) {
			return fmt.Errorf("%d lines, the page shows %d", n, len(want))
		}
		return nil
	}
}

// exactly says that the command printed what the page shows.
func exactly(shown, got string) error {
	if strings.TrimSpace(shown) != strings.TrimSpace(got) {
		return fmt.Errorf("printed %q", got)
	}
	return nil
}

// inline runs, as written, the inline command (in backquotes, perhaps
// broken over lines) of kubePage that starts with prefix.
func (s *docShell) inline(t *testing.T, prefix string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, kubePage))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(strings.Fields(string(b)), " ")
	i := strings.Index(text, "`"+prefix)
	if i < 0 {
		t.Fatalf("%s shows no command `%s…`", kubePage, prefix)
	}
	line, _, _ := strings.Cut(text[i+1:], "`")
	out, err := s.output(line)
	if err != nil {
		t.Fatalf("%s's %q: %v\n%s", kubePage, line, err, out)
	}
	t.Logf("$ %s", line)
	return out
}

// reportLine is a line of examples/k8s/report.yaml's workers, as kubectl
// logs --prefix prints it.
var reportLine = regexp.MustCompile(`^\[pod/report-[a-z0-9]+-[a-z0-9]+/worker\] (\d\d:\d\d:\d\d report-[a-z0-9]+-[a-z0-9]+ (runs the nightly report|done)|baton: waiting for nightly-report: [12] ahead)$`)

// syncBuffer is a bytes.Buffer that a command writes while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// printed is a check of a command in the background: it printed want.
func printed(want string) check {
	return func(_, got string) error {
		if !strings.Contains(got, want) {
			return fmt.Errorf("it printed %q, not yet %q", got, want)
		}
		return nil
	}
}
