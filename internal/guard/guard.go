// Package guard runs a command so that no process it starts outlives the
// lock it runs under: what `baton run` does with its command.
//
// baton run starts its command through a second process of its own, the
// guard (Start starts it; it runs Run, as `baton run-guard`), so that no
// process the command starts outlives the lock:
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
package guard

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/baton-dev/baton/internal/proctree"
)

// stopByte is the control byte that tells the guard to stop the tree; any
// other byte is a signal number to pass on to the command.
const stopByte = 0

// ErrNotStarted is Run's error when it was not started by Start: it has no
// control pipe.
var ErrNotStarted = errors.New("the guard is started by baton run, not by hand")

// Run runs the command args as the guard: fd 3 is the control pipe from
// the process that started it (Start), fd 4 the pipe on which it says whether the command started, and at
// its end which processes of the command's it could not stop (none,
// normally), and fd 5, when there, the hold stream's connection to the
// sidecar, which it keeps open and never reads: the lock is held until
// both baton run and the guard are gone. It returns the command's exit
// code, once every process of the command's is gone, and an error only
// when it was not started by Start.
func Run(args []string, grace time.Duration, stderr io.Writer) (code int, err error) {
	// The command's parent-death signal is tied to the thread that starts
	// it: this one, which lives as long as the guard.
	runtime.LockOSThread()
	ctl, status := os.NewFile(3, "control"), os.NewFile(4, "status")
	if _, err := ctl.Stat(); err != nil {
		return 0, ErrNotStarted
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
		return 127, nil
	}
	defer reaper.Close()
	cmd, err := startChild(args)
	if err != nil {
		fmt.Fprintf(status, "failed cannot start %s: %v\n", args[0], err)
		return 127, nil
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
			if _, err := ctl.Read(b); err != nil || b[0] == stopByte {
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
	return proctree.ExitCode(ws), nil
}

// startChild starts the command as the guard's child, killed by the kernel
// if the guard dies.
func startChild(args []string) (*os.Process, error) {
	path, err := exec.LookPath(args[0])
	if errors.Is(err, exec.ErrNotFound) {
		return nil, NotFound(args[0], os.Getenv("PATH"), os.Args[0])
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

// NotFound says that command is not in path; self is how baton was run.
// Baton's image holds nothing but its binaries (no shell): a command run
// from it cannot be found there, and the fix is to run baton run in the
// app's container.
func NotFound(command, path, self string) error {
	msg := fmt.Sprintf("%q is not in PATH (%s)", command, path)
	if self == "/baton" || self == "/baton-dapr" {
		msg += "; Baton's image has no shell and no other program: run baton run in the app's container, with its binary copied there by `baton install` (docs/kubernetes.md)"
	}
	return errors.New(msg)
}
