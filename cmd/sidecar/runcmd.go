package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	baton "github.com/baton-dev/baton/clients/go"
	"github.com/baton-dev/baton/clients/go/lockapi"
	"github.com/baton-dev/baton/internal/guard"
	"github.com/baton-dev/baton/internal/keyspace"
)

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
	election  bool   // baton elect: key is the election's name
	value     string // baton elect --value: what the leader announces
}

// runLong is `baton run --help`.
const runLong = `Run a command while holding a lock.

The lock is held through a hold stream for as long as the command runs: the
sidecar renews it while the stream is open (--ttl is the renewal window).
--max-hold caps the whole hold. --limit N makes the lock a semaphore (at most
N commands at once, or N units with --weight), and --mode read lets readers
run together while a writer (the default) runs alone. The command gets
BATON_KEY, BATON_OWNER and BATON_FENCE (pass the fence to what it writes);
--key and --owner are read from the command line only, never from those
variables, so a baton run inside the command takes a lock of its own.
SIGINT and SIGTERM are forwarded to it.

No process of the command's outlives the lock: whatever the command starts
(in a new process group, as a daemon, from a script that exits) is stopped
with it. When the command exits, what it left running is stopped before the
lock is released. If the lock is lost while it runs (--max-hold reached, the
sidecar lost etcd or stopped, an operator forced it free), or the sidecar
stops confirming it in time (frozen, cut off), every process of the
command's gets SIGTERM, then SIGKILL after --kill-grace. If baton run itself
is killed, they are stopped the same way, and the lock stays held until
they are gone. A lock held whole is held back from everyone for the kill
grace plus a second after any end but its release (its lock delay), so the
next holder starts only once they are gone.

Exit status: the command's own; 75 when someone else holds the lock (or the
wait ran out, or a lock delay holds it back); 70 when the lock was lost while
the command ran; 77 when the lock policy does not let this pod take the key;
69 when the sidecar cannot be reached; 74 when the sidecar cannot reach etcd
(nothing was granted: retry later); 2 for a bad command line or a --limit
that disagrees with the lock's (limit_mismatch).`

