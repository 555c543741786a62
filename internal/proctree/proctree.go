// Package proctree stops a command together with every process it started,
// however it started them: in a new process group or session, as a daemon
// that forked twice, or from a script that exited and left them running.
//
// The process that runs the command becomes a child subreaper
// (PR_SET_CHILD_SUBREAPER, Linux 3.4): a descendant whose parent exits is
// reparented to it rather than to init, so every process the command
// started stays its descendant until it exits. Stopping walks /proc for
// the descendants, signals each, and reaps those that become its children,
// until none is left. Nothing here needs a privilege, a cgroup or a PID
// namespace.
package proctree

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Reaper is the calling process as the subreaper of its descendants: it
// collects the exit of every child, those it started and those reparented
// to it, and stops them all.
//
// The process must not wait for its children any other way (os/exec's
// Wait, os.Process.Wait): the reaper collects every exit, and would take
// theirs.
type Reaper struct {
	self int
	poll time.Duration

	mu      sync.Mutex
	exits   map[int]syscall.WaitStatus // exits not collected yet, by pid
	changed chan struct{}              // closed and replaced at each exit
	sigchld chan os.Signal
	stop    chan struct{}
}

// NewReaper makes the calling process a child subreaper and starts
// collecting the exits of its children; Close stops that.
func NewReaper() (*Reaper, error) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return nil, fmt.Errorf("become the subreaper of the command's processes: %w", err)
	}
	r := &Reaper{
		self: os.Getpid(), poll: 20 * time.Millisecond,
		exits: map[int]syscall.WaitStatus{}, changed: make(chan struct{}),
		sigchld: make(chan os.Signal, 1), stop: make(chan struct{}),
	}
	signal.Notify(r.sigchld, syscall.SIGCHLD)
	go r.run()
	return r, nil
}

// Close stops collecting exits.
func (r *Reaper) Close() {
	signal.Stop(r.sigchld)
	close(r.stop)
}

// run reaps every child that exits. SIGCHLD can be coalesced, and a child
// may exit before the signal is asked for: each wake-up reaps all that
// are ready, and a slow tick catches what a lost signal would miss.
func (r *Reaper) run() {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		r.reapReady()
		select {
		case <-r.sigchld:
		case <-tick.C:
		case <-r.stop:
			return
		}
	}
}

// reapReady collects every child that has exited.
func (r *Reaper) reapReady() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return // ECHILD: no children; 0: none has exited
		}
		r.mu.Lock()
		r.exits[pid] = ws
		close(r.changed)
		r.changed = make(chan struct{})
		r.mu.Unlock()
	}
}

// Exited returns a channel that delivers the exit status of child pid
// once it has exited. Each pid's status is delivered once.
func (r *Reaper) Exited(pid int) <-chan syscall.WaitStatus {
	ch := make(chan syscall.WaitStatus, 1)
	go func() {
		for {
			r.mu.Lock()
			ws, ok := r.exits[pid]
			if ok {
				delete(r.exits, pid)
			}
			changed := r.changed
			r.mu.Unlock()
			if ok {
				ch <- ws
				return
			}
			select {
			case <-changed:
			case <-r.stop:
				return
			}
		}
	}()
	return ch
}

// Live returns the descendants of the calling process that have not
// exited (zombies are not counted: they only wait to be reaped).
func (r *Reaper) Live() []int { return Descendants(r.self) }

// killWait bounds how long Stop sends SIGKILL to processes that do not go:
// one in uninterruptible sleep (a hung NFS mount) outlasts any signal.
const killWait = 10 * time.Second

