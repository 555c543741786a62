package main

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// docCommand is one command of a block and the lines the doc shows it
// print.
type docCommand struct {
	cmd       string
	shown     []string
	interrupt bool // the doc shows ^C after it: the reader stops it
	// then is what the doc says the last background command prints once
	// this command ran ("# ...and the queued caller gets {...}").
	then []string
}

// thenShown finds what a "# ...and X gets {json}" comment shows a
// background command print.
var thenShown = regexp.MustCompile(`^# \.\.\.and .* gets (\{.*\})`)

// commandsOf splits a block into its commands: "$ " lines, and scripts
// with no prompt as one command.
func commandsOf(text string) []docCommand {
	if !strings.Contains(text, "$ ") {
		return []docCommand{{cmd: strings.TrimSpace(text)}}
	}
	var cmds []docCommand
	for _, l := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(l, "$ "):
			cmds = append(cmds, docCommand{cmd: strings.TrimPrefix(l, "$ ")})
		case len(cmds) > 0 && thenShown.MatchString(l):
			cmds[len(cmds)-1].then = []string{thenShown.FindStringSubmatch(l)[1]}
		case len(cmds) == 0, strings.TrimSpace(l) == "", strings.HasPrefix(l, "# "):
		case strings.HasPrefix(l, "^C"):
			cmds[len(cmds)-1].interrupt = true
		default:
			cmds[len(cmds)-1].shown = append(cmds[len(cmds)-1].shown, l)
		}
	}
	return cmds
}

// standIns are the programs the docs run under a lock.
var standIns = []string{"report.sh", "run-phase.sh", "pipeline.sh", "serve-report.sh", "rebuild-catalog.sh", "batch.sh", "migrate.sh"}

// sandbox is where a session runs: a directory like the repository's root
// (bin/baton, and baton on PATH), with a sidecar serving ./baton.sock, and
// the programs the docs run under a lock (./report.sh and friends) as
// stand-ins that say they ran.
type sandbox struct {
	dir, sock string
	env       []string
	c         *http.Client
	etcd      string // the embedded etcd's client URL
}