func newRunCmd(getenv func(string) string, stdout, stderr io.Writer) *cobra.Command {
	o := runOptions{socket: defaultSocket, killGrace: 5 * time.Second}
	cmd := &cobra.Command{
		Use:   "run --key KEY [flags] -- COMMAND [ARGS...]",
		Short: "Run a command while holding a lock; do not run it if someone else holds the lock",
		Long:  runLong,
		Args:  cobra.MinimumNArgs(1),
	}
	fs := cmd.Flags()
	socketFlag(fs, &o.socket, "the sidecar's socket")
	fs.StringVar(&o.key, "key", "", "the lock to hold, e.g. flow-123/readiness (this or --once is required)")
	var onceKey string
	fs.StringVar(&onceKey, "once", "", "run the command once under this key: not if a run already succeeded (exit 0, saying when and by whom); its exit status is recorded")
	fs.StringVar(&o.ifDone, "if-done", "", "with --once, after a success: skip (the default) or rerun")
	fs.StringVar(&o.ifFailed, "if-failed", "", "with --once, after a failure: retry (the default) or skip")
	fs.StringVar(&o.owner, "owner", "", "execution id to hold it as (default: generated)")
	fs.Var((*waitValue)(&o.wait), "wait", "how long to queue for the lock (a duration, or forever: a standby waits as long as it takes); 0 gives up at once")
	fs.Var((*secondsValue)(&o.ttl), "ttl", "the lock's renewal window: the sidecar keeps moving its deadline this far ahead while the command runs (default: the sidecar's --default-ttl)")
	fs.Var((*secondsValue)(&o.maxHold), "max-hold", "the longest the command may hold the lock; it is then stopped, exit 70 (default: no cap; at most the sidecar's --max-hold)")
	fs.Var((*secondsValue)(&o.killGrace), "kill-grace", "time between SIGTERM and SIGKILL when the command's processes are stopped")
	fs.Var((*secondsValue)(&o.lockDelay), "lock-delay", "if the lock ends other than by its release, hold it back from everyone this long (default and least: --kill-grace plus 1s, for a lock held whole)")
	fs.StringVar(&o.mode, "mode", "", "read to share the lock with other readers, write (the default) to hold it alone")
	fs.IntVar(&o.limit, "limit", 0, "make the lock a semaphore: at most this many units held at once, by everyone who gives the same limit")
	fs.IntVar(&o.weight, "weight", 0, "the units of the semaphore this command takes (default 1; with --limit)")
	// What a run exports to its command (BATON_KEY, BATON_OWNER) must never
	// be read back as a nested run's flags: these two come from the
	// command line only.
	cmd.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		return bindEnv(cmd.Flags(), func(name string) string {
			if name == "BATON_KEY" || name == "BATON_OWNER" {
				return ""
			}
			return getenv(name)
		}, stderr)
	}
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
	stdout, stderr = guard.LockedWriters(stdout, stderr)
	c := baton.New(o.socket)
	// The stream lives as long as the command, whatever signals come: they
	// go to the command, which decides when it ends. While queued, a signal
	// gives up the wait.
	// The guard keeps the stream's connection too: killed, baton run
	// leaves the lock held until the command's processes are gone.
	open := c.HoldOnConn
	if o.election {
		open = c.CampaignOnConn
	}
	stream, conn, err := open(context.WithoutCancel(ctx), o.key, o.request())
	if err != nil {
		return holdFailed(err, o)
	}
	defer stream.Close()
	defer conn.Close()
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
		if _, err := o.letGo(context.Background(), c, granted.Owner); err != nil {
			fmt.Fprintf(stderr, "baton: release %s: %v\n", o.what(), err)
		}
		return nil
	}
	if ctx.Err() != nil { // interrupted just as the grant came
		_ = release(0)
		return exitError{130, "interrupted while waiting for the lock"}
	}
	grace, watch, err := o.graceFor(granted, stream.ValidUntil(), stderr)
	if err != nil {
		_ = release(0)
		return err
	}

	named := "BATON_KEY="
	if o.election {
		named = "BATON_ELECTION="
	}
	env := withEnv(os.Environ(), named+o.key, "BATON_OWNER="+granted.Owner,
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
		env = withEnv(env, "BATON_RESULT_FILE="+result.Name())
		finish = o.finisher(c, granted.Owner, result.Name(), stderr)
	}
	tree, err := startGuarded(args, env, grace, conn, stdout, stderr)
	conn.Close() // the guard has it now
	if err != nil {
		_ = release(0) // it never ran: the next caller may run it
		return exitError{127, err.Error()}
	}
	letGo := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, _ = o.letGo(ctx, c, granted.Owner)
	}
	var stopAt time.Time
	if o.shared() && !granted.MaxHoldAt.IsZero() {
		stopAt = granted.MaxHoldAt.Add(-grace - stopMargin)
	}
	return supervise(tree, stream, o, watch, stopAt, sigs, finish, letGo, stderr)
}

// withEnv is env with the variables of kv (NAME=value) set, replacing
// those of the same names: a process given a variable twice reads the
// first, which would be an outer run's.
func withEnv(env []string, kv ...string) []string {
	out := make([]string, 0, len(env)+len(kv))
	for _, e := range env {
		name, _, _ := strings.Cut(e, "=")
		if !slices.ContainsFunc(kv, func(s string) bool { return strings.HasPrefix(s, name+"=") }) {
			out = append(out, e)
		}
	}
	return append(out, kv...)
}

