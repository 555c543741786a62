package guard

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/baton-dev/baton/internal/proctree"
)

// Tree is a command started through a guard, and every process it starts.
type Tree struct {
	guard  *os.Process
	ctl    *os.File      // the control pipe's write end
	status *bufio.Reader // the status pipe's read end: what the guard says
	exited <-chan syscall.WaitStatus
	reaper *proctree.Reaper
	grace  time.Duration
	copies sync.WaitGroup // output copied from pipes, for writers that are not files
	closed []*os.File     // pipe ends to close once the guard is gone
}

// Start starts args through a guard that stops every process of the
// command's within grace when told to, or when this process dies. self is
// the command line that runs Run with grace, to which args are appended
// (baton's: its own executable, run-guard, --kill-grace and "--"). conn,
// when not nil, is the hold stream's connection, which the guard keeps
// open as long as it lives. The calling process becomes a subreaper: it
// must not wait for children in any other way from now on.
func Start(self, args, env []string, grace time.Duration, conn *os.File, stdout, stderr io.Writer) (*Tree, error) {
	reaper, err := proctree.NewReaper()
	if err != nil {
		return nil, err
	}
	t := &Tree{reaper: reaper, grace: grace}
	fail := func(err error) (*Tree, error) {
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
	argv := append(append([]string(nil), self...), args...)
	files := []*os.File{os.Stdin, out, errw, ctlR, stW}
	if conn != nil {
		files = append(files, conn)
	}
	p, err := os.StartProcess(self[0], argv, &os.ProcAttr{Env: env, Files: files})
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
	t.Wait() // closes the pipes and the reaper
	return nil, errors.New(why)
}

// fileFor returns a file that writes to w: w itself when it is one (the
// process's own stdout and stderr), else a pipe copied to w.
func (t *Tree) fileFor(w io.Writer, std *os.File) (*os.File, error) {
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

// Forward passes sig on to the command.
func (t *Tree) Forward(sig os.Signal) {
	if s, ok := sig.(syscall.Signal); ok && s > 0 && s < 256 {
		_, _ = t.ctl.Write([]byte{byte(s)}) // fails only once the guard is gone
	}
}

// Grace is the time the guard gives the command's processes between
// SIGTERM and SIGKILL.
func (t *Tree) Grace() time.Duration { return t.grace }

// Kill kills the guard, for one that does not end when told to stop (it
// was stopped itself, or starved): the kernel kills the command, and Wait
// stops whatever of the command's it left.
func (t *Tree) Kill() { _ = t.guard.Kill() }

// Stop tells the guard to stop the command's tree.
func (t *Tree) Stop() {
	_, _ = t.ctl.Write([]byte{stopByte})
}

// Ending is how the command's tree ended.
type Ending struct {
	Code int    // the command's exit code, as a shell reports it
	Died string // what went wrong with the guard, if anything
	Left []int  // processes of the command's that could not be stopped
}

// Wait waits for the guard to end and says how the command ended. Whatever
// of the command's the guard left (it died: a signal, a crash) was
// reparented to this process, which stops it here; the guard's code is
// then 128 plus the signal that killed it, or its own.
func (t *Tree) Wait() Ending {
	ws := <-t.exited
	var e Ending
	e.Code = proctree.ExitCode(ws)
	for {
		line, err := t.status.ReadString('\n')
		if pids, ok := strings.CutPrefix(strings.TrimSpace(line), "left "); ok {
			for _, f := range strings.Fields(pids) {
				if pid, err := strconv.Atoi(f); err == nil {
					e.Left = append(e.Left, pid)
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
	e.Left = append(e.Left, left...)
	if ws.Signaled() || n > 0 {
		e.Died = fmt.Sprintf("the guard of the command (pid %d) ended (%v)", t.guard.Pid, ws)
		if n > 0 {
			e.Died += fmt.Sprintf("; %d process(es) of the command's were left, and stopped", n)
		}
	}
	t.copies.Wait()
	t.reaper.Close()
	return e
}

// LockedWriters makes writers that are not files safe for the goroutines
// that copy the command's output into them and for baton run's own lines
// (one lock when they are one writer). Files are left as they are: the
// command writes to them directly.
func LockedWriters(stdout, stderr io.Writer) (io.Writer, io.Writer) {
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
