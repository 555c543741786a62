package main

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/baton-dev/baton/internal/keyspace"
)

// electLong is `baton elect --help`.
const electLong = `Run a command only while leading an election.

baton elect campaigns in election NAME through the sidecar, and waits as a
standby for as long as it takes (--wait gives up sooner, exit 75). Once
elected it runs the command, with BATON_ELECTION, BATON_OWNER and
BATON_FENCE (the leadership's fencing token: pass it to what the command
writes) in its environment; --value is what the leader announces to
observers (GET /v1/elections/NAME, baton locks and etcdctl elect -l show
it). The sidecar renews the leadership while the command runs. --owner
comes from the command line only, never from BATON_OWNER, so a baton elect
or baton run inside the command is a candidate or caller of its own.
SIGINT and SIGTERM are forwarded to the command.

No process of the command's outlives the leadership. If it is lost (the
sidecar lost etcd or was stopped, an operator forced the leader out,
--max-hold was reached) or the sidecar stops confirming it in time (frozen,
cut off), every process of the command's gets SIGTERM, then SIGKILL after
--kill-grace, and baton elect exits 70. After any end but a resignation the
election is held back from every candidate for the kill grace plus a second
(its lock delay), so the next leader starts only once they are gone. When
the command exits (after a SIGTERM, say), what it left running is stopped,
then baton elect resigns and the next candidate leads at once.

Exit status: the command's own; 70 when the leadership was lost while the
command ran; 75 when --wait ran out; 77 when the lock policy does not let
this pod campaign; 69 when the sidecar cannot be reached; 74 when the
sidecar cannot reach etcd; 2 for a bad command line.`

func newElectCmd(getenv func(string) string, stdout, stderr io.Writer) *cobra.Command {
	o := runOptions{socket: defaultSocket, killGrace: 5 * time.Second, wait: waitForever, election: true}
	cmd := &cobra.Command{
		Use:   "elect NAME [flags] -- COMMAND [ARGS...]",
		Short: "Run a command only while leading an election; a standby waits its turn",
		Long:  electLong,
		Args:  cobra.MinimumNArgs(2),
	}
	fs := cmd.Flags()
	socketFlag(fs, &o.socket, "the sidecar's socket")
	fs.StringVar(&o.value, "value", "", "what the leader announces to observers, e.g. its address (at most 4 KiB)")
	fs.StringVar(&o.owner, "owner", "", "candidate id to campaign as (default: generated)")
	fs.Var((*waitValue)(&o.wait), "wait", "how long to campaign before giving up (a duration, or forever); 0 gives up at once if someone leads")
	fs.Var((*secondsValue)(&o.ttl), "ttl", "the leadership's renewal window: the sidecar keeps moving its deadline this far ahead while the command runs (default: the sidecar's --default-ttl)")
	fs.Var((*secondsValue)(&o.maxHold), "max-hold", "the longest the command may lead; it is then stopped, exit 70 (default: no cap; at most the sidecar's --max-hold)")
	fs.Var((*secondsValue)(&o.killGrace), "kill-grace", "time between SIGTERM and SIGKILL when the command's processes are stopped")
	fs.Var((*secondsValue)(&o.lockDelay), "lock-delay", "if the leadership ends other than by resigning, hold the election back from everyone this long (default and least: --kill-grace plus 1s)")
	// What elect exports to its command (BATON_ELECTION, BATON_OWNER)
	// must never be read back as a nested command's flags.
	cmd.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		return bindEnv(cmd.Flags(), func(name string) string {
			if name == "BATON_OWNER" {
				return ""
			}
			return getenv(name)
		}, stderr)
	}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if cmd.ArgsLenAtDash() != 1 {
			return usageError{errors.New("give the election's name, then the command after --, as in: baton elect NAME -- COMMAND ARGS")}
		}
		o.key = args[0]
		if _, err := keyspace.ParseKey(o.key); err != nil {
			return usageError{fmt.Errorf("NAME: %w", err)}
		}
		if len(o.value) > keyspace.MaxValue {
			return usageError{fmt.Errorf("--value is %d bytes long, at most %d are allowed", len(o.value), keyspace.MaxValue)}
		}
		if o.wait < 0 || o.ttl < 0 || o.maxHold < 0 || o.killGrace < 0 || o.lockDelay < 0 {
			return usageError{errors.New("--wait, --ttl, --max-hold, --kill-grace and --lock-delay must not be negative")}
		}
		for _, f := range []struct {
			name string
			d    time.Duration
		}{{"ttl", o.ttl}, {"max-hold", o.maxHold}} {
			if cmd.Flags().Changed(f.name) && f.d < time.Second {
				return usageError{fmt.Errorf("--%s %v: must be at least 1s (leave --%s out for the default)", f.name, f.d, f.name)}
			}
		}
		return runLocked(cmd.Context(), o, args[1:], stdout, stderr)
	}
	return cmd
}