// checkClaim refuses a --mode, --limit or --weight the sidecar would
// refuse, before anything is asked of it: a --limit or --weight given as
// less than 1 (as the API refuses such a number given), then what
// keyspace.Claim.Normal refuses, in its words.
func (o runOptions) checkClaim(cmd *cobra.Command) error {
	switch {
	case cmd.Flags().Changed("limit") && o.limit < 1:
		return usageError{fmt.Errorf("--limit %d: a semaphore has 1 to %d units", o.limit, keyspace.MaxLimit)}
	case cmd.Flags().Changed("weight") && o.weight < 1:
		return usageError{fmt.Errorf("--weight %d: a weight is 1 to --limit units", o.weight)}
	}
	mode := keyspace.Mode(o.mode)
	if o.mode == "write" {
		mode = keyspace.Exclusive
	}
	_, err := keyspace.Claim{Mode: mode, Limit: o.limit, Weight: o.weight}.Normal()
	var ce *keyspace.ClaimError
	if errors.As(err, &ce) {
		return usageError{fmt.Errorf("--%s: %s", ce.Field, ce.Msg)}
	}
	return err
}

// request is the hold request o asks for.
func (o runOptions) request() lockapi.Request {
	req := lockapi.Request{Owner: o.owner, Mode: o.mode, Limit: o.limit, Weight: o.weight, Once: o.once, IfDone: o.ifDone, IfFailed: o.ifFailed, Value: o.value}
	switch {
	case o.wait == waitForever:
		req.Wait = lockapi.WaitForever
	case o.wait > 0:
		req.Wait = o.wait.String()
	case o.election:
		req.Wait = "0s" // a campaign without a wait would wait as long as it takes
	}
	if o.ttl > 0 {
		req.TTL = o.ttl.String()
	}
	if o.maxHold > 0 {
		req.MaxHold = o.maxHold.String()
	}
	if d := o.holdBack(); d > 0 {
		req.LockDelay = d.String()
	}
	return req
}

// letGo releases the lock held as owner, or resigns the election.
func (o runOptions) letGo(ctx context.Context, c *baton.Client, owner string) (lockapi.Released, error) {
	if o.election {
		return c.Resign(ctx, o.key, owner)
	}
	return c.Release(ctx, o.key, owner)
}

// command is the command o runs as: baton run, or baton elect.
func (o runOptions) command() string {
	if o.election {
		return "baton elect"
	}
	return "baton run"
}

// awaited names what o waits for: the lock's key, or "the leadership of
// election N".
func (o runOptions) awaited() string {
	if o.election {
		return o.what()
	}
	return o.key
}

// what names what o holds, for messages: "lock K", or "the leadership of
// election N".
func (o runOptions) what() string {
	if o.election {
		return "the leadership of election " + o.key
	}
	return "lock " + o.key
}

// shared reports whether o asks for a reader's or a semaphore's share of
// the lock, which has no lock delay.
func (o runOptions) shared() bool { return o.mode == "read" || o.limit > 1 }

// holdBack is the lock delay o asks for: for a lock held whole, at least
// the kill grace and a second, so that after any end of the lock but its
// release (baton run killed, the sidecar stopped, the lease lost, --max-hold)
// nobody is granted the lock before the command's processes are stopped.
func (o runOptions) holdBack() time.Duration {
	if o.shared() {
		return o.lockDelay
	}
	return max(o.lockDelay, o.killGrace+time.Second)
}

// awaitGrant reads the hold stream until the grant, telling stderr the
// caller's place in line; it fails with the exit the refusal, the error or
// the interruption (ctx) calls for.
func awaitGrant(ctx context.Context, stream *baton.Stream, o runOptions, stderr io.Writer) (lockapi.Event, error) {
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
			fmt.Fprintf(stderr, "baton: waiting for %s: %d ahead\n", o.awaited(), ev.Position)
		case lockapi.EventGranted:
			return ev, nil
		case lockapi.EventRefused, lockapi.EventError:
			return ev, refusal(&lockapi.Error{Code: ev.Code, Message: ev.Message, Holder: ev.Holder, Fence: ev.Fence, Run: ev.Run}, o)
		}
	}
}
