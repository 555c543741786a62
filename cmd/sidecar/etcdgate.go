//go:build !lean

package main

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/baton-dev/baton/internal/etcdmembers"
)

// newEtcdGateCmd is `baton etcd-gate`, the init container of each member
// pod of the chart's etcd (package etcdmembers).
func newEtcdGateCmd(stderr io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "etcd-gate",
		Short: "Hold an etcd member's start until it is known whether it founds the cluster or joins it (the chart's etcd pods run it)",
		Long: `Return at once when etcd's data directory holds a member's data: etcd
restarts as the member it was. Without data, wait until the pod carries
the annotation ` + etcdmembers.StateAnnotation + ` (new or existing), which
Baton's controller sets: new when every member starts without data and
etcd has no quorum, existing once it has added this member back to the
running cluster. The annotations are read from the file the downward API
writes (--annotations). No credentials are needed.`,
		Args: cobra.NoArgs,
	}
	var dataDir, annotations, logLevel string
	poll := 500 * time.Millisecond
	fs := cmd.Flags()
	fs.StringVar(&dataDir, "data-dir", "", "etcd's --data-dir (required)")
	fs.StringVar(&annotations, "annotations", "", "the pod's annotations, a downward API file (required)")
	fs.DurationVar(&poll, "poll", poll, "how often the annotations are read")
	fs.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		switch {
		case dataDir == "":
			return usageError{errors.New("--data-dir: required: etcd's data directory")}
		case annotations == "":
			return usageError{errors.New("--annotations: required: the downward API file of the pod's annotations")}
		case poll <= 0:
			return usageError{fmt.Errorf("--poll %v: must be positive", poll)}
		}
		logs, err := newLoggers(stderr, logLevel)
		if err != nil {
			return err
		}
		_, err = etcdmembers.Gate(cmd.Context(), dataDir, annotations, poll, logs.log)
		return err
	}
	return cmd
}

// addMembersFlags adds mirror's flags that keep the chart's etcd's
// members, setting c: --etcd-members gives them.
func addMembersFlags(fs *pflag.FlagSet, peers *string, c *etcdmembers.Config) {
	fs.StringVar(peers, "etcd-members", "", "keep the membership of the chart's etcd, whose root user the controller is: its members as etcd's --initial-cluster (name=peer URL, comma-separated), each a pod of that name behind the etcd-gate init container; the leader tells a member pod without data whether to found the cluster or join it, and replaces a member that lost its data. Empty: none")
	fs.StringVar(&c.Selector, "etcd-members-selector", "", "with --etcd-members: the label selector of the member pods, in --leader-election-namespace")
	fs.DurationVar(&c.Interval, "etcd-members-interval", c.Interval, "with --etcd-members: how often the member pods and etcd's members are looked at")
}

// membersConfig completes c from the flags: nil without --etcd-members.
func membersConfig(fs *pflag.FlagSet, peers string, c etcdmembers.Config, namespace string) (*etcdmembers.Config, error) {
	if peers == "" {
		for _, f := range []string{"etcd-members-selector", "etcd-members-interval"} {
			if fs.Changed(f) {
				return nil, fmt.Errorf("--%s: only with --etcd-members", f)
			}
		}
		return nil, nil
	}
	p, err := etcdmembers.ParsePeers(peers)
	if err != nil {
		return nil, fmt.Errorf("--etcd-members: %w", err)
	}
	c.Peers, c.Namespace = p, namespace
	if c.Selector == "" {
		return nil, errors.New("--etcd-members-selector: required with --etcd-members: the label selector of etcd's member pods")
	}
	return &c, c.Validate()
}