// Stop ends every descendant of the calling process: SIGTERM (and SIGCONT,
// so a stopped one gets it), then SIGKILL to whatever is left after grace,
// again and again until none is left (or killWait has passed). A process
// started meanwhile by one being stopped is found and stopped too. It
// returns how many processes it signalled, and those it could not stop
// (none, normally).
func (r *Reaper) Stop(grace time.Duration) (signalled int, left []int) {
	seen := map[int]bool{}
	deadline := time.Now().Add(grace)
	for {
		live := r.Live()
		if len(live) == 0 && r.childless() {
			return len(seen), nil
		}
		for _, pid := range live {
			if !seen[pid] {
				seen[pid] = true
				r.signal(pid, syscall.SIGTERM)
				r.signal(pid, syscall.SIGCONT)
			}
		}
		if !time.Now().Before(deadline) {
			break
		}
		r.pause(min(r.poll, time.Until(deadline)))
	}
	for until := time.Now().Add(killWait); ; {
		live := r.Live()
		if len(live) == 0 && r.childless() {
			return len(seen), nil
		}
		if !time.Now().Before(until) {
			return len(seen), live
		}
		for _, pid := range live {
			seen[pid] = true
			r.signal(pid, syscall.SIGKILL)
		}
		r.pause(r.poll / 4)
	}
}

// childless reports whether the calling process has no child, not even
// one that exited and waits to be reaped. For a subreaper that is the
// proof that it has no descendant: an orphan becomes its child. (A scan of
// /proc alone can miss a process forked, and orphaned, while it is read.)
func (r *Reaper) childless() bool {
	var info unix.Siginfo
	err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
	return errors.Is(err, unix.ECHILD)
}

// pause waits for a child's exit or for d.
func (r *Reaper) pause(d time.Duration) {
	r.mu.Lock()
	changed := r.changed
	r.mu.Unlock()
	select {
	case <-changed:
	case <-time.After(d):
	}
}

// signal sends sig to pid if pid is still a descendant. The pid is pinned
// with a pidfd first, then checked, so that a pid reaped and reused by an
// unrelated process meanwhile is never signalled; where pidfds cannot be
// had (an old kernel, a seccomp profile that refuses them) it is checked,
// then signalled by number.
func (r *Reaper) signal(pid int, sig syscall.Signal) {
	fd, err := unix.PidfdOpen(pid, 0)
	switch {
	case errors.Is(err, unix.ESRCH):
		return // gone already
	case err != nil:
		if descendantOf(pid, r.self) {
			_ = syscall.Kill(pid, sig)
		}
		return
	}
	defer unix.Close(fd)
	if !descendantOf(pid, r.self) {
		return
	}
	if err := unix.PidfdSendSignal(fd, sig, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		_ = syscall.Kill(pid, sig)
	}
}

// Descendants returns the processes below root that have not exited,
// read from /proc.
func Descendants(root int) []int {
	parents := processes()
	children := map[int][]int{}
	for pid, p := range parents {
		children[p.ppid] = append(children[p.ppid], pid)
	}
	var out []int
	queue := []int{root}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, c := range children[pid] {
			queue = append(queue, c)
			if !parents[c].dead {
				out = append(out, c)
			}
		}
	}
	return out
}

// descendantOf reports whether pid is below root now.
func descendantOf(pid, root int) bool {
	for range 4096 { // a bound on the depth, against a loop read mid-change
		p, ok := stat(pid)
		if !ok || p.ppid <= 0 {
			return false
		}
		if p.ppid == root {
			return true
		}
		pid = p.ppid
	}
	return false
}

// proc is what Descendants needs of a process.
type proc struct {
	ppid int
	dead bool // a zombie, or being torn down
}

// processes reads every process's parent from /proc.
func processes() map[int]proc {
	out := map[int]proc{}
	d, err := os.Open("/proc")
	if err != nil {
		return out
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		if p, ok := stat(pid); ok {
			out[pid] = p
		}
	}
	return out
}

// stat reads a process's state and parent from /proc/PID/stat, whose
// second field (the command's name, in parentheses) may hold spaces and
// parentheses itself: the fields after it follow the last ')'.
func stat(pid int) (proc, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return proc{}, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return proc{}, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return proc{}, false
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return proc{}, false
	}
	return proc{ppid: ppid, dead: f[0] == "Z" || f[0] == "X" || f[0] == "x"}, true
}

// ExitCode is a wait status as a shell reports it: the exit code, or 128
// plus the signal that ended the process.
func ExitCode(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}
