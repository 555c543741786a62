package etcdbackup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"

	"github.com/baton-dev/baton/internal/config"
)

// RestoreConfig says what Restore makes of a snapshot.
type RestoreConfig struct {
	// Snapshot is the snapshot's file.
	Snapshot string
	// DataDir is etcd's --data-dir, whose data the restore replaces.
	DataDir string
	// Name and PeerURL are the member's, as etcd's --name and
	// --initial-advertise-peer-urls say them.
	Name, PeerURL string
	// Token is the restored cluster's --initial-cluster-token: a new one
	// makes a new cluster id, by which every sidecar knows etcd is not the
	// etcd it was. Default baton-restore-<UTC time>.
	Token string
	// RevisionBump is added to the snapshot's revision, which is marked
	// compacted there: it must pass every revision etcd reached after the
	// snapshot, every fence granted since. Default 1,000,000,000.
	RevisionBump int64
}

// DefaultRevisionBump is RestoreConfig.RevisionBump's default: far more
// revisions than etcd reaches between two snapshots, and far fewer than
// an int64 holds.
const DefaultRevisionBump = 1_000_000_000

// Validate reports the first invalid field.
func (c RestoreConfig) Validate() error {
	switch {
	case c.Snapshot == "":
		return config.Invalid("etcdbackup.Snapshot", "snapshot: required")
	case c.DataDir == "":
		return config.Invalid("etcdbackup.DataDir", "etcd's data directory: required")
	case c.Name == "" || c.PeerURL == "":
		return config.Invalid("etcdbackup.Member", "the member's name and peer URL: required")
	case c.RevisionBump < 1:
		return config.Invalid("etcdbackup.RevisionBump", "revision bump %d: must be positive, past every revision reached since the snapshot", c.RevisionBump)
	}
	return nil
}

// Restore makes cfg.DataDir hold the snapshot's data as an etcd of one
// member, cfg.Name, with a new cluster id and its revision bumped: the
// other members join it once it runs (package etcdmembers adds them back).
// The data there before is removed only once the restored data is whole
// beside it. It returns the revision etcd starts at.
func Restore(cfg RestoreConfig, lg *zap.Logger) (int64, error) {
	if cfg.Token == "" {
		cfg.Token = "baton-restore-" + time.Now().UTC().Format(stampLayout)
	}
	if err := cfg.Validate(); err != nil {
		return 0, err
	}
	rev, err := Revision(cfg.Snapshot)
	if err != nil {
		return 0, fmt.Errorf("the snapshot %s: %w", cfg.Snapshot, err)
	}
	tmp := filepath.Clean(cfg.DataDir) + ".restoring"
	if err := os.RemoveAll(tmp); err != nil {
		return 0, err
	}
	err = snapshot.NewV3(lg).Restore(snapshot.RestoreConfig{
		SnapshotPath:        cfg.Snapshot,
		Name:                cfg.Name,
		OutputDataDir:       tmp,
		PeerURLs:            []string{cfg.PeerURL},
		InitialCluster:      cfg.Name + "=" + cfg.PeerURL,
		InitialClusterToken: cfg.Token,
		RevisionBump:        uint64(cfg.RevisionBump),
		MarkCompacted:       true,
	})
	if err != nil {
		os.RemoveAll(tmp)
		return 0, fmt.Errorf("restore %s: %w", cfg.Snapshot, err)
	}
	if err := os.RemoveAll(cfg.DataDir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return 0, fmt.Errorf("remove the data restored over: %w", err)
	}
	if err := os.Rename(tmp, cfg.DataDir); err != nil {
		return 0, err
	}
	return rev + cfg.RevisionBump, syncDir(filepath.Dir(filepath.Clean(cfg.DataDir)))
}
