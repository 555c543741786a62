package etcdbackup

import (
	"context"
	"log/slog"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// retry is how soon a snapshot that failed is tried again.
const retry = time.Minute

// Observer hears what Run does: package metrics makes it Prometheus series,
// which an alert reads to say that no backup was written for too long.
type Observer interface {
	// Started reports the schedule, and the newest snapshot already kept
	// (nil when there is none) with how many are kept.
	Started(every time.Duration, newest *Backup, kept int)
	// Took reports a snapshot written, how long it took, and how many
	// are kept after it.
	Took(b Backup, took time.Duration, kept int)
	// Failed reports a snapshot that failed.
	Failed(err error)
}

// Run takes a snapshot every cfg.Every until ctx ends, logging each and
// telling obs (which may be nil): the first once the newest in the
// directory is that old, so that a restart takes none early. A snapshot
// that fails is tried again a minute later.
func Run(ctx context.Context, cli *clientv3.Client, cfg Config, log *slog.Logger, obs Observer) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if obs == nil {
		obs = nopObserver{}
	}
	all, err := List(cfg.Dir)
	if err != nil {
		return err
	}
	next := time.Now()
	if len(all) > 0 {
		next = all[0].Taken.Add(cfg.Every)
		log.Info("etcd backups: the newest is here; the next is due then", "newest", all[0].Name, "next", next.UTC().Format(time.RFC3339), "kept", len(all))
		obs.Started(cfg.Every, &all[0], len(all))
	} else {
		obs.Started(cfg.Every, nil, 0)
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
			obs.Failed(err)
			next = time.Now().Add(retry)
			continue
		}
		took := time.Since(start)
		log.Info("etcd backup written", "file", b.Name, "revision", b.Revision, "size", b.Size, "took", took.Round(time.Millisecond), "deleted", deleted)
		kept := cfg.Keep
		if all, err := List(cfg.Dir); err == nil {
			kept = len(all)
		}
		obs.Took(b, took, kept)
		next = start.Add(cfg.Every)
	}
}

// nopObserver hears nothing.
type nopObserver struct{}

func (nopObserver) Started(time.Duration, *Backup, int) {}
func (nopObserver) Took(Backup, time.Duration, int)     {}
func (nopObserver) Failed(error)                        {}
