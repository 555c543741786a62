// Package restart lets a sidecar restarted after a crash, while its app
// runs on, keep the app's locks: Save keeps a file next to the socket with
// the session's leases and the locks held; Read reads it back at start;
// Keep resumes those locks on the resumed session, or reports them lost.
package restart

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/baton-dev/baton/internal/coordinator"
	"github.com/baton-dev/baton/internal/lockstore"
)

// Keep takes over the locks of the process before this one (it crashed
// while the app ran on) if the keeper resumed their lease, or reports them
// lost to their owners.
func Keep(ctx context.Context, sessions lockstore.Sessions, coord *coordinator.Coordinator, prev State, log *slog.Logger) {
	sess, err := sessions.Current()
	if err != nil || !sess.Resumed() || !slices.ContainsFunc(prev.LeaseIDs(), func(id lockstore.LeaseID) bool { return lockstore.Owns(sess, id) }) {
		coord.Forget(prev.Locks)
		return
	}
	n, err := coord.Adopt(ctx, sess, prev.Locks)
	if err != nil {
		log.Error("could not take over every lock of the previous process", "err", err, "kept", n)
		return
	}
	log.Info("kept the locks of the previous process", "leases", len(prev.Leases), "kept", n, "known", len(prev.Locks))
}

// Save keeps the file at path up to date with the locks coord holds, until
// ctx ends.
//
// Changes are gathered for a short while (saveDelay, or four times the
// last write when that took long) and appended together: one write per
// grant and release would cost more than the lock service's own work, and
// compete with etcd for the disk. A lock granted in the last moments before
// a crash may so be missing from the file; the restarted sidecar then
// deletes its key, and its owner learns at its next call (404 not_held).
//
// high is the highest etcd revision seen, kept in the file with them.
func Save(ctx context.Context, path, scope string, coord *coordinator.Coordinator, sessions lockstore.Sessions, high func() int64) error {
	w := &stateWriter{path: path, scope: scope}
	defer w.closeFile()
	delay := saveDelay
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-coord.Changes():
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}
		start := time.Now()
		changes, held, complete := coord.HeldChanges()
		var leases []string // read after the changes: it has every lease they use
		if s, err := sessions.Current(); err == nil {
			leases = leasesHex(s.IDs())
		}
		var err error
		switch {
		case held == 0 || w.f == nil || !complete || w.compactable(held):
			locks, ids := coord.HeldLocks()
			err = w.snapshot(locks, coord.Losses(), leasesHex(ids), high())
		default:
			err = w.append(changes, leases, high())
		}
		if err != nil {
			return fmt.Errorf("state file: %w", err)
		}
		delay = max(saveDelay, 4*time.Since(start))
	}
}

// saveDelay is how long changes to the held locks are gathered before the
// file is written.
const saveDelay = 100 * time.Millisecond

// Closed writes the file at path for a sidecar that released every lock
// as it shut down: the locks that ended without their owners' release
// (lost), which the next process of the sidecar answers 410 lock_lost with
// the reason, and the highest etcd revision seen (high).
func Closed(path, scope string, lost []coordinator.LostLock, high int64) error {
	w := &stateWriter{path: path, scope: scope}
	defer w.closeFile()
	return w.snapshot(nil, lost, nil, high)
}
