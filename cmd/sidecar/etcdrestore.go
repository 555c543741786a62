//go:build !lean

package main

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/baton-dev/baton/internal/etcdbackup"
)

// newEtcdRestoreCmd is `baton etcd-restore`, the step of a restore of the
// chart's etcd that a Job runs on the first member's volume
// (docs/operations.md, "Restore etcd from a backup").
func newEtcdRestoreCmd(stdout io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "etcd-restore",
		Short: "Replace an etcd member's data with a snapshot's, as an etcd of one member whose revision is bumped past every fence granted",
		Long: `Restore a snapshot (--snapshot, or the newest in --backups) into etcd's
--data-dir as an etcd of one member (--name, --peer-url) with a new
cluster id, its revision bumped by --revision-bump and compacted there:
every fence granted after the snapshot was taken stays below every fence
granted from it, and every sidecar sees that etcd is not the etcd it was.
The data there before is removed once the restored data is whole beside
it. Started, the member runs alone; the chart's other members, started on
empty volumes, are added back to it one at a time by the controller.`,
		Args: cobra.NoArgs,
	}
	cfg := etcdbackup.RestoreConfig{RevisionBump: etcdbackup.DefaultRevisionBump}
	var backups string
	fs := cmd.Flags()
	fs.SortFlags = false
	fs.StringVar(&cfg.Snapshot, "snapshot", "", "the snapshot file to restore")
	fs.StringVar(&backups, "backups", "", "restore the newest snapshot in this directory (etcd-backup's --dir), rather than --snapshot")
	fs.StringVar(&cfg.DataDir, "data-dir", "", "etcd's --data-dir, whose data is replaced (required)")
	fs.StringVar(&cfg.Name, "name", "", "the member's name, etcd's --name (required)")
	fs.StringVar(&cfg.PeerURL, "peer-url", "", "the member's peer URL, etcd's --initial-advertise-peer-urls (required)")
	fs.Int64Var(&cfg.RevisionBump, "revision-bump", cfg.RevisionBump, "added to the snapshot's revision: more than the revisions etcd reached after it")
	fs.StringVar(&cfg.Token, "token", "", "the restored cluster's --initial-cluster-token; default baton-restore-<UTC time>")
	cmd.RunE = func(*cobra.Command, []string) error {
		if (cfg.Snapshot == "") == (backups == "") {
			return usageError{errors.New("--snapshot or --backups: give one")}
		}
		if backups != "" {
			all, err := etcdbackup.List(backups)
			if err != nil {
				return fmt.Errorf("--backups: %w", err)
			}
			if len(all) == 0 {
				return fmt.Errorf("--backups %s: no snapshot there", backups)
			}
			cfg.Snapshot = filepath.Join(backups, all[0].Name)
		}
		if err := cfg.Validate(); err != nil {
			return usageError{flagError(err)}
		}
		rev, err := etcdbackup.Restore(cfg, zap.NewNop())
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "restored %s into %s as the member %s: etcd starts at revision %d, alone; the other members join it\n", filepath.Base(cfg.Snapshot), cfg.DataDir, cfg.Name, rev)
		return nil
	}
	return cmd
}
