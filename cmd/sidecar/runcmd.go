package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/baton-dev/baton/internal/client"
	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/lockapi"
)

// Exit codes of `baton run` besides the command's own.
const (
	exitHeld        = 75 // EX_TEMPFAIL: someone else runs it (or the wait ran out)
	exitUnavailable = 69 // EX_UNAVAILABLE: the sidecar or etcd cannot be reached
	exitLost        = 70 // the lock was lost while the command ran; it was stopped
	exitForbidden   = 77 // EX_NOPERM: the lock policy does not let this pod take the key
)

// exitError carries an exit code out of a command.
type exitError struct {
	code int
	msg  string
}

func (e exitError) Error() string { return e.msg }

type runOptions struct {
	socket    string
	key       string
	owner     string
	wait      time.Duration
	ttl       time.Duration
	maxHold   time.Duration
	killGrace time.Duration
	mode      string
	limit     int
	weight    int
	lockDelay time.Duration
	once      bool // --once KEY: key is the run-once key
	ifDone    string
	ifFailed  string
}

func newRunCmd(getenv func(string) string, stdout, stderr io.Writer) *cobra.Command {
	o := runOptions{socket: defaultSocket, killGrace: 5 * time.Second}
	cmd := &cobra.Command{
		Use:   "run --key KEY [flags] -- COMMAND [ARGS...]",
		Short: "Run a command while holding a lock; do not run it if someone else holds the lock",
		Long: `Run a command while holding a lock.

The lock is held through a hold stream for as long as the command runs: the
sidecar renews it while the stream is open (--ttl is the renewal window, how
long the lock outlives a baton run that stopped renewing), and releases it at
once if baton run dies. --max-hold caps the whole hold. --limit N makes the
lock a semaphore (at most N commands at once, or N units with --weight), and
--mode read lets readers run together while a writer (the default) runs
alone. The command gets
BATON_KEY, BATON_OWNER and BATON_FENCE (pass the fence to what it writes).
SIGINT and SIGTERM are forwarded to it. If the lock is lost while it runs
(--max-hold reached, the sidecar lost etcd, an operator forced it free), it
gets SIGTERM, then SIGKILL after --kill-grace.

Exit status: the command's own; 75 when someone else holds the lock (or the
wait ran out); 70 when the lock was lost while the command ran; 77 when the
lock policy does not let this pod take the key; 69 when the sidecar cannot
be reached; 2 for a bad command line or a --limit that disagrees with the
lock's (limit_mismatch).`,
		Args: cobra.MinimumNArgs(1),
	}
	fs := cmd.Flags()
	socketFlag(fs, &o.socket, "the sidecar's socket")
	fs.StringVar(&o.key, "key", "", "the lock to hold, e.g. flow-123/readiness (this or --once is required)")
	var onceKey string
	fs.StringVar(&onceKey, "once", "", "run the command once under this key: not if a run already succeeded (exit 0, saying when and by whom); its exit status is recorded")
	fs.StringVar(&o.ifDone, "if-done", "", "with --once, after a success: skip (the default) or rerun")
	fs.StringVar(&o.ifFailed, "if-failed", "", "with --once, after a failure: retry (the default) or skip")
	fs.StringVar(&o.owner, "owner", "", "execution id to hold it as (default: generated)")
	fs.DurationVar(&o.wait, "wait", 0, "how long to queue for the lock; 0 gives up at once")
	fs.DurationVar(&o.ttl, "ttl", 0, "the lock's renewal window: the sidecar keeps moving its deadline this far ahead while the command runs (default: the sidecar's --default-ttl)")
	fs.DurationVar(&o.maxHold, "max-hold", 0, "the longest the command may hold the lock; it is then stopped, exit 70 (default: no cap; at most the sidecar's --max-hold)")
	fs.DurationVar(&o.killGrace, "kill-grace", o.killGrace, "time between SIGTERM and SIGKILL when the lock is lost")
	fs.DurationVar(&o.lockDelay, "lock-delay", 0, "if the lock is lost other than by its release, hold it back from everyone this long (default: the sidecar's --lock-delay)")
	fs.StringVar(&o.mode, "mode", "", "read to share the lock with other readers, write (the default) to hold it alone")
	fs.IntVar(&o.limit, "limit", 0, "make the lock a semaphore: at most this many units held at once, by everyone who gives the same limit")
	fs.IntVar(&o.weight, "weight", 0, "the units of the semaphore this command takes (default 1; with --limit)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if cmd.ArgsLenAtDash() != 0 {
			return usageError{errors.New("put the command after --, as in: baton run --key K -- COMMAND ARGS")}
		}
		if err := o.takeOnce(onceKey); err != nil {
			return err
		}
		if _, err := keyspace.ParseKey(o.key); err != nil {
			return usageError{fmt.Errorf("--key: %w", err)}
		}
		if o.wait < 0 || o.ttl < 0 || o.maxHold < 0 || o.killGrace < 0 || o.lockDelay < 0 {
			return usageError{errors.New("--wait, --ttl, --max-hold, --kill-grace and --lock-delay must not be negative")}
		}
		if err := o.checkClaim(cmd); err != nil {
			return err
		}
		for _, f := range []struct {
			name string
			d    time.Duration
		}{{"ttl", o.ttl}, {"max-hold", o.maxHold}} {
			if cmd.Flags().Changed(f.name) && f.d < time.Second {
				return usageError{fmt.Errorf("--%s %v: must be at least 1s (leave --%s out for the default)", f.name, f.d, f.name)}
			}
		}
		return runLocked(cmd.Context(), o, args, stdout, stderr)
	}
	return cmd
}

