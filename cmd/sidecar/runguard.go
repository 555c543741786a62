package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/baton-dev/baton/internal/proctree"
)

// baton run starts its command through a second process of its own, the
// guard, so that no process the command starts outlives the lock:
//
//	baton run ──► baton run-guard ──► the command ──► whatever it starts
//	(holds the    (subreaper of the     (dies with the
//	 lock)         command's tree)       guard: SIGKILL)
//
// Both are child subreapers (proctree), so a process of the command's whose
// parent exits (a daemon that forked twice, a worker a script left behind)
// is reparented to the guard, or to baton run once the guard is gone, and
// stays within reach. baton run tells the guard, over a pipe, which
// signals to pass on and when to stop the tree; when baton run dies (kill
// -9, the OOM killer), the pipe's end tells the guard, which stops the tree
// at once. When the guard dies, the command gets SIGKILL from the kernel
// (its parent-death signal) and baton run stops whatever the command
// started. The command's exit ends nothing by itself: whatever it left
// running is stopped too before the lock is released.
//
// Stopping a tree is SIGTERM to every process in it, then SIGKILL to those
// left after --kill-grace. While that runs, the lock is still held or held
// back: baton run releases it only once the tree is gone, and a lock that
// ends any other way (baton run killed, the sidecar stopped, the lease
// lost) is held back from everyone by its lock delay, which baton run asks
// to be at least --kill-grace plus a second.

// guardStop is the control byte that tells the guard to stop the tree; any
// other byte is a signal number to pass on to the command.
const guardStop = 0

// newRunGuardCmd is the guard's command, which baton run alone starts.
func newRunGuardCmd(stderr io.Writer) *cobra.Command {
	var grace time.Duration
	cmd := &cobra.Command{
		Use:    "run-guard --kill-grace D -- COMMAND [ARGS...]",
		Short:  "Run a command for baton run and stop every process it starts (started by baton run only)",
		Hidden: true,
		Args:   cobra.MinimumNArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			return guard(args, grace, stderr)
		},
	}
	cmd.Flags().DurationVar(&grace, "kill-grace", 5*time.Second, "time between SIGTERM and SIGKILL")
	return cmd
}

