package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	baton "github.com/baton-dev/baton/clients/go"
	"github.com/baton-dev/baton/clients/go/lockapi"
	"github.com/baton-dev/baton/internal/keyspace"
)

// newLocksWatchCmd is baton locks watch.
func newLocksWatchCmd(o *locksOptions, stdout, stderr io.Writer) *cobra.Command {
	var prefix string
	watch := &cobra.Command{
		Use:   "watch [KEY | --prefix P]",
		Short: "Follow a lock (or every lock under a prefix): who holds it, as it changes",
		Long: `Follow a lock, or every lock whose key starts with --prefix: first their
state, then every grant, release, expiry, loss and change of waiters, with
etcd's revision, until interrupted. This is how to observe a leader elected
with a held lock. -o json prints the events as the sidecar sends them, one
JSON object a line.

The watch outlives the sidecar: when its stream ends (a restart) or falls
silent, baton locks watch says so on stderr, connects again and reads the
locks anew; those states are marked (resynced), and a lock held before the
gap that is free after it is shown free.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			key := ""
			if len(args) == 1 {
				key = args[0]
				if _, err := keyspace.ParseKey(key); err != nil {
					return usageError{err}
				}
				if prefix != "" {
					return usageError{errors.New("give a KEY or --prefix, not both")}
				}
			} else if err := keyspace.ValidatePrefix(prefix); err != nil {
				return usageError{fmt.Errorf("--prefix: %w", err)}
			}
			emit := func(ev lockapi.WatchEvent) error {
				if o.output == "json" {
					return writeJSONLine(stdout, ev)
				}
				if ev.Event != lockapi.WatchHeartbeat {
					fmt.Fprintln(stdout, watchLine(ev))
				}
				return nil
			}
			lastRetry := ""
			err := baton.New(o.socket).Follow(cmd.Context(), key, prefix, baton.FollowOptions{
				OnGap: func(err error) {
					fmt.Fprintf(stderr, "baton: the watch ended (%v); connecting to %s again\n", err, o.socket)
					lastRetry = ""
				},
				OnRetry: func(err error) {
					// Each new reason once, not every attempt's.
					if msg := err.Error(); msg != lastRetry {
						fmt.Fprintf(stderr, "baton: not yet: %s; trying again\n", msg)
						lastRetry = msg
					}
				},
				OnResumed: func() {
					fmt.Fprintln(stderr, "baton: watching again; the states that follow are read anew")
				},
			}, emit)
			if err != nil {
				return apiFailed(err)
			}
			return nil
		},
	}
	watch.Flags().StringVar(&prefix, "prefix", "", "every lock whose key starts with this (default: all)")
	return watch
}

// watchLine is a watch event as a line of text.
func watchLine(ev lockapi.WatchEvent) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s  rev %-6d %-9s", ev.At.Local().Format(time.TimeOnly), ev.Revision, ev.Event)
	if ev.Key != "" {
		fmt.Fprintf(&b, " %s", ev.Key)
	}
	if ev.Holder != nil {
		fmt.Fprintf(&b, "  %s fence %d", holderName(ev.Holder), ev.Fence)
	}
	if l := ev.Lock; l != nil {
		switch {
		case !l.Held:
			b.WriteString("  free")
		case ev.Event == lockapi.WatchState:
			fmt.Fprintf(&b, "  held by %s fence %d", holderName(l.Holder), l.Fence)
		}
		if l.Held && heldOf(*l) != "1" {
			fmt.Fprintf(&b, " (%s)", heldOf(*l))
		}
		fmt.Fprintf(&b, ", %d waiting", l.Waiters)
	}
	if ev.Resynced {
		b.WriteString("  (read again after a gap in the watch)")
	}
	return b.String()
}

func writeJSONLine(w io.Writer, v any) error { return json.NewEncoder(w).Encode(v) }