// runLocked holds the lock, runs the command and releases the lock.
func runLocked(ctx context.Context, o runOptions, args []string, stdout, stderr io.Writer) error {
	c := client.New(o.socket)
	// The stream lives as long as the command, whatever signals come: they
	// go to the command, which decides when it ends. While queued, a signal
	// gives up the wait.
	stream, err := c.Hold(context.WithoutCancel(ctx), o.key, o.request())
	if err != nil {
		return holdFailed(err, o.wait)
	}
	defer stream.Close()
	giveUp := context.AfterFunc(ctx, func() { stream.Close() })
	granted, err := awaitGrant(ctx, stream, o, stderr)
	if err != nil {
		return err
	}

	// From here on signals are for the command: caught now, so that none
	// arriving before it starts is lost, and forwarded once it runs.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	giveUp()
	release := func(int) error {
		if _, err := c.Release(context.Background(), o.key, granted.Owner); err != nil {
			fmt.Fprintf(stderr, "baton: release %s: %v\n", o.key, err)
		}
		return nil
	}
	if ctx.Err() != nil { // interrupted just as the grant came
		_ = release(0)
		return exitError{130, "interrupted while waiting for the lock"}
	}

	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	cmd.Env = append(os.Environ(), "BATON_KEY="+o.key, "BATON_OWNER="+granted.Owner,
		"BATON_FENCE="+strconv.FormatInt(granted.Fence, 10), "BATON_SOCKET="+o.socket)
	finish := release
	if o.once {
		result, err := os.CreateTemp("", "baton-result-")
		if err != nil {
			_ = release(0)
			return exitError{exitUnavailable, fmt.Sprintf("cannot make the result file: %v", err)}
		}
		result.Close()
		defer os.Remove(result.Name())
		cmd.Env = append(cmd.Env, "BATON_RESULT_FILE="+result.Name())
		finish = o.finisher(c, granted.Owner, result.Name(), stderr)
	}
	if err := cmd.Start(); err != nil {
		_ = release(0) // it never ran: the next caller may run it
		return exitError{127, fmt.Sprintf("cannot start %s: %v", args[0], err)}
	}
	return supervise(cmd, stream, o, sigs, finish, stderr)
}

// checkClaim refuses a --mode, --limit or --weight the sidecar would
// refuse, before anything is asked of it.
func (o runOptions) checkClaim(cmd *cobra.Command) error {
	switch {
	case o.mode != "" && o.mode != "read" && o.mode != "write":
		return usageError{fmt.Errorf("--mode %q: use read or write", o.mode)}
	case cmd.Flags().Changed("limit") && (o.limit < 1 || o.limit > keyspace.MaxLimit):
		return usageError{fmt.Errorf("--limit %d: a semaphore has 1 to %d units", o.limit, keyspace.MaxLimit)}
	case cmd.Flags().Changed("weight") && (o.limit == 0 || o.weight < 1 || o.weight > o.limit):
		return usageError{fmt.Errorf("--weight %d: give 1 to --limit units, with --limit", o.weight)}
	case o.mode == "read" && o.limit > 0:
		return usageError{errors.New("--mode read is for read/write locks; a semaphore (--limit) has no modes")}
	}
	return nil
}

// request is the hold request o asks for.
func (o runOptions) request() lockapi.Request {
	req := lockapi.Request{Owner: o.owner, Mode: o.mode, Limit: o.limit, Weight: o.weight, Once: o.once, IfDone: o.ifDone, IfFailed: o.ifFailed}
	if o.wait > 0 {
		req.Wait = o.wait.String()
	}
	if o.ttl > 0 {
		req.TTL = o.ttl.String()
	}
	if o.maxHold > 0 {
		req.MaxHold = o.maxHold.String()
	}
	if o.lockDelay > 0 {
		req.LockDelay = o.lockDelay.String()
	}
	return req
}