// guard runs the command as the guard: fd 3 is the control pipe from baton
// run, fd 4 the pipe on which it says whether the command started, and at
// its end which processes of the command's it could not stop (none,
// normally), and fd 5, when there, the hold stream's connection to the
// sidecar, which it keeps open and never reads: the lock is held until
// both baton run and the guard are gone. Its exit status is the
// command's, once every process of the command's is gone.
func guard(args []string, grace time.Duration, stderr io.Writer) error {
	// The command's parent-death signal is tied to the thread that starts
	// it: this one, which lives as long as the guard.
	runtime.LockOSThread()
	ctl, status := os.NewFile(3, "control"), os.NewFile(4, "status")
	if _, err := ctl.Stat(); err != nil {
		return usageError{errors.New("run-guard is started by baton run, not by hand")}
	}
	syscall.CloseOnExec(3)
	syscall.CloseOnExec(4)
	syscall.CloseOnExec(5) // the hold's connection, when given: kept open, not handed on
	// Signals from outside are baton run's to pass on (a terminal's SIGINT
	// reaches the whole process group): caught here, so that they are not
	// ignored by the command either, and dropped.
	caught := make(chan os.Signal, 8)
	signal.Notify(caught, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	go func() {
		for range caught {
		}
	}()
	reaper, err := proctree.NewReaper()
	if err != nil {
		fmt.Fprintf(status, "failed %v\n", err)
		return exitError{127, ""}
	}
	defer reaper.Close()
	cmd, err := startChild(args)
	if err != nil {
		fmt.Fprintf(status, "failed cannot start %s: %v\n", args[0], err)
		return exitError{127, ""}
	}
	fmt.Fprintf(status, "started %d\n", cmd.Pid)
	defer status.Close()
	exited := reaper.Exited(cmd.Pid)

	var gone atomic.Bool // the command exited: its pid is no longer its own
	stop := make(chan struct{})
	go func() {
		defer close(stop)
		b := make([]byte, 1)
		for {
			if _, err := ctl.Read(b); err != nil || b[0] == guardStop {
				return // stopped, or baton run is gone
			}
			if !gone.Load() {
				_ = cmd.Signal(syscall.Signal(b[0]))
			}
		}
	}()
	var ws syscall.WaitStatus
	var left []int
	select {
	case ws = <-exited:
		gone.Store(true)
		var n int
		if n, left = reaper.Stop(grace); n > 0 {
			fmt.Fprintf(stderr, "baton: the command exited and left %d process(es) running; they were stopped\n", n)
		}
	case <-stop:
		_, left = reaper.Stop(grace)
		ws = <-exited
	}
	if len(left) > 0 {
		fmt.Fprintf(status, "left %s\n", strings.Trim(fmt.Sprint(left), "[]"))
	}
	if code := proctree.ExitCode(ws); code != 0 {
		return exitError{code, ""}
	}
	return nil
}

// startChild starts the command as the guard's child, killed by the kernel
// if the guard dies.
func startChild(args []string) (*os.Process, error) {
	path, err := exec.LookPath(args[0])
	if errors.Is(err, exec.ErrNotFound) {
		return nil, notFound(args[0], os.Getenv("PATH"), os.Args[0])
	}
	if err != nil {
		return nil, err
	}
	return os.StartProcess(path, args, &os.ProcAttr{
		Env:   os.Environ(),
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
		Sys:   &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
	})
}

// notFound says that command is not in path; self is how baton was run.
// Baton's image holds nothing but its binaries (no shell): a command run
// from it cannot be found there, and the fix is to run baton run in the
// app's container.
func notFound(command, path, self string) error {
	msg := fmt.Sprintf("%q is not in PATH (%s)", command, path)
	if self == "/baton" || self == "/baton-dapr" {
		msg += "; Baton's image has no shell and no other program: run baton run in the app's container, with its binary copied there by `baton install` (docs/kubernetes.md)"
	}
	return errors.New(msg)
}

// guarded is a command that baton run started through a guard.
type guarded struct {
	guard  *os.Process
	ctl    *os.File      // the control pipe's write end
	status *bufio.Reader // the status pipe's read end: what the guard says
	exited <-chan syscall.WaitStatus
	reaper *proctree.Reaper
	grace  time.Duration
	copies sync.WaitGroup // output copied from pipes, for writers that are not files
	closed []*os.File     // pipe ends to close once the guard is gone
}

// startGuarded starts args through a guard that stops every process of the
// command's within grace when told to, or when this process dies. conn,
// when not nil, is the hold stream's connection, which the guard keeps
// open as long as it lives. The calling process becomes a subreaper: it
// must not wait for children in any other way from now on.
func startGuarded(args, env []string, grace time.Duration, conn *os.File, stdout, stderr io.Writer) (*guarded, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find baton's own executable for the guard: %w", err)
	}
	reaper, err := proctree.NewReaper()
	if err != nil {
		return nil, err
	}
	t := &guarded{reaper: reaper, grace: grace}
	fail := func(err error) (*guarded, error) {
		for _, f := range t.closed {
			f.Close()
		}
		reaper.Close()
		return nil, err
	}
	out, err := t.fileFor(stdout, os.Stdout)
	if err != nil {
		return fail(err)
	}
	errw, err := t.fileFor(stderr, os.Stderr)
	if err != nil {
		return fail(err)
	}
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		return fail(err)
	}
	stR, stW, err := os.Pipe()
	if err != nil {
		ctlR.Close()
		ctlW.Close()
		return fail(err)
	}
	argv := append([]string{self, "run-guard", "--kill-grace", grace.String(), "--"}, args...)
	files := []*os.File{os.Stdin, out, errw, ctlR, stW}
	if conn != nil {
		files = append(files, conn)
	}
	p, err := os.StartProcess(self, argv, &os.ProcAttr{Env: env, Files: files})
	ctlR.Close()
	stW.Close()
	if conn != nil {
		// Handing a file to a child puts it in blocking mode, and the mode
		// belongs to the connection, which this process reads too: a read
		// blocked in the kernel would never let it close. Back to
		// non-blocking.
		_ = syscall.SetNonblock(int(conn.Fd()), true)
	}
	if err != nil {
		ctlW.Close()
		stR.Close()
		return fail(fmt.Errorf("start the guard: %w", err))
	}
	t.guard, t.ctl, t.exited, t.status = p, ctlW, reaper.Exited(p.Pid), bufio.NewReader(stR)
	t.closed = append(t.closed, stR)
	line, _ := t.status.ReadString('\n')
	if what, ok := strings.CutPrefix(strings.TrimSpace(line), "started "); ok {
		if _, err := strconv.Atoi(what); err == nil {
			return t, nil
		}
	}
	why := strings.TrimSpace(strings.TrimPrefix(line, "failed "))
	if why == "" {
		why = "the guard ended before it said"
	}
	t.wait() // closes the pipes and the reaper
	return nil, errors.New(why)
}

