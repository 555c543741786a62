package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/baton-dev/baton/internal/client"
	"github.com/baton-dev/baton/internal/keyspace"
	"github.com/baton-dev/baton/internal/lockapi"
)

// newLocksWatchCmd is baton locks watch.
func newLocksWatchCmd(o *locksOptions, stdout io.Writer) *cobra.Command {
	var prefix string
	watch := &cobra.Command{
		Use:   "watch [KEY | --prefix P]",
		Short: "Follow a lock (or every lock under a prefix): who holds it, as it changes",
		Long: `Follow a lock, or every lock whose key starts with --prefix: first their
state, then every grant, release, expiry, loss and change of waiters, with
etcd's revision, until interrupted. This is how to observe a leader elected
with a held lock. -o json prints the events as the sidecar sends them, one
JSON object a line.`,
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
			w, err := client.New(o.socket).Watch(cmd.Context(), key, prefix)
			if err != nil {
				return apiFailed(err)
			}
			defer w.Close()
			for {
				ev, err := w.Next()
				if err != nil {
					if cmd.Context().Err() != nil {
						return nil
					}
					return exitError{exitUnavailable, "the watch ended: " + err.Error()}
				}
				if o.output == "json" {
					if err := writeJSONLine(stdout, ev); err != nil {
						return err
					}
					continue
				}
				if ev.Event != lockapi.WatchHeartbeat {
					fmt.Fprintln(stdout, watchLine(ev))
				}
			}
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
