package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	baton "github.com/baton-dev/baton/clients/go"
	"github.com/baton-dev/baton/clients/go/lockapi"
	"github.com/baton-dev/baton/internal/keyspace"
)

// locksOptions are the flags every `baton locks` command shares.
type locksOptions struct {
	socket string
	output string
}

func newLocksCmd(getenv func(string) string, stdout, stderr io.Writer) *cobra.Command {
	o := &locksOptions{socket: defaultSocket, output: "table"}
	cmd := &cobra.Command{
		Use:   "locks",
		Short: "See, follow and release locks: list, status, watch, release",
	}
	pf := cmd.PersistentFlags()
	socketFlag(pf, &o.socket, "the sidecar's socket")
	pf.StringVarP(&o.output, "output", "o", o.output, "table or json")
	cmd.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		if err := bindEnv(cmd.Flags(), getenv, stderr); err != nil {
			return err
		}
		if o.output != "table" && o.output != "json" {
			return usageError{fmt.Errorf("--output %q: use table or json", o.output)}
		}
		return nil
	}

	cmd.AddCommand(newLocksListCmd(o, stdout), newLocksStatusCmd(o, stdout), newLocksReleaseCmd(o, stdout), newLocksWatchCmd(o, stdout, stderr))
	return cmd
}

// newLocksListCmd is baton locks list.
func newLocksListCmd(o *locksOptions, stdout io.Writer) *cobra.Command {
	var prefix string
	list := &cobra.Command{
		Use:   "list",
		Short: "List the locks of the sidecar's scope (held ones, with their waiters)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := keyspace.ValidatePrefix(prefix); err != nil {
				return usageError{fmt.Errorf("--prefix: %w", err)}
			}
			locks, truncated, err := baton.New(o.socket).List(cmd.Context(), prefix)
			if err != nil {
				return apiFailed(err)
			}
			if o.output == "json" {
				return writeJSONOut(stdout, map[string]any{"locks": locks, "truncated": truncated})
			}
			printLocks(stdout, locks, time.Now())
			if truncated {
				fmt.Fprintln(stdout, "(more locks not shown: narrow --prefix)")
			}
			return nil
		},
	}
	list.Flags().StringVar(&prefix, "prefix", "", "only keys starting with this")
	return list
}

// newLocksStatusCmd is baton locks status.
func newLocksStatusCmd(o *locksOptions, stdout io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "status KEY",
		Short: "Show who holds a lock, and who waits for it",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := keyspace.ParseKey(args[0]); err != nil {
				return usageError{err}
			}
			st, err := baton.New(o.socket).Status(cmd.Context(), args[0])
			if err != nil {
				return apiFailed(err)
			}
			if o.output == "json" {
				return writeJSONOut(stdout, st)
			}
			if !st.Held {
				fmt.Fprintf(stdout, "%s is free\n", st.Key)
			} else {
				printLocks(stdout, []lockapi.Status{st}, time.Now())
				printHeldHere(stdout, st)
			}
			printWaiting(stdout, st, time.Now())
			printQueuedHere(stdout, st, time.Now())
			return nil
		},
	}
}