// awaitGrant reads the hold stream until the grant, telling stderr the
// caller's place in line; it fails with the exit the refusal, the error or
// the interruption (ctx) calls for.
func awaitGrant(ctx context.Context, stream *client.Stream, o runOptions, stderr io.Writer) (lockapi.Event, error) {
	for {
		ev, err := stream.Next()
		if err != nil && ctx.Err() != nil {
			return ev, exitError{130, "interrupted while waiting for the lock"}
		}
		if err != nil {
			return ev, exitError{exitUnavailable, fmt.Sprintf("the sidecar closed the hold stream before a grant: %v", err)}
		}
		switch ev.Event {
		case lockapi.EventQueued:
			fmt.Fprintf(stderr, "baton: waiting for %s: %d ahead\n", o.key, ev.Position)
		case lockapi.EventGranted:
			return ev, nil
		case lockapi.EventRefused:
			if ev.Code == lockapi.CodeAlreadyDone {
				return ev, alreadyDone(ev.Message, ev.Run)
			}
			return ev, exitError{exitHeld, refused(ev.Code, ev.Holder, ev.Message, o.wait)}
		case lockapi.EventError:
			return ev, exitError{exitUnavailable, ev.Message}
		}
	}
}

// supervise waits for the started cmd, forwarding sigs to it, and releases
// the lock when it exits (release is told its exit status); if the lock is lost first, it stops cmd (SIGTERM,
// then SIGKILL after the grace) and exits lost.
func supervise(cmd *exec.Cmd, stream *client.Stream, o runOptions, sigs <-chan os.Signal, release func(code int) error, stderr io.Writer) error {
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait() // how it ended is read from cmd.ProcessState
		close(exited)
	}()
	lost := make(chan string, 1)
	go func() { lost <- lostWhy(stream) }()

	var why string
	for why == "" {
		select {
		case <-exited:
			code := exitCode(cmd.ProcessState)
			if err := release(code); err != nil {
				return err
			}
			if code != 0 {
				return exitError{code, ""}
			}
			return nil
		case s := <-sigs:
			_ = cmd.Process.Signal(s) // fails only once it exited, which exited tells
		case why = <-lost:
		}
	}
	select {
	case <-exited: // the command ended as the lock did
	default:
		fmt.Fprintf(stderr, "baton: lock %s lost: %s; stopping the command\n", o.key, why)
		_ = cmd.Process.Signal(syscall.SIGTERM) // fails only once it exited
		select {
		case <-exited:
		case <-time.After(o.killGrace):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	return exitError{exitLost, fmt.Sprintf("lock %s lost while the command ran: %s", o.key, why)}
}

// lostWhy reads the hold stream of a granted lock until it says the lock
// ended, and tells why.
func lostWhy(stream *client.Stream) string {
	for {
		ev, err := stream.Next()
		switch {
		case err != nil:
			return "the sidecar closed the hold stream: " + err.Error()
		case ev.Event == lockapi.EventLost:
			return ev.Message
		case ev.Event == lockapi.EventReleased:
			return "the lock was released by DELETE while the command ran"
		}
	}
}

func holdFailed(err error, wait time.Duration) error {
	var ae *lockapi.Error
	if errors.As(err, &ae) {
		switch ae.Code {
		case lockapi.CodeAlreadyRunning, lockapi.CodeWaitTimeout, lockapi.CodeLockDelayed:
			return exitError{exitHeld, refused(ae.Code, ae.Holder, ae.Message, wait)}
		case lockapi.CodeUnavailable:
			return exitError{exitUnavailable, ae.Message}
		case lockapi.CodeForbidden:
			return exitError{exitForbidden, ae.Message + " (forbidden)"}
		case lockapi.CodeAlreadyDone:
			return alreadyDone(ae.Message, ae.Run)
		case lockapi.CodeLimitMismatch:
			// Not someone else's turn: a caller that retried would never run.
			return exitError{2, ae.Message + " (limit_mismatch)"}
		}
		if ae.Status == 400 {
			return usageError{errors.New(ae.Message)}
		}
	}
	return exitError{exitUnavailable, err.Error()}
}

// refused says why the command did not start: someone else holds the lock
// (code already_running) or the wait for it ran out (wait_timeout).
func refused(code string, h *lockapi.Holder, msg string, wait time.Duration) string {
	what := "already running"
	if code == lockapi.CodeWaitTimeout {
		what = fmt.Sprintf("the wait ran out after %v (wait_timeout)", wait)
	}
	if h == nil || h.Owner == "" {
		return what + ": " + msg
	}
	s := what + ": held by " + h.Owner
	if h.Pod != "" {
		s += " (pod " + h.Pod + ")"
	}
	if !h.AcquiredAt.IsZero() {
		s += " since " + h.AcquiredAt.UTC().Format(time.RFC3339)
	}
	if !h.ExpiresAt.IsZero() {
		s += ", until " + h.ExpiresAt.UTC().Format(time.RFC3339)
	}
	return s
}

// exitCode is a process's exit status as a shell reports it.
func exitCode(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}