func newSandbox(t *testing.T) *sandbox {
	t.Helper()
	dir, err := os.MkdirTemp("", "bd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Mkdir(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(binary(t), filepath.Join(dir, "bin", "baton")); err != nil {
		t.Fatal(err)
	}
	for _, script := range standIns {
		// Silent, as the docs show them; each leaves a mark saying it ran
		// under its lock.
		body := "#!/bin/sh\necho \"$BATON_KEY $BATON_FENCE\" > .ran-" + script + "\n"
		if err := os.WriteFile(filepath.Join(dir, script), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	pol := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(pol, []byte(allowForce), 0o600); err != nil {
		t.Fatal(err)
	}
	etcd := "http://" + freePort(t)
	sb := &sandbox{dir: dir, sock: filepath.Join(dir, "baton.sock"), etcd: etcd}
	// The pod the docs' outputs show.
	serveInProcessEnv(t, env(map[string]string{"POD_NAME": "api-7f9c"}), "--socket", sb.sock, "--data-dir", filepath.Join(dir, ".baton", "etcd"),
		"--embedded-client-url", etcd, "--health-addr", "", "--policy-file", pol)
	sb.c = unixClient(sb.sock)
	k8s, _ := filepath.Abs("../../bin/k8s") // etcdctl, as make puts it
	sb.env = append(os.Environ(), "BATON_SOCKET="+sb.sock,
		"PATH="+filepath.Join(dir, "bin")+":"+k8s+":"+os.Getenv("PATH"), "ETCDCTL_ENDPOINTS="+etcd)
	return sb
}

// do calls the sidecar, failing the test on any status but 200.
func (sb *sandbox) do(t *testing.T, method, path, body string) string {
	t.Helper()
	code, got := do(t, sb.c, method, path, body)
	if code != 200 {
		t.Fatalf("%s %s: %d %s", method, path, code, got)
	}
	return got
}

// start starts script with bash in the sandbox, in a process group of its
// own (a signal to -pid reaches what it started), what it prints in out.
func (sb *sandbox) start(t *testing.T, script string) (*exec.Cmd, *syncBuffer) {
	t.Helper()
	c := exec.Command("bash", "-c", script)
	c.Dir, c.Env = sb.dir, sb.env
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out := &syncBuffer{}
	c.Stdout, c.Stderr = out, out
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	return c, out
}

// run runs cmd in the sandbox with bash after the assignments of the
// session so far, until it ends (or, with lines > 0, until it printed
// that many lines, when it is interrupted), calling during once it printed
// its first line. It returns what it printed and its exit status.
func (sb *sandbox) run(t *testing.T, vars []string, cmd string, lines int, during func()) (string, int) {
	t.Helper()
	c, out := sb.start(t, strings.Join(append(slices.Clone(vars), cmd), "\n"))
	exited := make(chan struct{})
	go func() { c.Wait(); close(exited) }()
	deadline := time.After(60 * time.Second)
	called := during == nil
	for {
		n := strings.Count(out.String(), "\n")
		if !called && n > 0 {
			called = true
			during()
		}
		if lines > 0 && n >= lines {
			syscall.Kill(-c.Process.Pid, syscall.SIGINT) // ^C
			<-exited
			return out.String(), c.ProcessState.ExitCode()
		}
		select {
		case <-exited:
			return out.String(), c.ProcessState.ExitCode()
		case <-deadline:
			syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
			<-exited
			t.Fatalf("%q: still running after 60s; printed:\n%s", cmd, out.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// sameShape compares what a command printed with what the doc shows it
// print, line by line, by what does not change from run to run: a JSON
// line's fields and the values of the fields that tell the outcome; a
// table's header and each row's key and holder; in other text, the words
// without digits (times, fences, revisions and ids differ), with pods
// left out.
func sameShape(shown []string, got string) error {
	lines := strings.Split(strings.TrimRight(got, "\n"), "\n")
	if !slices.Contains(shown, "") { // a doc's block shows no blank line
		lines = slices.DeleteFunc(lines, func(l string) bool { return l == "" })
	}
	if len(shown) == 0 {
		return nil
	}
	if len(lines) != len(shown) {
		return fmt.Errorf("printed %d lines, the doc shows %d", len(lines), len(shown))
	}
	field := regexp.MustCompile(`"(\w+)":`)
	outcome := regexp.MustCompile(`"(granted|code|event|held|released|success|owner)":("[^"]*"|true|false)`)
	for i, want := range shown {
		line := lines[i]
		switch {
		case strings.HasPrefix(want, "{"):
			for _, m := range field.FindAllStringSubmatch(want, -1) {
				if !strings.Contains(line, `"`+m[1]+`":`) {
					return fmt.Errorf("line %d %s has no field %q, which the doc shows", i+1, line, m[1])
				}
			}
			for _, m := range outcome.FindAllString(want, -1) {
				if !strings.Contains(line, m) {
					return fmt.Errorf("line %d %s lacks %s, which the doc shows", i+1, line, m)
				}
			}
		case strings.HasPrefix(want, "KEY "):
			if strings.Join(strings.Fields(want), " ") != strings.Join(strings.Fields(line), " ") {
				return fmt.Errorf("header %q, the doc shows %q", line, want)
			}
		default:
			if w, g := skeleton(want), skeleton(line); w != g {
				return fmt.Errorf("line %d %q, the doc shows %q (compared as %q and %q)", i+1, line, want, g, w)
			}
		}
	}
	return nil
}

// skeleton is a line without what changes from run to run: words with
// digits, pods, quoted ids.
func skeleton(line string) string {
	line = regexp.MustCompile(`\(pod [^)]*\)|\bpod \S+`).ReplaceAllString(line, "")
	var words []string
	for _, w := range strings.Fields(line) {
		if !strings.ContainsAny(w, "0123456789") {
			words = append(words, w)
		}
	}
	return strings.Join(words, " ")
}

// docSessions are what some blocks need around them: the locks held
// before (the state the doc's output shows), and what others do while a
// command runs (the doc shows its effect). Keyed by a docRunners entry.
var docSessions = map[string]struct {
	before func(t *testing.T, sb *sandbox)
	during map[string]func(t *testing.T, sb *sandbox) // by command
}{
	`{"event":"queued","key":"chat-42"`: {
		before: func(t *testing.T, sb *sandbox) { sb.do(t, "POST", "/v1/locks/chat-42", `{"owner":"turn-6"}`) },
		during: map[string]func(t *testing.T, sb *sandbox){
			`curl -sN --unix-socket ./baton.sock -X POST http://baton/v1/locks/chat-42:hold -d '{"owner":"turn-7","wait":"1m"}'`: func(t *testing.T, sb *sandbox) {
				sb.do(t, "DELETE", "/v1/locks/chat-42?owner=turn-6", "")
			},
		},
	},
	"$ curl -sN --unix-socket ./baton.sock http://baton/v1/locks/leader:watch": {
		before: func(t *testing.T, sb *sandbox) { sb.do(t, "POST", "/v1/locks/leader", `{"owner":"replica-1"}`) },
		during: map[string]func(t *testing.T, sb *sandbox){"curl -sN --unix-socket ./baton.sock http://baton/v1/locks/leader:watch": handOver},
	},
	"$ baton locks watch leader --socket ./baton.sock": {
		before: func(t *testing.T, sb *sandbox) { sb.do(t, "POST", "/v1/locks/leader", `{"owner":"replica-1"}`) },
		during: map[string]func(t *testing.T, sb *sandbox){"baton locks watch leader --socket ./baton.sock": handOver},
	},
	"$ baton locks list --socket ./baton.sock": {
		before: func(t *testing.T, sb *sandbox) {
			sb.do(t, "POST", "/v1/locks/nightly-report", `{"owner":"exec-9","ttl":"5m"}`)
			// Taken by curl, which has exited since; its waiter is curl too,
			// waiting: the status shows their processes.
			if out, code := sb.run(t, nil, `curl -s --unix-socket ./baton.sock -X POST http://baton/v1/locks/terraform-prod -d '{"owner":"execution-abc123","ttl":"10m"}'`, 0, nil); code != 0 {
				t.Fatalf("curl: exit %d, %s", code, out)
			}
			bg := sb.background(t, `curl -sN --unix-socket ./baton.sock -X POST http://baton/v1/locks/terraform-prod:hold -d '{"owner":"execution-def456","wait":"10m"}'`)
			t.Cleanup(func() { syscall.Kill(-bg.c.Process.Pid, syscall.SIGKILL); <-bg.exited })
			waitUntil(t, 10*time.Second, "execution-def456 waiting", func() bool {
				return strings.Contains(sb.do(t, "GET", "/v1/locks/terraform-prod", ""), `"queued_here":[{"owner":"execution-def456"`)
			})
		},
	},
	"etcdctl lock /baton/v1/default/locks/terraform-prod": {
		// etcdctl lock waits while Baton holds the lock, then holds it
		// against Baton's callers, who hear of a client that is not Baton.
		before: func(t *testing.T, sb *sandbox) {
			sb.do(t, "POST", "/v1/locks/terraform-prod", `{"owner":"execution-abc123"}`)
		},
		during: map[string]func(t *testing.T, sb *sandbox){},
	},
}

// handOver releases the leader held by replica-1 and grants it to
// replica-2, as the watch blocks show.
func handOver(t *testing.T, sb *sandbox) {
	time.Sleep(200 * time.Millisecond) // after the state and synced lines
	sb.do(t, "DELETE", "/v1/locks/leader?owner=replica-1", "")
	sb.do(t, "POST", "/v1/locks/leader", `{"owner":"replica-2"}`)
}

// TestDocSessions runs the shell blocks of README.md and docs/ that
// docRunners gives to "session", each against a sidecar of its own, as
// written: every command must exit 0 and print what the doc shows (in
// shape: sameShape). A command that the doc shows interrupted (^C), or
// that follows locks, is stopped once it printed what the doc shows.
func TestDocSessions(t *testing.T) {
	for _, b := range docBlocks(t) {
		key, runner, _ := runnerOf(b)
		if runner != "session" {
			continue
		}
		t.Run(b.String(), func(t *testing.T) {
			sb := newSandbox(t)
			sess := docSessions[key]
			if sess.before != nil {
				sess.before(t, sb)
			}
			if key == "etcdctl lock /baton/v1/default/locks/terraform-prod" {
				etcdctlLock(t, sb, b.text)
				return
			}
			var vars []string
			var background []*backgrounded
			defer func() {
				for _, bg := range background {
					syscall.Kill(-bg.c.Process.Pid, syscall.SIGKILL)
					<-bg.exited
				}
			}()
			for _, c := range commandsOf(b.text) {
				if regexp.MustCompile(`^\w+=\S`).MatchString(c.cmd) && !strings.Contains(c.cmd, " ") || regexp.MustCompile(`^\w+="[^"]*"$`).MatchString(c.cmd) {
					vars = append(vars, c.cmd)
					continue
				}
				if strings.HasSuffix(strings.TrimSpace(strings.Split(c.cmd, "#")[0]), "&") {
					background = append(background, sb.background(t, strings.Join(append(slices.Clone(vars), c.cmd, "wait"), "\n")))
					waitUntil(t, 10*time.Second, "the background command queued", func() bool {
						return strings.Contains(sb.do(t, "GET", "/v1/locks?prefix=", ""), `"waiters":1`)
					})
					continue
				}
				lines := 0
				if c.interrupt || strings.Contains(c.cmd, ":watch") || strings.Contains(c.cmd, "locks watch") {
					lines = len(c.shown)
				}
				var during func()
				if f := sess.during[c.cmd]; f != nil {
					during = func() { f(t, sb) }
				}
				out, code := sb.run(t, vars, c.cmd, lines, during)
				if code != 0 && lines == 0 {
					t.Errorf("%q: exit %d; printed:\n%s", c.cmd, code, out)
				}
				if lines > 0 { // stopped once it printed what the doc shows
					out = strings.Join(strings.SplitAfter(out, "\n")[:lines], "")
				}
				for _, s := range standIns {
					if !strings.Contains(c.cmd, "./"+s) {
						continue
					}
					mark, err := os.ReadFile(filepath.Join(sb.dir, ".ran-"+s))
					switch done := strings.Contains(out, "is already done"); {
					case done && err == nil:
						t.Errorf("%q: ./%s ran although it was done already", c.cmd, s)
					case !done && (err != nil || !regexp.MustCompile(`^\S+ [1-9][0-9]*\n$`).Match(mark)):
						t.Errorf("%q: ./%s did not run under a lock with a fence (%q, %v)", c.cmd, s, mark, err)
					}
					os.Remove(filepath.Join(sb.dir, ".ran-"+s))
				}
				if err := sameShape(c.shown, out); err != nil {
					t.Errorf("%q: %v; printed:\n%s\nthe doc shows:\n%s", c.cmd, err, out, strings.Join(c.shown, "\n"))
				}
				if c.then != nil {
					checkThen(t, c, out, background)
				}
			}
		})
	}
}

// backgrounded is a command the doc runs with "&".
type backgrounded struct {
	c      *exec.Cmd
	out    *syncBuffer
	exited chan struct{}
}

// background starts script in the sandbox without waiting for it.
func (sb *sandbox) background(t *testing.T, script string) *backgrounded {
	c, out := sb.start(t, script)
	bg := &backgrounded{c: c, out: out, exited: make(chan struct{})}
	go func() { c.Wait(); close(bg.exited) }()
	return bg
}

// checkThen checks what the doc says the last background command prints
// once c ran (c printed out): it ends within 10 s, printing what the doc
// shows, with a fence larger than any c printed.
func checkThen(t *testing.T, c docCommand, out string, background []*backgrounded) {
	t.Helper()
	if len(background) == 0 {
		t.Fatalf("%q: the doc shows a background command's answer, and none runs", c.cmd)
	}
	bg := background[len(background)-1]
	select {
	case <-bg.exited:
	case <-time.After(10 * time.Second):
		t.Fatalf("%q: the background command did not end within 10s; printed:\n%s", c.cmd, bg.out.String())
	}
	got := bg.out.String()
	if err := sameShape(c.then, got); err != nil {
		t.Errorf("after %q, the background command: %v; printed:\n%s\nthe doc shows:\n%s", c.cmd, err, got, c.then[0])
	}
	fence := regexp.MustCompile(`"fence":(\d+)`)
	before, after := fence.FindStringSubmatch(out), fence.FindStringSubmatch(got)
	if before == nil || after == nil || len(after[1]) < len(before[1]) || len(after[1]) == len(before[1]) && after[1] <= before[1] {
		t.Errorf("after %q (%s), the background command's fence is not larger: %s", c.cmd, strings.TrimSpace(out), strings.TrimSpace(got))
	}
}

// etcdctlLock runs the design doc's etcdctl lock as written, while Baton
// holds the lock: it waits; once Baton's holder releases, it holds the
// lock (printing its key), and a Baton caller is refused, told of a
// client that is not Baton.
func etcdctlLock(t *testing.T, sb *sandbox, block string) {
	t.Helper()
	c, out := sb.start(t, strings.TrimSpace(block))
	defer func() {
		syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
		c.Wait()
	}()
	time.Sleep(time.Second)
	if out.String() != "" {
		t.Fatalf("etcdctl lock printed %q while Baton held the lock; want it waiting", out.String())
	}
	sb.do(t, "DELETE", "/v1/locks/terraform-prod?owner=execution-abc123", "")
	waitUntil(t, 10*time.Second, "etcdctl lock holding", func() bool {
		return strings.Contains(out.String(), "/baton/v1/default/locks/terraform-prod/")
	})
	code, body := do(t, sb.c, "POST", "/v1/locks/terraform-prod", `{"owner":"execution-def456"}`)
	if code != 409 || !strings.Contains(body, "a client that is not Baton") {
		t.Errorf("a Baton caller while etcdctl lock holds: %d %s; want 409 naming a client that is not Baton", code, body)
	}
}