// newLocksReleaseCmd is baton locks release.
func newLocksReleaseCmd(o *locksOptions, stdout io.Writer) *cobra.Command {
	var (
		owner string
		force bool
		fence int64
	)
	release := &cobra.Command{
		Use:   "release KEY (--owner ID | --force [--fence N])",
		Short: "Release a lock as its owner, or force it free as an operator",
		Long: `Release a lock as its owner (--owner), or force it free whoever holds it
(--force). A force release deletes the holder's key in etcd only if it is still
the holder seen (or the one with --fence), so a newer holder is never hit; the
holder's sidecar reports the lock lost (force_released) to its owner. The
sidecar logs who asked.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			key := args[0]
			if _, err := keyspace.ParseKey(key); err != nil {
				return usageError{err}
			}
			if force == (owner != "") {
				return usageError{errors.New("give --owner ID to release your lock, or --force to free anyone's")}
			}
			if fence != 0 && !force {
				return usageError{errors.New("--fence goes with --force")}
			}
			c := baton.New(o.socket)
			if force {
				f, err := c.ForceRelease(cmd.Context(), key, fence, whoAsks())
				if err != nil {
					return apiFailed(err)
				}
				if o.output == "json" {
					return writeJSONOut(stdout, f)
				}
				fmt.Fprintf(stdout, "force-released %s: it was held by %s with fence %d\n", key, holderName(f.Holder), f.Fence)
				return nil
			}
			r, err := c.Release(cmd.Context(), key, owner)
			if err != nil {
				return apiFailed(err)
			}
			if o.output == "json" {
				return writeJSONOut(stdout, r)
			}
			fmt.Fprintf(stdout, "released %s (held %s by %s)\n", key, r.HeldFor, r.Owner)
			return nil
		},
	}
	rf := release.Flags()
	rf.StringVar(&owner, "owner", "", "your execution id: release your own lock")
	rf.BoolVar(&force, "force", false, "free the lock whoever holds it (operators)")
	rf.Int64Var(&fence, "fence", 0, "with --force: release only if this is still the holder's fence")
	return release
}

// printLocks writes the human table: a row per holder, so a semaphore or
// a read/write lock held by readers shows each, HELD saying how much of
// the lock is held (units of the limit, readers).
func printLocks(w io.Writer, locks []lockapi.Status, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tHOLDER\tPOD\tFENCE\tSINCE\tEXPIRES\tWAITERS\tHELD")
	for _, l := range locks {
		holders := l.Holders
		if len(holders) == 0 {
			h := lockapi.Holder{}
			if l.Holder != nil {
				h = *l.Holder
			}
			holders = []lockapi.Holding{{Holder: h, Fence: l.Fence}}
		}
		for i, h := range holders {
			key, waiters, held := l.Key, fmt.Sprint(l.Waiters), heldOf(l)
			if i > 0 {
				key, waiters, held = "", "", ""
			}
			owner, since, expires := h.Owner, "-", "-"
			if h.Foreign {
				owner = "(not baton)"
			}
			if !h.AcquiredAt.IsZero() {
				since = now.Sub(h.AcquiredAt).Round(time.Second).String() + " ago"
			}
			if !h.ExpiresAt.IsZero() {
				expires = "in " + h.ExpiresAt.Sub(now).Round(time.Second).String()
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", key, dash(owner), dash(podOf(h.Holder)), h.Fence, since, expires, waiters, held)
		}
	}
	tw.Flush()
	if len(locks) == 0 {
		fmt.Fprintln(w, "(no locks)")
	}
}

// printWaiting writes the contenders waiting for lock l, first in line
// first: each sidecar's first caller, and how many more of its callers
// wait behind it.
func printWaiting(w io.Writer, l lockapi.Status, now time.Time) {
	if len(l.Waiting) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nWAITING\tOWNER\tPOD\tSINCE\tBEHIND IT\tPROCESS")
	for i, c := range l.Waiting {
		owner, since, behind := c.Owner, agoText(now, c.Since), "-"
		if c.Foreign {
			owner = "(not baton)"
		}
		if c.Queued > 0 {
			behind = fmt.Sprintf("%d more of its pod", c.Queued)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", i+1, dash(owner), dash(podOf(lockapi.Holder{Pod: c.Pod, Cluster: c.Cluster})), since, behind, processText(c.Process))
	}
	tw.Flush()
}

// heldOf says how much of lock l is held: "3/4 units", "2 readers", or
// "1" for a lock held whole.
func heldOf(l lockapi.Status) string {
	switch {
	case l.Limit > 0:
		return fmt.Sprintf("%d/%d units", l.HeldUnits, l.Limit)
	case len(l.Holders) > 1 || (l.Holder != nil && l.Holder.Mode == "read"):
		return fmt.Sprintf("%d readers", max(len(l.Holders), 1))
	}
	return "1"
}

func holderName(h *lockapi.Holder) string {
	if h == nil {
		return "nobody"
	}
	if h.Foreign {
		return "a client that is not Baton"
	}
	switch {
	case h.Pod != "" && h.Cluster != "":
		return h.Owner + " (pod " + h.Pod + " in cluster " + h.Cluster + ")"
	case h.Pod != "":
		return h.Owner + " (pod " + h.Pod + ")"
	}
	return h.Owner
}

// podOf is the holder's pod as the table shows it: cluster/pod when
// clusters share the etcd.
func podOf(h lockapi.Holder) string {
	if h.Cluster != "" && h.Pod != "" {
		return h.Cluster + "/" + h.Pod
	}
	return h.Pod
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// whoAsks names the operator for the sidecar's log.
func whoAsks() string {
	name := "unknown"
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	host, _ := os.Hostname()
	return strings.TrimSuffix(name+"@"+host, "@")
}

func writeJSONOut(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// apiFailed turns a sidecar's answer into an exit: 1, with its message.
func apiFailed(err error) error {
	var ae *lockapi.Error
	if errors.As(err, &ae) {
		if ae.Code == lockapi.CodeUnavailable {
			return exitError{exitUnavailable, ae.Message}
		}
		return exitError{1, fmt.Sprintf("%s (%s)", ae.Message, ae.Code)}
	}
	return unreachable(err)
}

// unreachable is the exit of a command that could not talk to the sidecar
// at all: 69, with where to point it.
func unreachable(err error) error {
	return exitError{exitUnavailable, err.Error() + "; is the sidecar running? set --socket or BATON_SOCKET to its socket"}
}

// printHeldHere writes, for each holder of lock l that holds through this
// sidecar, its local process.
func printHeldHere(w io.Writer, l lockapi.Status) {
	holders := []lockapi.Holder{}
	if l.Holder != nil {
		holders = append(holders, *l.Holder)
	}
	if len(l.Holders) > 0 {
		holders = holders[:0]
		for _, h := range l.Holders {
			holders = append(holders, h.Holder)
		}
	}
	for _, h := range holders {
		if h.Process != nil {
			fmt.Fprintf(w, "held here by %s: %s\n", h.Owner, processText(h.Process))
		}
	}
}

// printQueuedHere writes the callers of this sidecar queued behind its
// own contender of lock l, first first.
func printQueuedHere(w io.Writer, l lockapi.Status, now time.Time) {
	if len(l.QueuedHere) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nQUEUED HERE\tOWNER\tSINCE\tPROCESS")
	for i, q := range l.QueuedHere {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", i+1, dash(q.Owner), agoText(now, q.Since), processText(q.Process))
	}
	tw.Flush()
}

// agoText is how long before now t was, "-" when not known.
func agoText(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return now.Sub(t).Round(time.Second).String() + " ago"
}

// processText is a local process as a person reads it: its pid and
// command, "-" when it is not known.
func processText(p *lockapi.Process) string {
	switch {
	case p == nil:
		return "-"
	case p.Unseen != "" && p.PID == 0:
		return "(not visible to the sidecar: shareProcessNamespace)"
	case p.Unseen != "":
		return fmt.Sprintf("pid %d (unknown: %s)", p.PID, p.Unseen)
	case p.Exited:
		return fmt.Sprintf("pid %d (exited)", p.PID)
	}
	cmd := p.Command
	if len(cmd) > 60 {
		i := 57
		for i > 0 && !utf8.RuneStart(cmd[i]) {
			i--
		}
		cmd = cmd[:i] + "..."
	}
	return fmt.Sprintf("pid %d: %s", p.PID, cmd)
}