// fileFor returns a file that writes to w: w itself when it is one (the
// process's own stdout and stderr), else a pipe copied to w.
func (t *guarded) fileFor(w io.Writer, std *os.File) (*os.File, error) {
	if f, ok := w.(*os.File); ok {
		return f, nil
	}
	if w == nil {
		return std, nil
	}
	r, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	t.closed = append(t.closed, pw)
	t.copies.Add(1)
	go func() {
		defer t.copies.Done()
		defer r.Close()
		_, _ = io.Copy(w, r)
	}()
	return pw, nil
}

// forward passes sig on to the command.
func (t *guarded) forward(sig os.Signal) {
	if s, ok := sig.(syscall.Signal); ok && s > 0 && s < 256 {
		_, _ = t.ctl.Write([]byte{byte(s)}) // fails only once the guard is gone
	}
}

// stop tells the guard to stop the command's tree.
func (t *guarded) stop() {
	_, _ = t.ctl.Write([]byte{guardStop})
}

// ending is how the command's tree ended.
type ending struct {
	code int    // the command's exit code, as a shell reports it
	died string // what went wrong with the guard, if anything
	left []int  // processes of the command's that could not be stopped
}

// wait waits for the guard to end and says how the command ended. Whatever
// of the command's the guard left (it died: a signal, a crash) was
// reparented to this process, which stops it here; the guard's code is
// then 128 plus the signal that killed it, or its own.
func (t *guarded) wait() ending {
	ws := <-t.exited
	var e ending
	e.code = proctree.ExitCode(ws)
	for {
		line, err := t.status.ReadString('\n')
		if pids, ok := strings.CutPrefix(strings.TrimSpace(line), "left "); ok {
			for _, f := range strings.Fields(pids) {
				if pid, err := strconv.Atoi(f); err == nil {
					e.left = append(e.left, pid)
				}
			}
		}
		if err != nil {
			break
		}
	}
	t.ctl.Close()
	for _, f := range t.closed {
		f.Close()
	}
	n, left := t.reaper.Stop(t.grace)
	e.left = append(e.left, left...)
	if ws.Signaled() || n > 0 {
		e.died = fmt.Sprintf("the guard of the command (pid %d) ended (%v)", t.guard.Pid, ws)
		if n > 0 {
			e.died += fmt.Sprintf("; %d process(es) of the command's were left, and stopped", n)
		}
	}
	t.copies.Wait()
	t.reaper.Close()
	return e
}

// lockedWriters makes writers that are not files safe for the goroutines
// that copy the command's output into them and for baton run's own lines
// (one lock when they are one writer). Files are left as they are: the
// command writes to them directly.
func lockedWriters(stdout, stderr io.Writer) (io.Writer, io.Writer) {
	var mu sync.Mutex
	wrap := func(w io.Writer) io.Writer {
		if _, ok := w.(*os.File); ok || w == nil {
			return w
		}
		return &lockedWriter{mu: &mu, w: w}
	}
	return wrap(stdout), wrap(stderr)
}

// lockedWriter serializes the writes to w.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
