package etcdbackup

import (
	"context"
	"log/slog"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// retry is how soon a snapshot that failed is tried again.
const retry = time.Minute

// Run takes a snapshot every cfg.Every until ctx ends, logging each: the
// first once the newest in the directory is that old, so that a restart
// takes none early. A snapshot that fails is tried again a minute later.
func Run(ctx context.Context, cli *clientv3.Client, cfg Config, log *slog.Logger) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	next := time.Now()
	if all, err := List(cfg.Dir); err != nil {
		return err
	} else if len(all) > 0 {
		next = all[0].Taken.Add(cfg.Every)
		log.Info("etcd backups: the newest is here; the next is due then", "newest", all[0].Name, "next", next.UTC().Format(time.RFC3339), "kept", len(all))
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Until(next)):
		}
		start := time.Now()
		b, deleted, err := Take(ctx, cli, cfg, start)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			log.Error("etcd backup failed; trying again", "err", err, "in", retry)
			next = time.Now().Add(retry)
			continue
		}
		log.Info("etcd backup written", "file", b.Name, "revision", b.Revision, "size", b.Size, "took", time.Since(start).Round(time.Millisecond), "deleted", deleted)
		next = start.Add(cfg.Every)
	}
}
